package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tetherhq/tether/events"
	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
	agonessdkalpha "github.com/tetherhq/tether/proto/agones/dev/sdk/alpha"
	agonessdkbeta "github.com/tetherhq/tether/proto/agones/dev/sdk/beta"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The conformance game server (agonesConformance) is the test binary
// run by an agent with agonesHelperEnv set to one of these: it drives
// every Agones SDK call it can over that transport, writes what it found
// to the file named by conformanceReportEnv ("PASS", or the failures one
// a line), then asks the agent to shut it down.
const (
	conformanceGRPC      = "conformance-grpc"
	conformanceREST      = "conformance-rest"
	conformanceReportEnv = "TETHER_TEST_AGONES_REPORT"
)

// agonesSDK is the part of Agones' SDK the conformance server drives,
// over gRPC (grpcSDK) or REST (restSDK). An error is a gRPC status in
// both: REST carries the code in its error body.
type agonesSDK interface {
	Ready(ctx context.Context) error
	Health(ctx context.Context) error
	SetLabel(ctx context.Context, key, value string) error
	SetAnnotation(ctx context.Context, key, value string) error
	Reserve(ctx context.Context, seconds int64) error
	Allocate(ctx context.Context) error
	Shutdown(ctx context.Context) error
	GameServer(ctx context.Context) (*agonessdk.GameServer, error)
	// Watch sends each GameServer the watch delivers to got, until ctx
	// ends.
	Watch(ctx context.Context, got chan<- *agonessdk.GameServer) error
	GetCounter(ctx context.Context, name string) (*agonessdkbeta.Counter, error)
	UpdateCounter(ctx context.Context, r *agonessdkbeta.CounterUpdateRequest) (*agonessdkbeta.Counter, error)
	GetList(ctx context.Context, name string) (*agonessdkbeta.List, error)
	UpdateList(ctx context.Context, l *agonessdkbeta.List, mask ...string) (*agonessdkbeta.List, error)
	AddListValue(ctx context.Context, name, value string) (*agonessdkbeta.List, error)
	RemoveListValue(ctx context.Context, name, value string) (*agonessdkbeta.List, error)
	PlayerConnect(ctx context.Context, id string) (bool, error)
	PlayerDisconnect(ctx context.Context, id string) (bool, error)
	SetPlayerCapacity(ctx context.Context, n int64) error
	GetPlayerCapacity(ctx context.Context) (int64, error)
	GetPlayerCount(ctx context.Context) (int64, error)
	IsPlayerConnected(ctx context.Context, id string) (bool, error)
	GetConnectedPlayers(ctx context.Context) ([]string, error)
}

// agonesConformance is the conformance game server; its exit code.
func agonesConformance(transport string) int {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	var sdk agonesSDK
	if transport == conformanceGRPC {
		conn, err := grpc.NewClient(os.Getenv(agent.EnvAgonesGRPCHost)+":"+os.Getenv(agent.EnvAgonesGRPCPort),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance: dial:", err)
			return 1
		}
		defer conn.Close()
		sdk = grpcSDK{agonessdk.NewSDKClient(conn), agonessdkbeta.NewSDKClient(conn), agonessdkalpha.NewSDKClient(conn)}
	} else {
		sdk = restSDK{base: "http://127.0.0.1:" + os.Getenv(agent.EnvAgonesHTTPPort)}
	}
	failures := runConformance(ctx, sdk)
	report := "PASS\n"
	if len(failures) > 0 {
		report = strings.Join(failures, "\n") + "\n"
	}
	if err := os.WriteFile(os.Getenv(conformanceReportEnv), []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "conformance: report:", err)
		return 1
	}
	if err := sdk.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "conformance: Shutdown:", err)
		return 1
	}
	<-ctx.Done() // the agent's SIGTERM
	return 0
}

