package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/apikeys"
)

// seedCounted appends the events of a READY game server of fleet arena
// whose template has counter rooms (1 of 10) and list players ([a], 3), as
// the controller and its agent would, and waits for the views.
func (s *stack) seedCounted(id string) string {
	s.t.Helper()
	name := events.GameServerName("arena", id)
	template := &eventsv1.GameServerTemplate{Command: "/bin/game",
		Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 10}},
		Lists:    map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"a"}}},
	}
	seq, err := s.Store.Append(s.Ctx, events.MustSubject(name), 0,
		events.New(name, time.Now(), &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: template}),
		events.New(name, time.Now(), &eventsv1.ProcessStarted{Pid: 42, Address: "127.0.0.1", Attempt: 1}),
		events.New(name, time.Now(), &eventsv1.GameServerReady{}))
	if err != nil {
		s.t.Fatal(err)
	}
	s.waitApplied(seq)
	return name
}

// counterOf returns a counter of a GameServer in JSON as {count, capacity}.
func counterOf(r response, name string) (count, capacity string) {
	cs, _ := r.body["counters"].(map[string]any)
	c, _ := cs[name].(map[string]any)
	count, _ = c["count"].(string)
	capacity, _ = c["capacity"].(string)
	return count, capacity
}

// listOf returns a list of a GameServer in JSON: its capacity and values.
func listOf(r response, name string) (capacity string, values []string) {
	ls, _ := r.body["lists"].(map[string]any)
	l, _ := ls[name].(map[string]any)
	capacity, _ = l["capacity"].(string)
	vs, _ := l["values"].([]any)
	for _, v := range vs {
		values = append(values, fmt.Sprint(v))
	}
	return capacity, values
}

