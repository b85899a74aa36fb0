package events_test

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// An allocation's counter and list actions are decided with it and
// recorded in its event; another match on an ALLOCATED server is a
// GameServerReallocated that keeps its game session; an action that does
// not fit refuses the server, whatever Agones would have truncated.
func TestAllocationTakesRoomInTheSameEvent(t *testing.T) {
	g := &gameServer{t: t, state: countersServer(t, READY)} // rooms 1 of 10, players [p1] of 3
	if events.RoomsInUse(g.state) {
		t.Fatal("a server as its template started it has rooms in use")
	}
	// Again needs an ALLOCATED server: a READY one is not taken by an
	// allocation meant for a running match.
	var te *events.TransitionError
	if _, err := g.try(events.Allocate{Allocated: &eventsv1.GameServerAllocated{}, Again: true}); !errors.As(err, &te) {
		t.Fatalf("allocate again a READY server: %v, want a TransitionError", err)
	}
	out := g.decide(events.Allocate{
		Allocated: &eventsv1.GameServerAllocated{GameSession: gsessName},
		Counters:  []events.CounterAction{{Name: "rooms", Diff: 2}},
		Lists:     []events.ListAction{{Name: "players", Add: []string{"p2", "p1", "p2"}, Delete: []string{"nobody"}}},
	})
	want := &eventsv1.GameServerAllocated{GameSession: gsessName,
		Counters: []*eventsv1.CounterChanged{{Name: "rooms", Count: 3, Capacity: 10, CountDiff: 2}},
		Lists:    []*eventsv1.ListChanged{{Name: "players", Capacity: 3, Values: []string{"p1", "p2"}, Added: []string{"p2"}}},
	}
	if len(out) != 1 || !proto.Equal(out[0], want) {
		t.Fatalf("events = %v, want %v", out, want)
	}
	if w := events.ChangeWords(out[0]); w != "counter rooms 3 of 10 (+2), list players +p2 (2 of 3)" {
		t.Fatalf("in words: %q", w)
	}
	if g.state.GetLifecycle() != ALLOCATED || g.state.GetCounters()["rooms"].GetCount() != 3 || !events.RoomsInUse(g.state) {
		t.Fatalf("after the allocation: %v, rooms %v", g.state.GetLifecycle(), g.state.GetCounters()["rooms"])
	}
	// Another match on the running server: its game session stays.
	out = g.decide(events.Allocate{
		Allocated: &eventsv1.GameServerAllocated{Labels: map[string]string{"match": "m2"}}, Again: true,
		Counters: []events.CounterAction{{Name: "rooms", Diff: 1, Capacity: proto.Int64(4)}},
		Lists:    []events.ListAction{{Name: "players", Add: []string{"p3"}}},
	})
	again, ok := out[0].(*eventsv1.GameServerReallocated)
	if len(out) != 1 || !ok || again.GetGameSession() != gsessName {
		t.Fatalf("events = %v, want one GameServerReallocated in %s", out, gsessName)
	}
	if c := g.state.GetCounters()["rooms"]; c.GetCount() != 4 || c.GetCapacity() != 4 {
		t.Fatalf("rooms = %v, want 4 of 4", c)
	}
	if g.state.GetGameSession() != gsessName || g.state.GetLabels()["match"] != "m2" || g.state.GetLifecycle() != ALLOCATED {
		t.Fatalf("after the second match: session %s, labels %v, %v", g.state.GetGameSession(), g.state.GetLabels(), g.state.GetLifecycle())
	}
	// No room left: refused, nothing written.
	full := []events.Allocate{
		{Allocated: &eventsv1.GameServerAllocated{}, Again: true, Counters: []events.CounterAction{{Name: "rooms", Diff: 1}}},
		{Allocated: &eventsv1.GameServerAllocated{}, Again: true, Lists: []events.ListAction{{Name: "players", Add: []string{"p4"}}}},
		{Allocated: &eventsv1.GameServerAllocated{}, Again: true, Counters: []events.CounterAction{{Name: "seats", Diff: 1}}},
		// One fits, the other does not: neither is taken.
		{Allocated: &eventsv1.GameServerAllocated{}, Again: true, Counters: []events.CounterAction{{Name: "rooms", Diff: -1}},
			Lists: []events.ListAction{{Name: "players", Add: []string{"p4"}}}},
		{Allocated: &eventsv1.GameServerAllocated{}, Again: true, Counters: []events.CounterAction{{Name: "rooms", Diff: -5}}},
	}
	for i, c := range full {
		if _, err := g.try(c); !errors.As(err, new(*events.CounterError)) {
			t.Errorf("allocation %d past the room: %v, want a CounterError", i, err)
		}
	}
	// The matches end: their rooms come back, and the server is idle again.
	g.decide(events.UpdateCounter{Name: "rooms", Count: proto.Int64(1)})
	g.decide(events.UpdateList{Name: "players", Remove: []string{"p2", "p3"}})
	if events.RoomsInUse(g.state) {
		t.Fatalf("rooms %v, players %v: still in use", g.state.GetCounters()["rooms"], g.state.GetLists()["players"])
	}
	if l := g.state.GetLists()["players"]; !slices.Equal(l.GetValues(), []string{"p1"}) {
		t.Fatalf("players = %v", l)
	}
}
