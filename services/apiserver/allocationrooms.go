package apiserver

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// An allocation's rooms (docs/counters-and-lists.md, "Allocation"): its
// selectors' state and counter and list bounds, its priorities, and its
// counter and list actions, checked and turned into the views' queries
// (projections.AllocationQuery) and the decision's actions
// (events.CounterAction, events.ListAction).

// maxActionValues bounds the values one list action adds or deletes: a
// list holds at most events.MaxListCapacity.
const maxActionValues = events.MaxListCapacity

// selectorQuery is the views' query of one selector of an allocation.
func selectorQuery(path string, want allocationRequest, sel *tetherv1.LabelSelector) (projections.AllocationQuery, error) {
	q := projections.AllocationQuery{Fleet: want.fleet, MatchLabels: sel.GetMatchLabels(), Distributed: want.distributed, Priorities: want.priorities}
	switch sel.GetGameServerState() {
	case "", "READY":
	case "ALLOCATED":
		q.Allocated = true
	default:
		return q, invalidField(path+".game_server_state", fmt.Sprintf("%q: must be READY or ALLOCATED", sel.GetGameServerState()))
	}
	if n := len(sel.GetCounters()); n > events.MaxCounters {
		return q, invalidField(path+".counters", fmt.Sprintf("%d counters; a game server has at most %d", n, events.MaxCounters))
	}
	if n := len(sel.GetLists()); n > events.MaxLists {
		return q, invalidField(path+".lists", fmt.Sprintf("%d lists; a game server has at most %d", n, events.MaxLists))
	}
	for _, name := range slices.Sorted(maps.Keys(sel.GetCounters())) {
		c := sel.GetCounters()[name]
		f := fmt.Sprintf("%s.counters[%.70s]", path, name)
		if err := events.CheckCounterName(f, name); err != nil {
			return q, err
		}
		if err := checkBounds(f, "count", c.GetMinCount(), c.GetMaxCount()); err != nil {
			return q, err
		}
		if err := checkBounds(f, "available", c.GetMinAvailable(), c.GetMaxAvailable()); err != nil {
			return q, err
		}
		if q.Counters == nil {
			q.Counters = map[string]projections.CounterBounds{}
		}
		q.Counters[name] = projections.CounterBounds{MinCount: c.GetMinCount(), MaxCount: c.GetMaxCount(),
			MinAvailable: c.GetMinAvailable(), MaxAvailable: c.GetMaxAvailable()}
	}
	for _, name := range slices.Sorted(maps.Keys(sel.GetLists())) {
		l := sel.GetLists()[name]
		f := fmt.Sprintf("%s.lists[%.70s]", path, name)
		if err := events.CheckCounterName(f, name); err != nil {
			return q, err
		}
		if err := checkBounds(f, "available", l.GetMinAvailable(), l.GetMaxAvailable()); err != nil {
			return q, err
		}
		if v := l.GetContainsValue(); len(v) > events.MaxListValueBytes {
			return q, invalidField(f+".contains_value", fmt.Sprintf("%d bytes; a list value has at most %d", len(v), events.MaxListValueBytes))
		}
		if q.Lists == nil {
			q.Lists = map[string]projections.ListBounds{}
		}
		q.Lists[name] = projections.ListBounds{ContainsValue: l.GetContainsValue(), MinAvailable: l.GetMinAvailable(), MaxAvailable: l.GetMaxAvailable()}
	}
	if p := sel.GetPlayers(); p != nil {
		if err := checkBounds(path+".players", "available", p.GetMinAvailable(), p.GetMaxAvailable()); err != nil {
			return q, err
		}
		if p.GetMinAvailable() > 0 || p.GetMaxAvailable() > 0 {
			q.Players = &projections.PlayerBounds{MinAvailable: p.GetMinAvailable(), MaxAvailable: p.GetMaxAvailable()}
		}
	}
	return q, nil
}

// checkBounds refuses a negative bound, or a max (other than 0, no bound)
// below its min.
func checkBounds(path, what string, lo, hi int64) error {
	switch {
	case lo < 0:
		return invalidField(path+".min_"+what, fmt.Sprintf("%d: must be 0 or more", lo))
	case hi < 0:
		return invalidField(path+".max_"+what, fmt.Sprintf("%d: must be 0 (no bound) or more", hi))
	case hi != 0 && hi < lo:
		return invalidField(path+".max_"+what, fmt.Sprintf("%d is below min_%s %d", hi, what, lo))
	}
	return nil
}