// A fleet's template carries counters and lists in Agones' JSON shapes
// (int64 as strings, numbers taken too), and a game server shows them;
// PATCH …/counters/{counter} and …/lists/{list} change them, once per
// request id, and refuse what Agones' SDK refuses with its codes: nothing
// changes then.
func TestCountersAndListsOverREST(t *testing.T) {
	s := newStack(t, stackOptions{})
	fleet := fleetWithoutReplicas()
	template(fleet)["counters"] = map[string]any{"rooms": map[string]any{"count": "1", "capacity": 10}}
	template(fleet)["lists"] = map[string]any{"players": map[string]any{"capacity": "3", "values": []string{"a"}}}
	s.createFleet("arena", fleet)
	f := s.do(http.MethodGet, "/v1/fleets/arena", nil)
	tmpl, _ := f.body["template"].(map[string]any)
	if got := fmt.Sprint(tmpl["counters"], tmpl["lists"]); got != "map[rooms:map[capacity:10 count:1]] map[players:map[capacity:3 values:[a]]]" {
		t.Fatalf("the fleet's template: counters and lists %s", got)
	}

	gs := s.seedCounted("gs-1")
	path := "/v1/" + gs
	r := s.do(http.MethodGet, path, nil)
	if count, capacity := counterOf(r, "rooms"); count != "1" || capacity != "10" {
		t.Fatalf("rooms %s of %s, want the template's 1 of 10: %v", count, capacity, r.body)
	}

	// A change, and its retry with the same request id: counted once.
	for range 2 {
		r = s.do(http.MethodPatch, path+"/counters/rooms", map[string]any{"countDiff": "2", "requestId": "rooms-1"})
		if count, _ := counterOf(r, "rooms"); r.status != http.StatusOK || count != "3" {
			t.Fatalf("countDiff 2: %d, rooms %s, want 3: %v", r.status, count, r.body)
		}
	}
	r = s.do(http.MethodPatch, path+"/counters/rooms", map[string]any{"capacity": 5, "count": 4, "countDiff": -1})
	if count, capacity := counterOf(r, "rooms"); r.status != http.StatusOK || count != "3" || capacity != "5" {
		t.Fatalf("capacity 5, count 4, diff -1: %d, rooms %s of %s, want 3 of 5: %v", r.status, count, capacity, r.body)
	}
	r = s.do(http.MethodPatch, path+"/lists/players", map[string]any{"addValues": []string{"b", "c"}})
	if _, values := listOf(r, "players"); r.status != http.StatusOK || !slices.Equal(values, []string{"a", "b", "c"}) {
		t.Fatalf("add b, c: %d, players %v: %v", r.status, values, r.body)
	}
	r = s.do(http.MethodPatch, path+"/lists/players", map[string]any{"capacity": "4", "removeValues": []string{"a"}, "addValues": []string{"d", "e"}})
	if capacity, values := listOf(r, "players"); r.status != http.StatusOK || capacity != "4" || !slices.Equal(values, []string{"b", "c", "d", "e"}) {
		t.Fatalf("capacity 4, remove a, add d, e: %d, players %v of %s: %v", r.status, values, capacity, r.body)
	}

	for _, tc := range []struct {
		name, path string
		body       map[string]any
		status     int
		reason     string
		field      string
	}{
		{"a count over the capacity", "/counters/rooms", map[string]any{"count": "6"}, http.StatusBadRequest, events.RefusedCountOutOfRange, "count"},
		{"a diff below 0", "/counters/rooms", map[string]any{"countDiff": -4}, http.StatusBadRequest, events.RefusedCountOutOfRange, "count_diff"},
		{"a diff past a lowered capacity", "/counters/rooms", map[string]any{"capacity": "2", "countDiff": 1}, http.StatusBadRequest, events.RefusedCountOutOfRange, "count_diff"},
		{"a counter the template does not name", "/counters/seats", map[string]any{"countDiff": 1}, http.StatusNotFound, events.RefusedCounterNotFound, "counter"},
		{"a list full", "/lists/players", map[string]any{"addValues": []string{"f"}}, http.StatusBadRequest, events.RefusedListFull, "add_values"},
		{"a value held already", "/lists/players", map[string]any{"addValues": []string{"b"}, "removeValues": []string{"c"}}, http.StatusConflict, events.RefusedListValueExists, "add_values"},
		{"a value not held", "/lists/players", map[string]any{"removeValues": []string{"z"}}, http.StatusNotFound, events.RefusedListValueNotFound, "remove_values"},
		{"a list the template does not name", "/lists/friends", map[string]any{"addValues": []string{"f"}}, http.StatusNotFound, events.RefusedListNotFound, "list"},
		{"a capacity over 1000", "/lists/players", map[string]any{"capacity": 1001}, http.StatusBadRequest, events.RefusedCapacityOutOfRange, "capacity"},
		{"a bad counter name", "/counters/-rooms", map[string]any{"countDiff": 1}, http.StatusBadRequest, apiserver.ReasonInvalidArgument, "counter"},
		{"an empty value", "/lists/players", map[string]any{"removeValues": []string{""}}, http.StatusBadRequest, apiserver.ReasonInvalidArgument, "remove_values[0]"},
		{"a value added and removed", "/lists/players", map[string]any{"removeValues": []string{"b"}, "addValues": []string{"b"}}, http.StatusBadRequest, apiserver.ReasonInvalidArgument, "add_values[0]"},
		{"an unknown field", "/counters/rooms", map[string]any{"increment": 1}, http.StatusBadRequest, apiserver.ReasonInvalidArgument, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodPatch, path+tc.path, tc.body)
			if r.status != tc.status || r.reason() != tc.reason || tc.field != "" && r.fieldViolation() != tc.field {
				t.Fatalf("got %d %s field %q, want %d %s field %q: %v", r.status, r.reason(), r.fieldViolation(), tc.status, tc.reason, tc.field, r.body)
			}
		})
	}
	r = s.do(http.MethodGet, path, nil)
	count, capacity := counterOf(r, "rooms")
	listCapacity, values := listOf(r, "players")
	if count != "3" || capacity != "5" || listCapacity != "4" || !slices.Equal(values, []string{"b", "c", "d", "e"}) {
		t.Fatalf("after the refusals: rooms %s of %s, players %v of %s, want them unchanged", count, capacity, values, listCapacity)
	}

	// The stream holds one event per change taken, the retry's not again.
	hist, err := s.Store.History(s.Ctx, events.MustSubject(gs), 0)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, e := range hist {
		if e.Type == "CounterChanged" || e.Type == "ListChanged" {
			changes = append(changes, e.Type)
		}
	}
	if want := []string{"CounterChanged", "CounterChanged", "ListChanged", "ListChanged"}; !slices.Equal(changes, want) {
		t.Fatalf("changes in the stream %v, want %v", changes, want)
	}
	// History shows the events with their data; explain says them in words.
	ev := s.do(http.MethodGet, path+"/events?types=ListChanged", nil)
	evs, _ := ev.body["events"].([]any)
	if len(evs) != 2 {
		t.Fatalf("ListChanged in the history: %v", ev.body)
	}
	data, _ := evs[1].(map[string]any)["data"].(map[string]any)
	if fmt.Sprintf("%v %v %v", data["added"], data["removed"], data["capacity"]) != "[d e] [a] 4" {
		t.Fatalf("the last ListChanged's data %v", data)
	}
	x := s.do(http.MethodGet, path+":explain", nil)
	for _, want := range []string{"counter rooms 3 of 5", "list players +d +e -a (4 of 4)"} {
		if !strings.Contains(x.str("summary"), want) {
			t.Errorf("explain's summary %q does not say %q", x.str("summary"), want)
		}
	}

	// A server that is shutting down changes them no more.
	if r := s.do(http.MethodPost, path+":shutdown", map[string]any{}); r.status != http.StatusOK {
		t.Fatalf("shutdown: %d %v", r.status, r.body)
	}
	r = s.do(http.MethodPatch, path+"/counters/rooms", map[string]any{"countDiff": -1})
	if r.status != http.StatusBadRequest || r.reason() != apiserver.ReasonInvalidTransition {
		t.Fatalf("a change while SHUTTING_DOWN: %d %s, want 400 %s: %v", r.status, r.reason(), apiserver.ReasonInvalidTransition, r.body)
	}
	if r := s.do(http.MethodPatch, "/v1/fleets/arena/gameServers/gs-none/counters/rooms", map[string]any{"countDiff": 1}); r.status != http.StatusNotFound {
		t.Fatalf("a server that does not exist: %d %v", r.status, r.body)
	}
}

