package events_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// countersServer is a server scheduled from a template with counter rooms
// (1 of 10) and list players (p1, capacity 3), and made lifecycle l.
func countersServer(t *testing.T, l eventsv1.Lifecycle) *eventsv1.GameServerState {
	t.Helper()
	spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game",
		Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 10}},
		Lists:    map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"p1"}}},
	}}
	msgs, err := events.DecideGameServer(gsName, nil, events.ScheduleGameServer{Host: "hosts/h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	state, err := events.ApplyGameServer(nil, events.New(gsName, at(0), msgs[0]))
	if err != nil {
		t.Fatal(err)
	}
	state.Lifecycle = l
	return state
}

func i64(n int64) *int64 { return &n }

// refusedAs fails unless err is a CounterError of reason and class.
func refusedAs(t *testing.T, err error, reason string, class error) {
	t.Helper()
	var ce *events.CounterError
	if !errors.As(err, &ce) || ce.Reason != reason || !errors.Is(err, class) {
		t.Fatalf("err = %v (%T), want a CounterError %s (%v)", err, err, reason, class)
	}
}

// A server starts with its template's counters and lists, and each change
// is one event holding the counter or list after it.
func TestCountersAndListsStartFromTheTemplateAndChange(t *testing.T) {
	state := countersServer(t, READY)
	if c := state.GetCounters()["rooms"]; c.GetCount() != 1 || c.GetCapacity() != 10 {
		t.Fatalf("rooms = %v, want 1 of 10 from the template", c)
	}
	if l := state.GetLists()["players"]; l.GetCapacity() != 3 || !slices.Equal(l.GetValues(), []string{"p1"}) {
		t.Fatalf("players = %v, want [p1] of 3 from the template", l)
	}
	g := &gameServer{t: t, state: state}
	out := g.decide(events.UpdateCounter{Name: "rooms", CountDiff: 2})
	want := &eventsv1.CounterChanged{Name: "rooms", Count: 3, Capacity: 10, CountDiff: 2}
	if len(out) != 1 || !proto.Equal(out[0], want) {
		t.Fatalf("events = %v, want %v", out, want)
	}
	if c := g.state.GetCounters()["rooms"]; c.GetCount() != 3 {
		t.Fatalf("rooms = %v after +2", c)
	}
	// Capacity first, then count, then the diff.
	out = g.decide(events.UpdateCounter{Name: "rooms", Capacity: i64(5), Count: i64(4), CountDiff: -1})
	if want := (&eventsv1.CounterChanged{Name: "rooms", Count: 3, Capacity: 5, CountDiff: 0}); !proto.Equal(out[0], want) {
		t.Fatalf("events = %v, want %v", out, want)
	}
	out = g.decide(events.UpdateList{Name: "players", Capacity: i64(4), Add: []string{"p2", "p3"}, Remove: []string{"p1"}})
	wantList := &eventsv1.ListChanged{Name: "players", Capacity: 4, Values: []string{"p2", "p3"}, Added: []string{"p2", "p3"}, Removed: []string{"p1"}}
	if len(out) != 1 || !proto.Equal(out[0], wantList) {
		t.Fatalf("events = %v, want %v", out, wantList)
	}
	out = g.decide(events.UpdateList{Name: "players", SetValues: true, Values: []string{"p3", "p4"}})
	wantList = &eventsv1.ListChanged{Name: "players", Capacity: 4, Values: []string{"p3", "p4"}, Added: []string{"p4"}, Removed: []string{"p2"}}
	if len(out) != 1 || !proto.Equal(out[0], wantList) {
		t.Fatalf("events = %v, want %v", out, wantList)
	}
	if l := g.state.GetLists()["players"]; !slices.Equal(l.GetValues(), []string{"p3", "p4"}) || l.GetCapacity() != 4 {
		t.Fatalf("players = %v", l)
	}
	// The template is what the server started with, whatever changed since.
	if c := g.state.GetTemplate().GetCounters()["rooms"]; c.GetCount() != 1 {
		t.Fatalf("the template's rooms = %v, want it as it was", c)
	}
	// Nothing to change: no event.
	if out := g.decide(events.UpdateCounter{Name: "rooms", Count: i64(3)}); len(out) != 0 {
		t.Fatalf("setting the count it has: %v, want no event", out)
	}
	if out := g.decide(events.UpdateList{Name: "players"}); len(out) != 0 {
		t.Fatalf("an empty list change: %v, want no event", out)
	}
}

// A capacity lowered below a counter's count or a list's values takes
// them down with it, as Agones' SDK does (its own conformance client sets
// a counter of 10 to capacity 1), and the event says which values went.
func TestALoweredCapacityTruncatesAsAgonesDoes(t *testing.T) {
	g := &gameServer{t: t, state: countersServer(t, ALLOCATED)}
	g.decide(events.UpdateCounter{Name: "rooms", Count: i64(10)})
	out := g.decide(events.UpdateCounter{Name: "rooms", Capacity: i64(1)})
	if want := (&eventsv1.CounterChanged{Name: "rooms", Count: 1, Capacity: 1, CountDiff: -9}); len(out) != 1 || !proto.Equal(out[0], want) {
		t.Fatalf("capacity 1 under a count of 10: %v, want %v", out, want)
	}
	// A diff after a lowered capacity is judged against the count the
	// server had: 10 - 5 is past 2.
	g.decide(events.UpdateCounter{Name: "rooms", Capacity: i64(10), Count: i64(10)})
	if _, err := events.DecideGameServer(gsName, g.state, events.UpdateCounter{Name: "rooms", Capacity: i64(2), CountDiff: -5}); err == nil {
		t.Fatal("count 10, capacity 2, diff -5 (ends at 5, past 2): accepted")
	} else {
		refusedAs(t, err, events.RefusedCountOutOfRange, events.ErrOutOfRange)
	}
	out = g.decide(events.UpdateCounter{Name: "rooms", Capacity: i64(2), CountDiff: -8})
	if want := (&eventsv1.CounterChanged{Name: "rooms", Count: 2, Capacity: 2, CountDiff: -8}); len(out) != 1 || !proto.Equal(out[0], want) {
		t.Fatalf("capacity 2 with diff -8 from 10: %v, want %v", out, want)
	}

	g.decide(events.UpdateList{Name: "players", Add: []string{"p2", "p3"}})
	out = g.decide(events.UpdateList{Name: "players", Capacity: i64(1)})
	wantList := &eventsv1.ListChanged{Name: "players", Capacity: 1, Values: []string{"p1"}, Removed: []string{"p2", "p3"}}
	if len(out) != 1 || !proto.Equal(out[0], wantList) {
		t.Fatalf("capacity 1 under [p1 p2 p3]: %v, want %v", out, wantList)
	}
	if l := g.state.GetLists()["players"]; l.GetCapacity() != 1 || !slices.Equal(l.GetValues(), []string{"p1"}) {
		t.Fatalf("players = %v after capacity 1", l)
	}
}

// Changes out of range are refused as Agones' SDK refuses them, each with
// its reason and class, and nothing changes.
func TestCounterAndListChangesOutOfRangeAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cmd    events.GameServerCommand
		reason string
		class  error
		field  string
	}{
		{"count below 0", events.UpdateCounter{Name: "rooms", Count: i64(-1)}, events.RefusedCountOutOfRange, events.ErrOutOfRange, "count"},
		{"count over the capacity", events.UpdateCounter{Name: "rooms", Count: i64(11)}, events.RefusedCountOutOfRange, events.ErrOutOfRange, "count"},
		{"diff below 0", events.UpdateCounter{Name: "rooms", CountDiff: -2}, events.RefusedCountOutOfRange, events.ErrOutOfRange, "count_diff"},
		{"diff over the capacity", events.UpdateCounter{Name: "rooms", CountDiff: 10}, events.RefusedCountOutOfRange, events.ErrOutOfRange, "count_diff"},
		{"the largest diff", events.UpdateCounter{Name: "rooms", CountDiff: math.MaxInt64}, events.RefusedCountOutOfRange, events.ErrOutOfRange, "count_diff"},
		{"the smallest diff", events.UpdateCounter{Name: "rooms", CountDiff: math.MinInt64}, events.RefusedCountOutOfRange, events.ErrOutOfRange, "count_diff"},
		{"negative capacity", events.UpdateCounter{Name: "rooms", Capacity: i64(-1)}, events.RefusedCapacityOutOfRange, events.ErrOutOfRange, "capacity"},
		{"a diff past a lowered capacity", events.UpdateCounter{Name: "rooms", Capacity: i64(0), CountDiff: 1}, events.RefusedCountOutOfRange, events.ErrOutOfRange, "count_diff"},
		{"no such counter", events.UpdateCounter{Name: "seats", CountDiff: 1}, events.RefusedCounterNotFound, events.ErrMissing, "counter"},
		{"no such list", events.UpdateList{Name: "seats", Add: []string{"a"}}, events.RefusedListNotFound, events.ErrMissing, "list"},
		{"a value held already", events.UpdateList{Name: "players", Add: []string{"p1"}}, events.RefusedListValueExists, events.ErrAlreadyExists, "add_values"},
		{"a value not held", events.UpdateList{Name: "players", Remove: []string{"p9"}}, events.RefusedListValueNotFound, events.ErrMissing, "remove_values"},
		{"past the capacity", events.UpdateList{Name: "players", Add: []string{"p2", "p3", "p4"}}, events.RefusedListFull, events.ErrOutOfRange, "add_values"},
		{"a value past a lowered capacity", events.UpdateList{Name: "players", Capacity: i64(1), Add: []string{"p2"}}, events.RefusedListFull, events.ErrOutOfRange, "add_values"},
		{"capacity over the maximum", events.UpdateList{Name: "players", Capacity: i64(events.MaxListCapacity + 1)}, events.RefusedCapacityOutOfRange, events.ErrOutOfRange, "capacity"},
		{"negative list capacity", events.UpdateList{Name: "players", Capacity: i64(-1)}, events.RefusedCapacityOutOfRange, events.ErrOutOfRange, "capacity"},
		{"values past the capacity", events.UpdateList{Name: "players", SetValues: true, Values: []string{"a", "b", "c", "d"}}, events.RefusedListFull, events.ErrOutOfRange, "values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := countersServer(t, ALLOCATED)
			before := proto.CloneOf(state)
			out, err := events.DecideGameServer(gsName, state, tc.cmd)
			if out != nil {
				t.Errorf("events %v with the refusal", out)
			}
			refusedAs(t, err, tc.reason, tc.class)
			if f := err.(*events.CounterError).Field; f != tc.field {
				t.Errorf("field %q, want %q", f, tc.field)
			}
			if !proto.Equal(state, before) {
				t.Error("the state changed")
			}
		})
	}
}