// parsePriorities checks an allocation's priorities. Without any, an
// allocation that takes room ranks by it: the counters it increments and
// the lists it adds to, in name order, least room left first under PACKED
// (fill a server before the next) and most under DISTRIBUTED.
func parsePriorities(req *tetherv1.AllocateGameServerRequest, distributed bool, counters []events.CounterAction, lists []events.ListAction) ([]projections.Priority, error) {
	ps := req.GetPriorities()
	if n := len(ps); n > events.MaxCounters+events.MaxLists {
		return nil, invalidField("priorities", fmt.Sprintf("%d priorities; a game server has at most %d counters and lists", n, events.MaxCounters+events.MaxLists))
	}
	var out []projections.Priority
	for i, p := range ps {
		f := fmt.Sprintf("priorities[%d]", i)
		var pr projections.Priority
		switch p.GetType() {
		case "COUNTER":
		case "LIST":
			pr.List = true
		default:
			return nil, invalidField(f+".type", fmt.Sprintf("%q: must be COUNTER or LIST", p.GetType()))
		}
		if err := events.CheckCounterName(f+".key", p.GetKey()); err != nil {
			return nil, err
		}
		pr.Key = p.GetKey()
		switch p.GetOrder() {
		case "", "ASCENDING":
		case "DESCENDING":
			pr.Descending = true
		default:
			return nil, invalidField(f+".order", fmt.Sprintf("%q: must be ASCENDING or DESCENDING", p.GetOrder()))
		}
		out = append(out, pr)
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, c := range counters {
		if c.Diff > 0 {
			out = append(out, projections.Priority{Key: c.Name, Descending: distributed})
		}
	}
	for _, l := range lists {
		if len(l.Add) > 0 {
			out = append(out, projections.Priority{List: true, Key: l.Name, Descending: distributed})
		}
	}
	return out, nil
}

// parseActions checks an allocation's counter and list actions and
// returns them in name order.
func parseActions(req *tetherv1.AllocateGameServerRequest) ([]events.CounterAction, []events.ListAction, error) {
	if n := len(req.GetCounterActions()); n > events.MaxCounters {
		return nil, nil, invalidField("counter_actions", fmt.Sprintf("%d counters; a game server has at most %d", n, events.MaxCounters))
	}
	if n := len(req.GetListActions()); n > events.MaxLists {
		return nil, nil, invalidField("list_actions", fmt.Sprintf("%d lists; a game server has at most %d", n, events.MaxLists))
	}
	var counters []events.CounterAction
	for _, name := range slices.Sorted(maps.Keys(req.GetCounterActions())) {
		a := req.GetCounterActions()[name]
		f := fmt.Sprintf("counter_actions[%.70s]", name)
		if err := events.CheckCounterName(f, name); err != nil {
			return nil, nil, err
		}
		c := events.CounterAction{Name: name}
		switch strings.ToUpper(a.GetAction()) {
		case "INCREMENT":
			c.Diff = a.GetAmount()
		case "DECREMENT":
			c.Diff = -a.GetAmount()
		case "":
			if a.GetAmount() != 0 {
				return nil, nil, invalidField(f+".amount", "an amount needs an action, INCREMENT or DECREMENT")
			}
		default:
			return nil, nil, invalidField(f+".action", fmt.Sprintf("%q: must be INCREMENT or DECREMENT", a.GetAction()))
		}
		if a.GetAmount() < 0 {
			return nil, nil, invalidField(f+".amount", fmt.Sprintf("%d: must be 0 or more (DECREMENT takes away)", a.GetAmount()))
		}
		if a.Capacity != nil {
			if a.GetCapacity() < 0 {
				return nil, nil, invalidField(f+".capacity", fmt.Sprintf("%d: must be 0 or more", a.GetCapacity()))
			}
			c.Capacity = a.Capacity
		}
		if a.GetAction() == "" && c.Capacity == nil {
			return nil, nil, invalidField(f, "changes nothing: give an action and an amount, or a capacity")
		}
		counters = append(counters, c)
	}
	var lists []events.ListAction
	for _, name := range slices.Sorted(maps.Keys(req.GetListActions())) {
		a := req.GetListActions()[name]
		f := fmt.Sprintf("list_actions[%.70s]", name)
		if err := events.CheckCounterName(f, name); err != nil {
			return nil, nil, err
		}
		for _, vs := range []struct {
			field  string
			values []string
		}{{"add_values", a.GetAddValues()}, {"delete_values", a.GetDeleteValues()}} {
			if len(vs.values) > maxActionValues {
				return nil, nil, invalidField(f+"."+vs.field, fmt.Sprintf("%d values; a list holds at most %d", len(vs.values), maxActionValues))
			}
			for i, v := range vs.values {
				if v == "" || len(v) > events.MaxListValueBytes {
					return nil, nil, invalidField(fmt.Sprintf("%s.%s[%d]", f, vs.field, i), fmt.Sprintf("must be 1-%d bytes", events.MaxListValueBytes))
				}
			}
		}
		for i, v := range a.GetAddValues() {
			if slices.Contains(a.GetDeleteValues(), v) {
				return nil, nil, invalidField(fmt.Sprintf("%s.add_values[%d]", f, i), fmt.Sprintf("%q is in delete_values too", v))
			}
		}
		l := events.ListAction{Name: name, Add: a.GetAddValues(), Delete: a.GetDeleteValues()}
		if a.Capacity != nil {
			if c := a.GetCapacity(); c < 0 || c > events.MaxListCapacity {
				return nil, nil, invalidField(f+".capacity", fmt.Sprintf("%d: must be within [0, %d]", c, events.MaxListCapacity))
			}
			l.Capacity = a.Capacity
		}
		if len(l.Add) == 0 && len(l.Delete) == 0 && l.Capacity == nil {
			return nil, nil, invalidField(f, "changes nothing: give values to add or delete, or a capacity")
		}
		lists = append(lists, l)
	}
	return counters, lists, nil
}