// A template's counters and lists are checked with the fleet and the
// standalone server, and refused with the field they are about.
func TestTemplateCountersAreValidated(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, tc := range []struct {
		name     string
		path     string
		counters map[string]any
		lists    map[string]any
		field    string
	}{
		{"a count over the capacity", "/v1/fleets?fleetId=f1", map[string]any{"rooms": map[string]any{"count": "11", "capacity": "10"}}, nil,
			"fleet.template.counters[rooms].count"},
		{"a negative capacity", "/v1/fleets?fleetId=f2", map[string]any{"rooms": map[string]any{"capacity": -1}}, nil,
			"fleet.template.counters[rooms].capacity"},
		{"a name with a space", "/v1/fleets?fleetId=f3", map[string]any{"my rooms": map[string]any{"capacity": 1}}, nil,
			"fleet.template.counters"},
		{"values over the capacity", "/v1/fleets?fleetId=f4", nil, map[string]any{"players": map[string]any{"capacity": 1, "values": []string{"a", "b"}}},
			"fleet.template.lists[players].values"},
		{"a value twice", "/v1/fleets?fleetId=f5", nil, map[string]any{"players": map[string]any{"capacity": 3, "values": []string{"a", "a"}}},
			"fleet.template.lists[players].values"},
		{"a list capacity over 1000", "/v1/fleets?fleetId=f6", nil, map[string]any{"players": map[string]any{"capacity": 1001}},
			"fleet.template.lists[players].capacity"},
		{"a standalone server's count over the capacity", "/v1/fleets/standalone/gameServers?gameServerId=s1",
			map[string]any{"rooms": map[string]any{"count": 2, "capacity": 1}}, nil, "spec.template.counters[rooms].count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fleetWithoutReplicas()
			if tc.counters != nil {
				template(f)["counters"] = tc.counters
			}
			if tc.lists != nil {
				template(f)["lists"] = tc.lists
			}
			r := s.do(http.MethodPost, tc.path, f)
			if r.status != http.StatusBadRequest || r.reason() != apiserver.ReasonInvalidArgument || r.fieldViolation() != tc.field {
				t.Fatalf("got %d %s field %q, want 400 INVALID_ARGUMENT field %q: %v", r.status, r.reason(), r.fieldViolation(), tc.field, r.body)
			}
		})
	}
}