// Malformed changes are validation errors (the API's INVALID_ARGUMENT)
// naming their field.
func TestMalformedCounterAndListChangesAreInvalid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cmd   events.GameServerCommand
		field string
	}{
		{"empty counter name", events.UpdateCounter{CountDiff: 1}, "counter"},
		{"counter name with a slash", events.UpdateCounter{Name: "a/b", CountDiff: 1}, "counter"},
		{"counter name too long", events.UpdateCounter{Name: strings.Repeat("r", events.MaxCounterNameBytes+1), CountDiff: 1}, "counter"},
		{"list name starting with a dash", events.UpdateList{Name: "-players"}, "list"},
		{"empty value", events.UpdateList{Name: "players", Add: []string{""}}, "add_values[0]"},
		{"value too long", events.UpdateList{Name: "players", Add: []string{strings.Repeat("v", events.MaxListValueBytes+1)}}, "add_values[0]"},
		{"value with a NUL", events.UpdateList{Name: "players", Remove: []string{"p\x00"}}, "remove_values[0]"},
		{"value not UTF-8", events.UpdateList{Name: "players", Add: []string{"p\xff"}}, "add_values[0]"},
		{"a value added twice", events.UpdateList{Name: "players", Add: []string{"a", "a"}}, "add_values[1]"},
		{"added and removed", events.UpdateList{Name: "players", Add: []string{"p1"}, Remove: []string{"p1"}}, "add_values[0]"},
		{"set and added", events.UpdateList{Name: "players", SetValues: true, Add: []string{"a"}}, "values"},
		{"set twice", events.UpdateList{Name: "players", SetValues: true, Values: []string{"a", "a"}}, "values[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := events.DecideGameServer(gsName, countersServer(t, READY), tc.cmd)
			if ve := asValidationError(t, err); ve.Field != tc.field {
				t.Errorf("field %q, want %q (%v)", ve.Field, tc.field, err)
			}
		})
	}
	// The longest name and value are taken.
	state := countersServer(t, READY)
	long := strings.Repeat("v", events.MaxListValueBytes)
	if _, err := events.DecideGameServer(gsName, state, events.UpdateList{Name: "players", Add: []string{long, "Île-de-France"}}); err != nil {
		t.Errorf("the longest value: %v", err)
	}
}