// runConformance drives the calls and returns what did not hold. The
// fleet's template (conformanceTemplate) declares counter rooms (1 of 10)
// and list players (capacity 3, values a).
func runConformance(ctx context.Context, sdk agonesSDK) []string {
	var failures []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	must := func(what string, err error) bool {
		check(err == nil, "%s: %v", what, err)
		return err == nil
	}
	code := func(what string, err error, want codes.Code) {
		check(status.Code(err) == want, "%s: %v, want %s", what, err, want)
	}
	state := func(want string) {
		gs, err := sdk.GameServer(ctx)
		if must("GetGameServer", err) {
			check(gs.GetStatus().GetState() == want, "state %q, want %q", gs.GetStatus().GetState(), want)
		}
	}

	if !must("Ready", sdk.Ready(ctx)) {
		return failures
	}
	state("Ready")
	watched := make(chan *agonessdk.GameServer, 64)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() { _ = sdk.Watch(wctx, watched) }() // ends with wctx
	select {
	case first := <-watched:
		check(first.GetStatus().GetState() == "Ready", "the watch's first GameServer is %q, want Ready", first.GetStatus().GetState())
	case <-time.After(10 * time.Second):
		check(false, "the watch sent nothing at once")
	}
	for range 3 {
		must("Health", sdk.Health(ctx))
	}

	must("SetLabel", sdk.SetLabel(ctx, "mode", "ctf"))
	must("SetAnnotation", sdk.SetAnnotation(ctx, "map", "dust"))
	if gs, err := sdk.GameServer(ctx); must("GetGameServer", err) {
		m := gs.GetObjectMeta()
		check(m.GetAnnotations()["agones.dev/sdk-map"] == "dust", "annotations %v lack agones.dev/sdk-map=dust", m.GetAnnotations())
		check(m.GetLabels()["agones.dev/sdk-map"] == "", "the annotation is a label too: %v", m.GetLabels())
		_, allocated := m.GetAnnotations()["agones.dev/last-allocated"]
		check(!allocated, "agones.dev/last-allocated before any allocation: %v", m.GetAnnotations())
		check(m.GetLabels()["agones.dev/sdk-mode"] == "ctf", "labels %v lack agones.dev/sdk-mode=ctf", m.GetLabels())
		check(m.GetLabels()["agones.dev/fleet"] == "arena", "labels %v lack agones.dev/fleet=arena", m.GetLabels())
		check(m.GetName() == "gs-conformance" && m.GetNamespace() == "default" && len(m.GetUid()) == 36, "object_meta %v", m)
		check(m.GetCreationTimestamp() > 0 && m.GetCreationTimestamp() <= time.Now().Unix(), "creation_timestamp %d", m.GetCreationTimestamp())
		h := gs.GetSpec().GetHealth()
		check(h.GetPeriodSeconds() == 5 && h.GetFailureThreshold() == 3 && h.GetInitialDelaySeconds() == 7 && !h.GetDisabled(), "spec.health %v", h)
		st := gs.GetStatus()
		check(st.GetCounters()["rooms"].GetCount() == 1 && st.GetCounters()["rooms"].GetCapacity() == 10, "status.counters %v", st.GetCounters())
		check(slices.Equal(st.GetLists()["players"].GetValues(), []string{"a"}) && st.GetLists()["players"].GetCapacity() == 3, "status.lists %v", st.GetLists())
		check(len(st.GetPorts()) == 1 && st.GetPorts()[0].GetPort() > 0 && st.GetAddress() != "", "status address %q ports %v", st.GetAddress(), st.GetPorts())
	}

	// Counters: Agones' SDK conformance set.
	if c, err := sdk.GetCounter(ctx, "rooms"); must("GetCounter", err) {
		check(c.GetCount() == 1 && c.GetCapacity() == 10, "GetCounter rooms: %v", c)
	}
	if c, err := sdk.UpdateCounter(ctx, &agonessdkbeta.CounterUpdateRequest{Name: "rooms", CountDiff: 2}); must("UpdateCounter +2", err) {
		check(c.GetCount() == 3, "after +2: %v", c)
	}
	_, err := sdk.UpdateCounter(ctx, &agonessdkbeta.CounterUpdateRequest{Name: "rooms", Count: wrapperspb.Int64(11)})
	code("UpdateCounter count 11 of 10", err, codes.OutOfRange)
	_, err = sdk.UpdateCounter(ctx, &agonessdkbeta.CounterUpdateRequest{Name: "rooms", CountDiff: -4})
	code("UpdateCounter -4 from 3", err, codes.OutOfRange)
	if c, err := sdk.UpdateCounter(ctx, &agonessdkbeta.CounterUpdateRequest{Name: "rooms", Capacity: wrapperspb.Int64(20), Count: wrapperspb.Int64(12)}); must("UpdateCounter capacity 20, count 12", err) {
		check(c.GetCount() == 12 && c.GetCapacity() == 20, "after capacity 20, count 12: %v", c)
	}
	_, err = sdk.GetCounter(ctx, "sessions")
	code("GetCounter of an undeclared counter", err, codes.NotFound)
	_, err = sdk.UpdateCounter(ctx, &agonessdkbeta.CounterUpdateRequest{Name: "sessions", CountDiff: 1})
	code("UpdateCounter of an undeclared counter", err, codes.NotFound)

	// Lists.
	if l, err := sdk.GetList(ctx, "players"); must("GetList", err) {
		check(slices.Equal(l.GetValues(), []string{"a"}) && l.GetCapacity() == 3, "GetList players: %v", l)
	}
	if l, err := sdk.AddListValue(ctx, "players", "b"); must("AddListValue b", err) {
		check(slices.Equal(l.GetValues(), []string{"a", "b"}), "after adding b: %v", l)
	}
	_, err = sdk.AddListValue(ctx, "players", "a")
	code("AddListValue of a value in the list", err, codes.AlreadyExists)
	_, err = sdk.RemoveListValue(ctx, "players", "zz")
	code("RemoveListValue of a value not in the list", err, codes.NotFound)
	must("AddListValue c", func() error { _, err := sdk.AddListValue(ctx, "players", "c"); return err }())
	_, err = sdk.AddListValue(ctx, "players", "d")
	code("AddListValue to a full list", err, codes.OutOfRange)
	if l, err := sdk.RemoveListValue(ctx, "players", "a"); must("RemoveListValue a", err) {
		check(slices.Equal(l.GetValues(), []string{"b", "c"}), "after removing a: %v", l)
	}
	if l, err := sdk.UpdateList(ctx, &agonessdkbeta.List{Name: "players", Values: []string{"x", "y", "x"}}, "values"); must("UpdateList values", err) {
		check(slices.Equal(l.GetValues(), []string{"x", "y"}) && l.GetCapacity() == 3, "after values x y x: %v", l)
	}
	// A capacity below the values keeps the first of them, as Agones does.
	if l, err := sdk.UpdateList(ctx, &agonessdkbeta.List{Name: "players", Capacity: 1}, "capacity"); must("UpdateList capacity 1", err) {
		check(slices.Equal(l.GetValues(), []string{"x"}) && l.GetCapacity() == 1, "after capacity 1 under x y: %v", l)
	}
	if l, err := sdk.UpdateList(ctx, &agonessdkbeta.List{Name: "players", Capacity: 5, Values: []string{"x", "y"}}, "capacity", "values"); must("UpdateList capacity 5, values x y", err) {
		check(slices.Equal(l.GetValues(), []string{"x", "y"}) && l.GetCapacity() == 5, "after capacity 5: %v", l)
	}
	// An empty mask changes nothing, as Agones' SDK server has it (Agones'
	// Node.js SDK sends one for setListCapacity).
	if l, err := sdk.UpdateList(ctx, &agonessdkbeta.List{Name: "players", Capacity: 2}); must("UpdateList with an empty mask", err) {
		check(slices.Equal(l.GetValues(), []string{"x", "y"}) && l.GetCapacity() == 5, "after an empty mask: %v", l)
	}
	_, err = sdk.GetList(ctx, "spectators")
	code("GetList of an undeclared list", err, codes.NotFound)
	if gs, err := sdk.GameServer(ctx); must("GetGameServer", err) {
		check(gs.GetStatus().GetCounters()["rooms"].GetCount() == 12, "status.counters after the changes: %v", gs.GetStatus().GetCounters())
		check(slices.Equal(gs.GetStatus().GetLists()["players"].GetValues(), []string{"x", "y"}), "status.lists after the changes: %v", gs.GetStatus().GetLists())
	}

	// Player tracking: Agones' conformance set, and its bounds.
	if n, err := sdk.GetPlayerCapacity(ctx); must("GetPlayerCapacity", err) {
		check(n == 2, "the capacity before the game sets one: %d, want the fleet's max_players 2", n)
	}
	must("SetPlayerCapacity 10", sdk.SetPlayerCapacity(ctx, 10))
	if n, err := sdk.GetPlayerCapacity(ctx); must("GetPlayerCapacity", err) {
		check(n == 10, "capacity %d after SetPlayerCapacity(10)", n)
	}
	if ok, err := sdk.PlayerConnect(ctx, "alice"); must("PlayerConnect", err) {
		check(ok, "PlayerConnect(alice) answered false")
	}
	if ok, err := sdk.PlayerConnect(ctx, "alice"); must("PlayerConnect again", err) {
		check(!ok, "PlayerConnect(alice) a second time answered true")
	}
	if ok, err := sdk.IsPlayerConnected(ctx, "alice"); must("IsPlayerConnected", err) {
		check(ok, "alice is not connected")
	}
	if ids, err := sdk.GetConnectedPlayers(ctx); must("GetConnectedPlayers", err) {
		check(slices.Equal(ids, []string{"alice"}), "connected players %v", ids)
	}
	if n, err := sdk.GetPlayerCount(ctx); must("GetPlayerCount", err) {
		check(n == 1, "player count %d, want 1", n)
	}
	if gs, err := sdk.GameServer(ctx); must("GetGameServer", err) {
		p := gs.GetStatus().GetPlayers()
		check(p.GetCount() == 1 && p.GetCapacity() == 10 && slices.Equal(p.GetIds(), []string{"alice"}), "status.players %v", p)
	}
	if ok, err := sdk.PlayerDisconnect(ctx, "alice"); must("PlayerDisconnect", err) {
		check(ok, "PlayerDisconnect(alice) answered false")
	}
	if ok, err := sdk.PlayerDisconnect(ctx, "alice"); must("PlayerDisconnect again", err) {
		check(!ok, "PlayerDisconnect(alice) a second time answered true")
	}
	if n, err := sdk.GetPlayerCount(ctx); must("GetPlayerCount", err) {
		check(n == 0, "player count %d after the disconnect, want 0", n)
	}
	must("SetPlayerCapacity 1", sdk.SetPlayerCapacity(ctx, 1))
	must("PlayerConnect bob", func() error { _, err := sdk.PlayerConnect(ctx, "bob"); return err }())
	_, err = sdk.PlayerConnect(ctx, "carol")
	code("PlayerConnect past the capacity", err, codes.OutOfRange)
	code("SetPlayerCapacity -1", sdk.SetPlayerCapacity(ctx, -1), codes.OutOfRange)

	// The lifecycle: Reserve, Allocate, Ready again, Reserve(0).
	must("Reserve 30", sdk.Reserve(ctx, 30))
	state("Reserved")
	must("Allocate", sdk.Allocate(ctx))
	state("Allocated")
	if gs, err := sdk.GameServer(ctx); must("GetGameServer", err) {
		at, err := time.Parse(time.RFC3339Nano, gs.GetObjectMeta().GetAnnotations()["agones.dev/last-allocated"])
		check(err == nil && time.Since(at) < time.Minute, "agones.dev/last-allocated after Allocate: %v (%v)", gs.GetObjectMeta().GetAnnotations(), err)
	}
	must("Ready after the match", sdk.Ready(ctx))
	state("Ready")
	must("Reserve 0", sdk.Reserve(ctx, 0))
	state("Reserved")
	code("Reserve -1", sdk.Reserve(ctx, -1), codes.InvalidArgument)

	// The watch saw every state, in order.
	want := []string{"Ready", "Reserved", "Allocated", "Ready", "Reserved"}
	var seen []string
	deadline := time.After(10 * time.Second)
	for !isSubsequence(want, seen) {
		select {
		case gs := <-watched:
			if s := gs.GetStatus().GetState(); len(seen) == 0 || seen[len(seen)-1] != s {
				seen = append(seen, s)
			}
			continue
		case <-deadline:
		}
		break
	}
	check(isSubsequence(want, seen), "the watch saw the states %v, want %v in that order", seen, want)
	return failures
}

