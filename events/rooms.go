package events

import (
	"cmp"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A server that hosts several matches keeps its room in counters and lists
// (a "rooms" counter, a "players" list: docs/counters-and-lists.md). An
// allocation takes room with counter and list actions, decided with the
// allocation and recorded in its event (GameServerAllocated.counters and
// .lists, or GameServerReallocated for another match on an ALLOCATED
// server), so that no two allocations take the same room. An action that
// does not fit refuses the server: a count is never taken past its
// capacity or below 0, nor a list past its capacity. That is stricter than
// Agones, which truncates and allocates the server anyway.

// CounterAction changes a counter with an allocation: Capacity (when set)
// first, then Diff added to the count.
type CounterAction struct {
	// Name is the counter's, one of the server's template.
	Name string
	// Diff is added to the count: positive to take room, negative to give
	// it back.
	Diff int64
	// Capacity is the capacity to set first; nil: as it is.
	Capacity *int64
}

// ListAction changes a list with an allocation: Capacity (when set) first,
// then Delete, then Add. As Agones has it, a value added that the list
// holds, or one deleted that it does not, is left as it is; values added
// past the capacity refuse the server.
type ListAction struct {
	// Name is the list's, one of the server's template.
	Name string
	// Add holds values to add.
	Add []string
	// Delete holds values to take out.
	Delete []string
	// Capacity is the capacity to set first; nil: as it is.
	Capacity *int64
}

// decideRooms decides an allocation's counter and list actions on state, in
// name order, each on the state the ones before it left: the changes to
// record with the allocation, or the first refusal (a *CounterError: the
// server has no room; a *ValidationError: the action is malformed).
func decideRooms(state *eventsv1.GameServerState, counters []CounterAction, lists []ListAction) ([]*eventsv1.CounterChanged, []*eventsv1.ListChanged, error) {
	if len(counters) == 0 && len(lists) == 0 {
		return nil, nil, nil
	}
	work := proto.CloneOf(state)
	var cs []*eventsv1.CounterChanged
	for _, a := range slices.SortedFunc(slices.Values(counters), func(a, b CounterAction) int { return cmp.Compare(a.Name, b.Name) }) {
		msgs, err := decideCounter(work, UpdateCounter{Name: a.Name, CountDiff: a.Diff, Capacity: a.Capacity})
		if err != nil {
			return nil, nil, err
		}
		for _, m := range msgs {
			d := m.(*eventsv1.CounterChanged)
			if err := applyCounterChanged(work, d); err != nil {
				return nil, nil, err
			}
			cs = append(cs, d)
		}
	}
	var ls []*eventsv1.ListChanged
	for _, a := range slices.SortedFunc(slices.Values(lists), func(a, b ListAction) int { return cmp.Compare(a.Name, b.Name) }) {
		cur := work.GetLists()[a.Name].GetValues()
		u := UpdateList{Name: a.Name, Capacity: a.Capacity}
		for _, v := range a.Delete {
			if slices.Contains(cur, v) && !slices.Contains(u.Remove, v) {
				u.Remove = append(u.Remove, v)
			}
		}
		for _, v := range a.Add {
			if !slices.Contains(cur, v) && !slices.Contains(u.Add, v) {
				u.Add = append(u.Add, v)
			}
		}
		msgs, err := decideList(work, u)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range msgs {
			d := m.(*eventsv1.ListChanged)
			if err := applyListChanged(work, d); err != nil {
				return nil, nil, err
			}
			ls = append(ls, d)
		}
	}
	return cs, ls, nil
}

// applyRooms folds an allocation's counter and list changes into next (a
// copy of the state), refusing what applyCounterChanged and
// applyListChanged refuse.
func applyRooms(next *eventsv1.GameServerState, counters []*eventsv1.CounterChanged, lists []*eventsv1.ListChanged) error {
	for _, d := range counters {
		if err := applyCounterChanged(next, d); err != nil {
			return err
		}
	}
	for _, d := range lists {
		if err := applyListChanged(next, d); err != nil {
			return err
		}
	}
	return nil
}

// RoomsInUse reports whether a server holds a match in its counters or
// lists: a count above its template's, or a value its template's list did
// not start with. Such a server is busy, whatever its lifecycle: a READY
// one that took rooms through its game's SDK is not scaled down, moved off
// a draining host or replaced by a rollout while they are in use.
func RoomsInUse(gs *eventsv1.GameServerState) bool {
	t := gs.GetTemplate()
	for name, c := range gs.GetCounters() {
		if c.GetCount() > t.GetCounters()[name].GetCount() {
			return true
		}
	}
	for name, l := range gs.GetLists() {
		start := t.GetLists()[name].GetValues()
		for _, v := range l.GetValues() {
			if !slices.Contains(start, v) {
				return true
			}
		}
	}
	return false
}

// reallocated is the GameServerReallocated of an allocation into an
// ALLOCATED server.
func reallocated(state *eventsv1.GameServerState, alloc *eventsv1.GameServerAllocated, cs []*eventsv1.CounterChanged, ls []*eventsv1.ListChanged) *eventsv1.GameServerReallocated {
	return &eventsv1.GameServerReallocated{
		GameSession: state.GetGameSession(),
		Labels:      maps.Clone(alloc.GetLabels()), Annotations: maps.Clone(alloc.GetAnnotations()),
		Counters: cs, Lists: ls,
	}
}