// Counters and lists change from a server's placement until it stops
// serving, not once it is UNHEALTHY, SHUTTING_DOWN or TERMINATED: a
// refused state is a TransitionError (the API's FAILED_PRECONDITION)
// before the counter is looked up.
func TestCountersChangeOnlyWhileTheServerServes(t *testing.T) {
	for _, l := range []eventsv1.Lifecycle{SCHEDULED, STARTING, READY, RESERVED, ALLOCATED, UNHEALTHY, SHUTTING_DOWN, TERMINATED} {
		allowed := l != UNHEALTHY && l != SHUTTING_DOWN && l != TERMINATED
		for _, cmd := range []events.GameServerCommand{
			events.UpdateCounter{Name: "rooms", CountDiff: 1},
			events.UpdateCounter{Name: "no-such", CountDiff: 1},
			events.UpdateList{Name: "players", Add: []string{"p2"}},
		} {
			_, err := events.DecideGameServer(gsName, countersServer(t, l), cmd)
			missing := errors.Is(err, events.ErrMissing)
			switch {
			case allowed && err != nil && !missing:
				t.Errorf("%v in %s: %v", cmd, events.LifecycleName(l), err)
			case !allowed:
				asTransitionError(t, err)
			}
		}
	}
}

// Apply refuses a change that the decision would have refused, whoever
// wrote it: the views never hold a count out of its range, a list over its
// capacity, a value twice, or a counter the template did not name.
func TestApplyRefusesCountersOutOfRange(t *testing.T) {
	for _, data := range []proto.Message{
		&eventsv1.CounterChanged{Name: "rooms", Count: 11, Capacity: 10},
		&eventsv1.CounterChanged{Name: "rooms", Count: -1, Capacity: 10},
		&eventsv1.CounterChanged{Name: "rooms", Count: 0, Capacity: -1},
		&eventsv1.CounterChanged{Name: "seats", Count: 1, Capacity: 10},
		&eventsv1.ListChanged{Name: "players", Capacity: 1, Values: []string{"a", "b"}},
		&eventsv1.ListChanged{Name: "players", Capacity: 3, Values: []string{"a", "a"}},
		&eventsv1.ListChanged{Name: "players", Capacity: 3, Values: []string{"a\x00"}},
		&eventsv1.ListChanged{Name: "players", Capacity: events.MaxListCapacity + 1},
		&eventsv1.ListChanged{Name: "seats", Capacity: 3},
	} {
		state := countersServer(t, READY)
		if next, err := applyChecked(t, events.ApplyGameServer, state, events.New(gsName, at(1), data)); err == nil {
			t.Errorf("%s %v was applied: %v", events.TypeOf(data), data, next.GetCounters())
		}
	}
}