// isSubsequence: want appears in got in order, with others between.
func isSubsequence(want, got []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// grpcSDK is Agones' SDK over gRPC, as its client libraries call it.
type grpcSDK struct {
	c agonessdk.SDKClient
	b agonessdkbeta.SDKClient
	a agonessdkalpha.SDKClient
}

func (g grpcSDK) Ready(ctx context.Context) error {
	_, err := g.c.Ready(ctx, &agonessdk.Empty{})
	return err
}

func (g grpcSDK) Health(ctx context.Context) error {
	h, err := g.c.Health(ctx)
	if err == nil {
		err = h.Send(&agonessdk.Empty{})
	}
	if err == nil {
		_, err = h.CloseAndRecv()
	}
	return err
}

func (g grpcSDK) SetLabel(ctx context.Context, k, v string) error {
	_, err := g.c.SetLabel(ctx, &agonessdk.KeyValue{Key: k, Value: v})
	return err
}

func (g grpcSDK) SetAnnotation(ctx context.Context, k, v string) error {
	_, err := g.c.SetAnnotation(ctx, &agonessdk.KeyValue{Key: k, Value: v})
	return err
}

func (g grpcSDK) Reserve(ctx context.Context, s int64) error {
	_, err := g.c.Reserve(ctx, &agonessdk.Duration{Seconds: s})
	return err
}

func (g grpcSDK) Allocate(ctx context.Context) error {
	_, err := g.c.Allocate(ctx, &agonessdk.Empty{})
	return err
}

func (g grpcSDK) Shutdown(ctx context.Context) error {
	_, err := g.c.Shutdown(ctx, &agonessdk.Empty{})
	return err
}

func (g grpcSDK) GameServer(ctx context.Context) (*agonessdk.GameServer, error) {
	return g.c.GetGameServer(ctx, &agonessdk.Empty{})
}

func (g grpcSDK) Watch(ctx context.Context, got chan<- *agonessdk.GameServer) error {
	w, err := g.c.WatchGameServer(ctx, &agonessdk.Empty{})
	for err == nil {
		var gs *agonessdk.GameServer
		if gs, err = w.Recv(); err == nil {
			got <- gs
		}
	}
	return err
}

func (g grpcSDK) GetCounter(ctx context.Context, name string) (*agonessdkbeta.Counter, error) {
	return g.b.GetCounter(ctx, &agonessdkbeta.GetCounterRequest{Name: name})
}

func (g grpcSDK) UpdateCounter(ctx context.Context, r *agonessdkbeta.CounterUpdateRequest) (*agonessdkbeta.Counter, error) {
	return g.b.UpdateCounter(ctx, &agonessdkbeta.UpdateCounterRequest{CounterUpdateRequest: r})
}

func (g grpcSDK) GetList(ctx context.Context, name string) (*agonessdkbeta.List, error) {
	return g.b.GetList(ctx, &agonessdkbeta.GetListRequest{Name: name})
}

func (g grpcSDK) UpdateList(ctx context.Context, l *agonessdkbeta.List, mask ...string) (*agonessdkbeta.List, error) {
	return g.b.UpdateList(ctx, &agonessdkbeta.UpdateListRequest{List: l, UpdateMask: &fieldmaskpb.FieldMask{Paths: mask}})
}

func (g grpcSDK) AddListValue(ctx context.Context, name, value string) (*agonessdkbeta.List, error) {
	return g.b.AddListValue(ctx, &agonessdkbeta.AddListValueRequest{Name: name, Value: value})
}

func (g grpcSDK) RemoveListValue(ctx context.Context, name, value string) (*agonessdkbeta.List, error) {
	return g.b.RemoveListValue(ctx, &agonessdkbeta.RemoveListValueRequest{Name: name, Value: value})
}

func (g grpcSDK) PlayerConnect(ctx context.Context, id string) (bool, error) {
	b, err := g.a.PlayerConnect(ctx, &agonessdkalpha.PlayerID{PlayerID: id})
	return b.GetBool(), err
}

func (g grpcSDK) PlayerDisconnect(ctx context.Context, id string) (bool, error) {
	b, err := g.a.PlayerDisconnect(ctx, &agonessdkalpha.PlayerID{PlayerID: id})
	return b.GetBool(), err
}

func (g grpcSDK) SetPlayerCapacity(ctx context.Context, n int64) error {
	_, err := g.a.SetPlayerCapacity(ctx, &agonessdkalpha.Count{Count: n})
	return err
}

func (g grpcSDK) GetPlayerCapacity(ctx context.Context) (int64, error) {
	c, err := g.a.GetPlayerCapacity(ctx, &agonessdkalpha.Empty{})
	return c.GetCount(), err
}

func (g grpcSDK) GetPlayerCount(ctx context.Context) (int64, error) {
	c, err := g.a.GetPlayerCount(ctx, &agonessdkalpha.Empty{})
	return c.GetCount(), err
}

func (g grpcSDK) IsPlayerConnected(ctx context.Context, id string) (bool, error) {
	b, err := g.a.IsPlayerConnected(ctx, &agonessdkalpha.PlayerID{PlayerID: id})
	return b.GetBool(), err
}

func (g grpcSDK) GetConnectedPlayers(ctx context.Context) ([]string, error) {
	l, err := g.a.GetConnectedPlayers(ctx, &agonessdkalpha.Empty{})
	return l.GetList(), err
}

// restSDK is Agones' SDK over its REST paths, with bodies as Agones'
// documentation shows them (int64s as JSON strings).
type restSDK struct{ base string }

// call sends body to path and decodes the answer into out (nil: any
// JSON object); a refusal is the gRPC status its body carries.
func (r restSDK) call(ctx context.Context, method, path, body string, out proto.Message) error {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code    codes.Code `json:"code"`
			Message string     `json:"message"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Code == codes.OK {
			return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, raw)
		}
		return status.Errorf(e.Code, "%s %s: HTTP %d: %s", method, path, resp.StatusCode, e.Message)
	}
	if out == nil {
		var obj map[string]any
		return json.Unmarshal(raw, &obj)
	}
	return protojson.Unmarshal(raw, out)
}

func (r restSDK) Ready(ctx context.Context) error  { return r.call(ctx, "POST", "/ready", "{}", nil) }
func (r restSDK) Health(ctx context.Context) error { return r.call(ctx, "POST", "/health", "{}", nil) }
func (r restSDK) SetLabel(ctx context.Context, k, v string) error {
	return r.call(ctx, "PUT", "/metadata/label", fmt.Sprintf(`{"key": %q, "value": %q}`, k, v), nil)
}
func (r restSDK) SetAnnotation(ctx context.Context, k, v string) error {
	return r.call(ctx, "PUT", "/metadata/annotation", fmt.Sprintf(`{"key": %q, "value": %q}`, k, v), nil)
}
func (r restSDK) Reserve(ctx context.Context, s int64) error {
	return r.call(ctx, "POST", "/reserve", fmt.Sprintf(`{"seconds": "%d"}`, s), nil)
}
func (r restSDK) Allocate(ctx context.Context) error {
	return r.call(ctx, "POST", "/allocate", "{}", nil)
}
func (r restSDK) Shutdown(ctx context.Context) error {
	return r.call(ctx, "POST", "/shutdown", "{}", nil)
}
func (r restSDK) GameServer(ctx context.Context) (*agonessdk.GameServer, error) {
	gs := &agonessdk.GameServer{}
	return gs, r.call(ctx, "GET", "/gameserver", "", gs)
}

func (r restSDK) Watch(ctx context.Context, got chan<- *agonessdk.GameServer) error {
	req, err := http.NewRequestWithContext(ctx, "GET", r.base+"/watch/gameserver", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for lines.Scan() {
		var line struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(lines.Bytes(), &line); err != nil {
			return err
		}
		gs := &agonessdk.GameServer{}
		if err := protojson.Unmarshal(line.Result, gs); err != nil {
			return err
		}
		got <- gs
	}
	return lines.Err()
}

func (r restSDK) GetCounter(ctx context.Context, name string) (*agonessdkbeta.Counter, error) {
	c := &agonessdkbeta.Counter{}
	return c, r.call(ctx, "GET", "/v1beta1/counters/"+name, "", c)
}

func (r restSDK) UpdateCounter(ctx context.Context, u *agonessdkbeta.CounterUpdateRequest) (*agonessdkbeta.Counter, error) {
	var body []string
	if u.GetCount() != nil {
		body = append(body, fmt.Sprintf(`"count": "%d"`, u.GetCount().GetValue()))
	}
	if u.GetCapacity() != nil {
		body = append(body, fmt.Sprintf(`"capacity": "%d"`, u.GetCapacity().GetValue()))
	}
	if u.GetCountDiff() != 0 {
		body = append(body, fmt.Sprintf(`"countDiff": "%d"`, u.GetCountDiff()))
	}
	c := &agonessdkbeta.Counter{}
	return c, r.call(ctx, "PATCH", "/v1beta1/counters/"+u.GetName(), "{"+strings.Join(body, ", ")+"}", c)
}

func (r restSDK) GetList(ctx context.Context, name string) (*agonessdkbeta.List, error) {
	l := &agonessdkbeta.List{}
	return l, r.call(ctx, "GET", "/v1beta1/lists/"+name, "", l)
}

// UpdateList sends only the masked fields: the gateway takes the mask
// from the body's fields, as Agones' REST clients rely on.
func (r restSDK) UpdateList(ctx context.Context, l *agonessdkbeta.List, mask ...string) (*agonessdkbeta.List, error) {
	body := map[string]any{}
	for _, m := range mask {
		switch m {
		case "capacity":
			body["capacity"] = fmt.Sprint(l.GetCapacity())
		case "values":
			body["values"] = l.GetValues()
		}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	out := &agonessdkbeta.List{}
	return out, r.call(ctx, "PATCH", "/v1beta1/lists/"+l.GetName(), string(raw), out)
}

func (r restSDK) AddListValue(ctx context.Context, name, value string) (*agonessdkbeta.List, error) {
	l := &agonessdkbeta.List{}
	return l, r.call(ctx, "POST", "/v1beta1/lists/"+name+":addValue", fmt.Sprintf(`{"value": %q}`, value), l)
}

func (r restSDK) RemoveListValue(ctx context.Context, name, value string) (*agonessdkbeta.List, error) {
	l := &agonessdkbeta.List{}
	return l, r.call(ctx, "POST", "/v1beta1/lists/"+name+":removeValue", fmt.Sprintf(`{"value": %q}`, value), l)
}

func (r restSDK) PlayerConnect(ctx context.Context, id string) (bool, error) {
	b := &agonessdkalpha.Bool{}
	err := r.call(ctx, "POST", "/alpha/player/connect", fmt.Sprintf(`{"playerID": %q}`, id), b)
	return b.GetBool(), err
}

func (r restSDK) PlayerDisconnect(ctx context.Context, id string) (bool, error) {
	b := &agonessdkalpha.Bool{}
	err := r.call(ctx, "POST", "/alpha/player/disconnect", fmt.Sprintf(`{"playerID": %q}`, id), b)
	return b.GetBool(), err
}

func (r restSDK) SetPlayerCapacity(ctx context.Context, n int64) error {
	return r.call(ctx, "PUT", "/alpha/player/capacity", fmt.Sprintf(`{"count": "%d"}`, n), nil)
}

func (r restSDK) GetPlayerCapacity(ctx context.Context) (int64, error) {
	c := &agonessdkalpha.Count{}
	err := r.call(ctx, "GET", "/alpha/player/capacity", "", c)
	return c.GetCount(), err
}

func (r restSDK) GetPlayerCount(ctx context.Context) (int64, error) {
	c := &agonessdkalpha.Count{}
	err := r.call(ctx, "GET", "/alpha/player/count", "", c)
	return c.GetCount(), err
}

func (r restSDK) IsPlayerConnected(ctx context.Context, id string) (bool, error) {
	b := &agonessdkalpha.Bool{}
	err := r.call(ctx, "GET", "/alpha/player/connected/"+id, "", b)
	return b.GetBool(), err
}

func (r restSDK) GetConnectedPlayers(ctx context.Context) ([]string, error) {
	l := &agonessdkalpha.PlayerIDList{}
	err := r.call(ctx, "GET", "/alpha/player/connected", "", l)
	return l.GetList(), err
}

// conformanceSpec is the fleet the conformance server runs in: a counter
// and a list declared, a health contract it keeps.
func conformanceSpec(t *testing.T, transport, report string) *eventsv1.FleetSpec {
	t.Helper()
	tmpl := agonesHelperTemplate(t)
	tmpl.Env[agonesHelperEnv] = transport
	tmpl.Env[conformanceReportEnv] = report
	tmpl.Ports = []*eventsv1.PortSpec{{Name: "game"}}
	tmpl.Counters = map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 10}}
	tmpl.Lists = map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"a"}}}
	return &eventsv1.FleetSpec{Template: tmpl, Health: &eventsv1.HealthPolicy{PeriodSeconds: 5, FailureThreshold: 3, InitialDelaySeconds: 7},
		PlayerSessions: &eventsv1.PlayerSessionPolicy{MaxPlayers: 2}}
}

// Agones' SDK conformance call sets (the stable calls, counters and
// lists) pass against a real agent and a real process, over gRPC and
// over REST, and every call that changes the server is an event of its
// history with the game server as its actor.
func TestAgonesConformance(t *testing.T) {
	for _, transport := range []string{conformanceGRPC, conformanceREST} {
		t.Run(transport, func(t *testing.T) {
			h := newHarness(t)
			name := "fleets/arena/gameServers/gs-conformance"
			report := filepath.Join(publicDir(t), "report")
			h.scheduleSpec(name, conformanceSpec(t, transport, report))
			wait.For(t, 60*time.Second, "the conformance report", func() bool {
				_, err := os.Stat(report)
				return err == nil
			})
			// The report is written before Shutdown: wait for the shutdown
			// so that every change is in the history.
			h.waitEvent(name, "ShutdownRequested")
			raw, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(bytes.TrimSpace(raw)); got != "PASS" {
				t.Fatalf("the conformance server found:\n%s", got)
			}
			hist := h.history(name)
			var types []string
			for _, e := range hist {
				if e.Type != "GameServerScheduled" && e.Actor != name {
					continue
				}
				types = append(types, e.Type)
			}
			for _, want := range []string{"GameServerReady", "LabelsChanged", "AnnotationsChanged", "CounterChanged", "ListChanged",
				"TrackedPlayerConnected", "TrackedPlayerDisconnected", "PlayerCapacitySet",
				"GameServerReserved", "GameServerAllocated", "ShutdownRequested"} {
				if !slices.Contains(types, want) {
					t.Errorf("the history's events by the game server %v lack %s", types, want)
				}
			}
			st := fold(t, hist)
			if st.GetCounters()["rooms"].GetCount() != 12 || !slices.Equal(st.GetLists()["players"].GetValues(), []string{"x", "y"}) {
				t.Errorf("folded counters %v, lists %v", st.GetCounters(), st.GetLists())
			}
			if st.GetLabels()["agones.dev/sdk-mode"] != "ctf" || st.GetAnnotations()["agones.dev/sdk-map"] != "dust" {
				t.Errorf("folded labels %v, annotations %v", st.GetLabels(), st.GetAnnotations())
			}
			if r := st.GetReason(); r != eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME {
				t.Errorf("shutdown reason %v, want the game server's own request", r)
			}
			if events.LifecycleName(st.GetLifecycle()) != "SHUTTING_DOWN" && events.LifecycleName(st.GetLifecycle()) != "TERMINATED" {
				t.Errorf("after Shutdown the server is %s", events.LifecycleName(st.GetLifecycle()))
			}
		})
	}
}