// Over gRPC, the refusals carry Agones' codes (OUT_OF_RANGE,
// ALREADY_EXISTS, NOT_FOUND) and their reasons; a matchmaker may change a
// server's counters and lists, a viewer may not.
func TestCountersAndListsOverGRPC(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys, key: key[apikeys.Operator]})
	s.createFleet("arena", fleetWithoutReplicas())
	gs := s.seedCounted("gs-1")
	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := tetherv1.NewGameServerServiceClient(conn)
	as := func(role apikeys.Role) context.Context {
		ctx, cancel := context.WithTimeout(s.Ctx, 20*time.Second)
		t.Cleanup(cancel)
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key[role])
	}
	g, err := client.UpdateGameServerCounter(as(apikeys.Matchmaker), &tetherv1.UpdateGameServerCounterRequest{
		Name: gs, Counter: "rooms", CountDiff: -1, RequestId: "free-a-room"})
	if err != nil || g.GetCounters()["rooms"].GetCount() != 0 {
		t.Fatalf("a matchmaker frees a room: %v, rooms %v", err, g.GetCounters()["rooms"])
	}
	g, err = client.UpdateGameServerList(as(apikeys.Matchmaker), &tetherv1.UpdateGameServerListRequest{
		Name: gs, List: "players", AddValues: []string{"b"}, Capacity: proto.Int64(2)})
	if err != nil || !slices.Equal(g.GetLists()["players"].GetValues(), []string{"a", "b"}) || g.GetLists()["players"].GetCapacity() != 2 {
		t.Fatalf("a matchmaker adds a player: %v, players %v", err, g.GetLists()["players"])
	}
	for _, tc := range []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"a count below 0", func() error {
			_, err := client.UpdateGameServerCounter(as(apikeys.Operator), &tetherv1.UpdateGameServerCounterRequest{Name: gs, Counter: "rooms", CountDiff: -1})
			return err
		}, codes.OutOfRange, events.RefusedCountOutOfRange},
		{"a list full", func() error {
			_, err := client.UpdateGameServerList(as(apikeys.Operator), &tetherv1.UpdateGameServerListRequest{Name: gs, List: "players", AddValues: []string{"c"}})
			return err
		}, codes.OutOfRange, events.RefusedListFull},
		{"a value held", func() error {
			_, err := client.UpdateGameServerList(as(apikeys.Operator), &tetherv1.UpdateGameServerListRequest{Name: gs, List: "players", AddValues: []string{"a"}})
			return err
		}, codes.AlreadyExists, events.RefusedListValueExists},
		{"a value not held", func() error {
			_, err := client.UpdateGameServerList(as(apikeys.Operator), &tetherv1.UpdateGameServerListRequest{Name: gs, List: "players", RemoveValues: []string{"z"}})
			return err
		}, codes.NotFound, events.RefusedListValueNotFound},
		{"no such counter", func() error {
			_, err := client.UpdateGameServerCounter(as(apikeys.Operator), &tetherv1.UpdateGameServerCounterRequest{Name: gs, Counter: "seats", Count: proto.Int64(1)})
			return err
		}, codes.NotFound, events.RefusedCounterNotFound},
		{"a viewer", func() error {
			_, err := client.UpdateGameServerCounter(as(apikeys.Viewer), &tetherv1.UpdateGameServerCounterRequest{Name: gs, Counter: "rooms", CountDiff: 1})
			return err
		}, codes.PermissionDenied, apiserver.ReasonPermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code || reasonOf(err) != tc.reason {
				t.Fatalf("got %v (reason %q), want %s %s", err, reasonOf(err), tc.code, tc.reason)
			}
		})
	}
}