// The capacities of a server's lists together are bounded, in the
// template and when a list's capacity grows.
func TestListCapacitiesAreBoundedTogether(t *testing.T) {
	lists := map[string]*eventsv1.List{}
	for i := range events.MaxListValues / events.MaxListCapacity {
		lists[fmt.Sprintf("l%d", i)] = &eventsv1.List{Capacity: events.MaxListCapacity}
	}
	spec := func() *eventsv1.FleetSpec {
		s := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game", Lists: lists}}
		events.NormalizeFleetSpec(s)
		return s
	}
	if err := events.ValidateFleetSpec(spec()); err != nil {
		t.Fatalf("lists of %d values together: %v", events.MaxListValues, err)
	}
	msgs, err := events.DecideGameServer(gsName, nil, events.ScheduleGameServer{Host: "hosts/h1", Spec: spec()})
	if err != nil {
		t.Fatal(err)
	}
	state, err := events.ApplyGameServer(nil, events.New(gsName, at(0), msgs[0]))
	if err != nil {
		t.Fatal(err)
	}
	state.Lifecycle = READY
	state.Lists["l0"].Capacity = events.MaxListCapacity - 1
	if _, err := events.DecideGameServer(gsName, state, events.UpdateList{Name: "l0", Capacity: i64(events.MaxListCapacity)}); err != nil {
		t.Fatalf("back to the bound: %v", err)
	}
	state.Lists["extra"] = &eventsv1.List{Capacity: 1}
	_, err = events.DecideGameServer(gsName, state, events.UpdateList{Name: "l0", Capacity: i64(events.MaxListCapacity)})
	refusedAs(t, err, events.RefusedCapacityOutOfRange, events.ErrOutOfRange)
	lists["extra"] = &eventsv1.List{Capacity: 1}
	if ve := asValidationError(t, events.ValidateFleetSpec(spec())); !strings.HasSuffix(ve.Field, ".capacity") {
		t.Fatalf("a template over the bound: %v", ve)
	}
}

