package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// FuzzAgonesRESTBody sends any body to each of Agones' REST paths that
// takes one (docs/fuzzing.md), through the agent's Agones REST handler,
// onto a game server's state decided and folded by the events package, as
// the agent does: every answer is 200 or a 4xx refusal, never a crash or
// a 5xx, and whatever was accepted leaves the counters, lists and tracked
// players within their bounds.
func FuzzAgonesRESTBody(f *testing.F) {
	for _, seed := range []struct {
		path int
		body string
	}{
		{0, `{"key": "mode", "value": "ctf"}`}, {1, `{"key": "map", "value": "dust"}`}, {2, `{"seconds": "30"}`},
		{3, `{"countDiff": "2"}`}, {3, `{"count": "11"}`}, {3, `{"capacity": "-1"}`},
		{4, `{"capacity": "5", "values": ["x", "x"]}`}, {5, `{"value": "b"}`}, {6, `{"value": "zz"}`},
		{7, `{"playerID": "alice"}`}, {8, `{"count": "1"}`}, {9, `{}`}, {3, `{"countDiff": "9223372036854775807"}`},
	} {
		f.Add(seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, path int, body string) {
		paths := []struct{ method, path string }{
			{"PUT", "/metadata/label"}, {"PUT", "/metadata/annotation"}, {"POST", "/reserve"},
			{"PATCH", "/v1beta1/counters/rooms"}, {"PATCH", "/v1beta1/lists/players"},
			{"POST", "/v1beta1/lists/players:addValue"}, {"POST", "/v1beta1/lists/players:removeValue"},
			{"POST", "/alpha/player/connect"}, {"PUT", "/alpha/player/capacity"}, {"POST", "/health"},
		}
		p := paths[uint(path)%uint(len(paths))]
		ops := newStateOps(t)
		s := &agonesServer{ops: ops, identify: func(context.Context) (sdkCaller, bool) { return sdkCaller{}, true }}
		h, err := s.restHandler(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(p.method, p.path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && (rec.Code < 400 || rec.Code >= 500) {
			t.Fatalf("%s %s %q: HTTP %d %s", p.method, p.path, body, rec.Code, rec.Body)
		}
		st := ops.snapshot()
		for name, c := range st.GetCounters() {
			if c.GetCount() < 0 || c.GetCount() > c.GetCapacity() {
				t.Fatalf("counter %s out of its bounds: %v", name, c)
			}
		}
		for name, l := range st.GetLists() {
			if int64(len(l.GetValues())) > l.GetCapacity() || l.GetCapacity() > events.MaxListCapacity {
				t.Fatalf("list %s out of its bounds: %v", name, l)
			}
		}
		if int64(len(st.GetPlayers())) > events.MaxTrackedPlayers {
			t.Fatalf("%d tracked players", len(st.GetPlayers()))
		}
	})
}

// stateOps is sdkOps over one game server's state in memory, decided and
// folded by the events package as the agent does: what the Agones REST
// fuzz target reaches.
type stateOps struct {
	sdkOps // the calls a body cannot reach are not expected
	t      testing.TB
	mu     sync.Mutex
	state  *eventsv1.GameServerState
}

// newStateOps is a READY server of fleet arena with the counter rooms
// (1 of 10) and the list players (capacity 3, values a).
func newStateOps(t testing.TB) *stateOps {
	o := &stateOps{t: t}
	spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game",
		Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 10}},
		Lists:    map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"a"}}}}}
	events.NormalizeFleetSpec(spec)
	for _, cmd := range []events.GameServerCommand{
		events.ScheduleGameServer{Host: "hosts/h1", Spec: spec},
		events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: 1, Attempt: 1}},
		events.MarkReady{},
	} {
		if err := o.do(cmd); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// do decides cmd on the state and folds what it decided.
func (o *stateOps) do(cmd events.GameServerCommand) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	const name = "fleets/arena/gameServers/gs-1"
	msgs, err := events.DecideGameServer(name, o.state, cmd)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if o.state, err = events.ApplyGameServer(o.state, events.New(name, time.Now(), m)); err != nil {
			o.t.Fatalf("the fold refused what was decided: %v", err)
		}
	}
	return nil
}

func (o *stateOps) snapshot() *eventsv1.GameServerState {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state
}

func (o *stateOps) NoteCall(context.Context, sdkCaller, string)   {}
func (o *stateOps) HealthPing(context.Context, sdkCaller, string) {}
func (o *stateOps) GameServer(sdkCaller) *sdkv1.GameServer {
	gs := &gameServer{state: o.snapshot()}
	return gs.view()
}
func (o *stateOps) SetLabel(_ context.Context, _ sdkCaller, k, v string) error {
	return o.do(events.SetLabels{Set: map[string]string{k: v}})
}
func (o *stateOps) SetAnnotation(_ context.Context, _ sdkCaller, k, v string) error {
	return o.do(events.SetAnnotations{Set: map[string]string{k: v}})
}
func (o *stateOps) Reserve(_ context.Context, _ sdkCaller, d time.Duration) error {
	return o.do(events.Reserve{Until: time.Now().Add(d)})
}
func (o *stateOps) UpdateCounter(_ context.Context, _ sdkCaller, u events.UpdateCounter) (*eventsv1.Counter, error) {
	if err := o.do(u); err != nil {
		return nil, err
	}
	return o.snapshot().GetCounters()[u.Name], nil
}
func (o *stateOps) UpdateList(_ context.Context, _ sdkCaller, u events.UpdateList) (*eventsv1.List, error) {
	if err := o.do(u); err != nil {
		return nil, err
	}
	return o.snapshot().GetLists()[u.Name], nil
}
func (o *stateOps) TrackPlayer(_ context.Context, _ sdkCaller, id string, connected bool) (bool, error) {
	var cmd events.GameServerCommand = events.TrackPlayerDisconnect{PlayerID: id}
	if connected {
		cmd = events.TrackPlayerConnect{PlayerID: id}
	}
	return true, o.do(cmd)
}
func (o *stateOps) SetPlayerCapacity(_ context.Context, _ sdkCaller, n int64) error {
	return o.do(events.SetPlayerCapacity{Capacity: n})
}