// A template's counters and lists are checked with the fleet: names,
// ranges, values and how many.
func TestTemplateCountersAndListsAreValidated(t *testing.T) {
	counters := func(n int) map[string]*eventsv1.Counter {
		m := map[string]*eventsv1.Counter{}
		for i := range n {
			m[fmt.Sprintf("c%d", i)] = &eventsv1.Counter{Capacity: 1}
		}
		return m
	}
	lists := func(n int) map[string]*eventsv1.List {
		m := map[string]*eventsv1.List{}
		for i := range n {
			m[fmt.Sprintf("l%d", i)] = &eventsv1.List{Capacity: 1}
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		counters map[string]*eventsv1.Counter
		lists    map[string]*eventsv1.List
		field    string // "" when valid
	}{
		{"Agones' shapes", map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 10}}, map[string]*eventsv1.List{"players": {Capacity: 100, Values: []string{"a"}}}, ""},
		{"most counters and lists", counters(events.MaxCounters), lists(events.MaxLists), ""},
		{"a full counter and a full list", map[string]*eventsv1.Counter{"r": {Count: 3, Capacity: 3}}, map[string]*eventsv1.List{"p": {Capacity: 1, Values: []string{"a"}}}, ""},
		{"too many counters", counters(events.MaxCounters + 1), nil, "fleet.template.counters"},
		{"too many lists", nil, lists(events.MaxLists + 1), "fleet.template.lists"},
		{"bad counter name", map[string]*eventsv1.Counter{"a b": {Capacity: 1}}, nil, "fleet.template.counters"},
		{"bad list name", nil, map[string]*eventsv1.List{"": {Capacity: 1}}, "fleet.template.lists"},
		{"count over capacity", map[string]*eventsv1.Counter{"rooms": {Count: 11, Capacity: 10}}, nil, "fleet.template.counters[rooms].count"},
		{"negative count", map[string]*eventsv1.Counter{"rooms": {Count: -1, Capacity: 10}}, nil, "fleet.template.counters[rooms].count"},
		{"negative capacity", map[string]*eventsv1.Counter{"rooms": {Capacity: -1}}, nil, "fleet.template.counters[rooms].capacity"},
		{"list capacity over the maximum", nil, map[string]*eventsv1.List{"p": {Capacity: events.MaxListCapacity + 1}}, "fleet.template.lists[p].capacity"},
		{"values over the capacity", nil, map[string]*eventsv1.List{"p": {Capacity: 1, Values: []string{"a", "b"}}}, "fleet.template.lists[p].values"},
		{"a value twice", nil, map[string]*eventsv1.List{"p": {Capacity: 3, Values: []string{"a", "a"}}}, "fleet.template.lists[p].values"},
		{"a value with a new line", nil, map[string]*eventsv1.List{"p": {Capacity: 3, Values: []string{"a\nb"}}}, "fleet.template.lists[p].values[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game", Counters: tc.counters, Lists: tc.lists}}
			events.NormalizeFleetSpec(spec)
			err := events.ValidateFleetSpec(spec)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if ve := asValidationError(t, err); ve.Field != tc.field {
				t.Errorf("field %q, want %q (%v)", ve.Field, tc.field, err)
			}
		})
	}
}
