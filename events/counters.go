package events

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A game server's counters and lists (docs/counters-and-lists.md), as
// Agones has them: a counter is a count within [0, capacity], a list
// distinct values, at most capacity of them. Its template names them and
// says how each starts (GameServerTemplate.counters and .lists); the game
// (through its agent's SDK) and the API change them (UpdateCounter,
// UpdateList), and every change is an event that holds the counter or list
// after it (CounterChanged, ListChanged). Who may write those is who may
// write any event of the server (checkWriter): its own host's agent, for
// its game's SDK calls, and the control plane (the API, for operators and
// matchmakers); another host's agent may not.

// Bounds of a game server's counters and lists, whoever sets them: a
// template, the API, or the game through its agent's SDK.
const (
	// MaxCounters bounds the counters of a server.
	MaxCounters = 32
	// MaxLists bounds the lists of a server.
	MaxLists = 32
	// MaxCounterNameBytes bounds the name of a counter or a list.
	MaxCounterNameBytes = 63
	// MaxListCapacity bounds one list's capacity: Agones' own bound.
	MaxListCapacity = 1000
	// MaxListValues bounds the capacities of a server's lists added
	// together, so that the values a server can hold (at most
	// MaxListValues × MaxListValueBytes, 512 KiB) keep its view row and its
	// API resource well within what a read can carry.
	MaxListValues = 4000
	// MaxListValueBytes bounds a list value.
	MaxListValueBytes = 128
)

// The classes of a CounterError (errors.Is), each the gRPC code Agones'
// SDK answers with and the API answers with.
var (
	// ErrOutOfRange: a count, capacity or list length outside its range
	// (OUT_OF_RANGE).
	ErrOutOfRange = errors.New("events: out of range")
	// ErrAlreadyExists: a value added that the list holds already
	// (ALREADY_EXISTS).
	ErrAlreadyExists = errors.New("events: already in the list")
	// ErrMissing: a counter or a list the server's template does not name,
	// or a value removed that the list does not hold (NOT_FOUND).
	ErrMissing = errors.New("events: no such counter, list or value")
)

// Reasons a counter or list change is refused (CounterError.Reason).
const (
	RefusedCounterNotFound    = "COUNTER_NOT_FOUND"     // ErrMissing
	RefusedListNotFound       = "LIST_NOT_FOUND"        // ErrMissing
	RefusedListValueNotFound  = "LIST_VALUE_NOT_FOUND"  // ErrMissing
	RefusedListValueExists    = "LIST_VALUE_EXISTS"     // ErrAlreadyExists
	RefusedCountOutOfRange    = "COUNT_OUT_OF_RANGE"    // ErrOutOfRange
	RefusedCapacityOutOfRange = "CAPACITY_OUT_OF_RANGE" // ErrOutOfRange
	RefusedListFull           = "LIST_FULL"             // ErrOutOfRange
)

// CounterError is a change of a counter or a list that the server's state
// refuses, as Agones' SDK refuses it: errors.Is tells its class
// (ErrOutOfRange, ErrAlreadyExists, ErrMissing). Nothing changes.
type CounterError struct {
	// Reason is one of the Refused… constants above.
	Reason string
	// Field is the command's field it is about, as the API names it:
	// "counter", "list", "count", "count_diff", "capacity", "add_values",
	// "remove_values", "values".
	Field string
	// Msg is for humans.
	Msg string
}

func (e *CounterError) Error() string { return e.Msg }

// Unwrap returns the error's class.
func (e *CounterError) Unwrap() error {
	switch e.Reason {
	case RefusedCounterNotFound, RefusedListNotFound, RefusedListValueNotFound:
		return ErrMissing
	case RefusedListValueExists:
		return ErrAlreadyExists
	}
	return ErrOutOfRange
}

func counterRefused(reason, field, format string, args ...any) error {
	return &CounterError{Reason: reason, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// UpdateCounter changes a counter, as Agones' SDK UpdateCounter does:
// Capacity (when set) first, then Count (when set), then CountDiff. A
// Count or CountDiff must land within [0, capacity]; a capacity lowered
// below the count (with neither) takes the count down to it, as Agones
// does. A change that changes nothing is a no-op.
type UpdateCounter struct {
	// Name is the counter's, one of the server's template.
	Name string
	// Count is the count to set; nil: as it is.
	Count *int64
	// CountDiff is added to the count; negative to take away.
	CountDiff int64
	// Capacity is the capacity to set; nil: as it is.
	Capacity *int64
}

// UpdateList changes a list: Capacity (when set) first, then Remove, then
// Add (at the end, in order); or, with SetValues, its values become Values
// (Agones' UpdateList with "values" in its mask; Add and Remove must then
// be empty). A value added that the list holds is refused
// (LIST_VALUE_EXISTS), a value removed that it does not hold too
// (LIST_VALUE_NOT_FOUND), and so are values past the capacity
// (LIST_FULL). A capacity lowered below the values kept (after Remove)
// keeps the first of them and drops the rest, as Agones does. A change
// that changes nothing is a no-op.
type UpdateList struct {
	// Name is the list's, one of the server's template.
	Name string
	// Capacity is the capacity to set; nil: as it is.
	Capacity *int64
	// Add holds values to add.
	Add []string
	// Remove holds values to remove.
	Remove []string
	// SetValues makes Values the list's values.
	SetValues bool
	// Values are the values of SetValues, distinct.
	Values []string
}

func (UpdateCounter) gameServerCommand() {}
func (UpdateList) gameServerCommand()    {}

// counterStates are the lifecycle states in which a server's counters and
// lists may change: from its placement until it stops serving.
var counterStates = []eventsv1.Lifecycle{scheduled, starting, ready, reserved, allocated}

// decideCounter decides an UpdateCounter.
func decideCounter(state *eventsv1.GameServerState, c UpdateCounter) ([]proto.Message, error) {
	if err := CheckCounterName("counter", c.Name); err != nil {
		return nil, err
	}
	if l := state.GetLifecycle(); !slices.Contains(counterStates, l) {
		return nil, &TransitionError{Aggregate: state.GetName(), From: LifecycleName(l), Event: "UpdateCounter"}
	}
	cur, ok := state.GetCounters()[c.Name]
	if !ok {
		return nil, counterRefused(RefusedCounterNotFound, "counter", "%s has no counter %q (its template names %s)",
			state.GetName(), c.Name, namesOf(state.GetCounters()))
	}
	count, capacity := cur.GetCount(), cur.GetCapacity()
	if c.Capacity != nil {
		if *c.Capacity < 0 {
			return nil, counterRefused(RefusedCapacityOutOfRange, "capacity", "capacity %d of counter %q: it must be 0 or more", *c.Capacity, c.Name)
		}
		capacity = *c.Capacity
	}
	if c.Count != nil {
		if *c.Count < 0 || *c.Count > capacity {
			return nil, counterRefused(RefusedCountOutOfRange, "count", "count %d of counter %q: it must be within [0, %d], its capacity", *c.Count, c.Name, capacity)
		}
		count = *c.Count
	}
	if d := c.CountDiff; d != 0 {
		// count may be above a lowered capacity here: the diff must
		// still land within [0, capacity], as Agones checks it.
		if d > 0 && count > capacity-d || d < 0 && (d == math.MinInt64 || count < -d || count+d > capacity) {
			return nil, counterRefused(RefusedCountOutOfRange, "count_diff", "count_diff %d of counter %q takes its count %d out of [0, %d], its capacity", d, c.Name, count, capacity)
		}
		count += d
	}
	// A capacity lowered below the count takes the count down with it, as
	// Agones truncates it.
	count = min(count, capacity)
	if count == cur.GetCount() && capacity == cur.GetCapacity() {
		return nil, nil
	}
	return []proto.Message{&eventsv1.CounterChanged{Name: c.Name, Count: count, Capacity: capacity, CountDiff: count - cur.GetCount()}}, nil
}

// decideList decides an UpdateList.
func decideList(state *eventsv1.GameServerState, c UpdateList) ([]proto.Message, error) {
	if err := CheckCounterName("list", c.Name); err != nil {
		return nil, err
	}
	if c.SetValues && (len(c.Add) > 0 || len(c.Remove) > 0) {
		return nil, Invalid("values", "set the values, or add and remove some, not both")
	}
	for _, f := range []struct {
		field  string
		values []string
	}{{"add_values", c.Add}, {"remove_values", c.Remove}, {"values", c.Values}} {
		seen := make(map[string]int, len(f.values))
		for i, v := range f.values {
			if err := checkListValue(fmt.Sprintf("%s[%d]", f.field, i), v); err != nil {
				return nil, err
			}
			if j, dup := seen[v]; dup {
				return nil, Invalid(fmt.Sprintf("%s[%d]", f.field, i), "%q is %s[%d] too", v, f.field, j)
			}
			seen[v] = i
		}
	}
	for i, v := range c.Add {
		if slices.Contains(c.Remove, v) {
			return nil, Invalid(fmt.Sprintf("add_values[%d]", i), "%q is in remove_values too", v)
		}
	}
	if l := state.GetLifecycle(); !slices.Contains(counterStates, l) {
		return nil, &TransitionError{Aggregate: state.GetName(), From: LifecycleName(l), Event: "UpdateList"}
	}
	cur, ok := state.GetLists()[c.Name]
	if !ok {
		return nil, counterRefused(RefusedListNotFound, "list", "%s has no list %q (its template names %s)",
			state.GetName(), c.Name, namesOf(state.GetLists()))
	}
	capacity := cur.GetCapacity()
	if c.Capacity != nil {
		if err := checkListCapacity("capacity", c.Name, *c.Capacity, state.GetLists()); err != nil {
			return nil, err
		}
		capacity = *c.Capacity
	}
	values := slices.Clone(cur.GetValues())
	var added, removed []string
	if c.SetValues {
		if int64(len(c.Values)) > capacity {
			return nil, counterRefused(RefusedListFull, "values", "%d values for list %q, whose capacity is %d", len(c.Values), c.Name, capacity)
		}
		for _, v := range values {
			if !slices.Contains(c.Values, v) {
				removed = append(removed, v)
			}
		}
		for _, v := range c.Values {
			if !slices.Contains(values, v) {
				added = append(added, v)
			}
		}
		values = slices.Clone(c.Values)
	}
	for _, v := range c.Remove {
		i := slices.Index(values, v)
		if i < 0 {
			return nil, counterRefused(RefusedListValueNotFound, "remove_values", "list %q does not hold %q", c.Name, v)
		}
		values = slices.Delete(values, i, i+1)
		removed = append(removed, v)
	}
	if int64(len(values)) > capacity {
		// A capacity lowered below the values keeps the first of them, as
		// Agones truncates the list.
		removed = append(removed, values[capacity:]...)
		values = values[:capacity]
	}
	for _, v := range c.Add {
		if slices.Contains(values, v) {
			return nil, counterRefused(RefusedListValueExists, "add_values", "list %q holds %q already", c.Name, v)
		}
		if int64(len(values)) >= capacity {
			return nil, counterRefused(RefusedListFull, "add_values", "list %q is full: it holds %d values, its capacity; %q does not fit", c.Name, len(values), v)
		}
		values = append(values, v)
		added = append(added, v)
	}
	if capacity == cur.GetCapacity() && slices.Equal(values, cur.GetValues()) {
		return nil, nil
	}
	return []proto.Message{&eventsv1.ListChanged{Name: c.Name, Capacity: capacity, Values: values, Added: added, Removed: removed}}, nil
}

// applyCounterChanged folds a CounterChanged into next (a copy of the
// state), refusing a counter the server does not have or a count out of
// its range: a writer that skipped the decision (an agent of a bug, or
// worse) cannot put a state in the views that the decision refuses.
func applyCounterChanged(next *eventsv1.GameServerState, d *eventsv1.CounterChanged) error {
	if _, ok := next.GetCounters()[d.GetName()]; !ok {
		return counterRefused(RefusedCounterNotFound, "counter", "%s has no counter %q", next.GetName(), d.GetName())
	}
	if d.GetCapacity() < 0 || d.GetCount() < 0 || d.GetCount() > d.GetCapacity() {
		return counterRefused(RefusedCountOutOfRange, "count", "counter %q: count %d out of [0, %d]", d.GetName(), d.GetCount(), d.GetCapacity())
	}
	next.Counters[d.GetName()] = &eventsv1.Counter{Count: d.GetCount(), Capacity: d.GetCapacity()}
	return nil
}

// applyListChanged folds a ListChanged into next (a copy of the state),
// refusing what the decision refuses, as applyCounterChanged does.
func applyListChanged(next *eventsv1.GameServerState, d *eventsv1.ListChanged) error {
	name := d.GetName()
	if _, ok := next.GetLists()[name]; !ok {
		return counterRefused(RefusedListNotFound, "list", "%s has no list %q", next.GetName(), name)
	}
	if err := checkListCapacity("capacity", name, d.GetCapacity(), next.GetLists()); err != nil {
		return err
	}
	if err := checkListValues("values", name, d.GetCapacity(), d.GetValues()); err != nil {
		return err
	}
	next.Lists[name] = &eventsv1.List{Capacity: d.GetCapacity(), Values: slices.Clone(d.GetValues())}
	return nil
}

// checkListCapacity refuses a capacity of list name out of [0,
// MaxListCapacity], or one that takes the capacities of lists (the
// server's or the template's, with name's own replaced) over
// MaxListValues.
func checkListCapacity(field, name string, capacity int64, lists map[string]*eventsv1.List) error {
	if capacity < 0 || capacity > MaxListCapacity {
		return counterRefused(RefusedCapacityOutOfRange, field, "capacity %d of list %q: it must be within [0, %d]", capacity, name, MaxListCapacity)
	}
	total := capacity
	for n, l := range lists {
		if n != name {
			total += l.GetCapacity()
		}
	}
	if total > MaxListValues {
		return counterRefused(RefusedCapacityOutOfRange, field,
			"capacity %d of list %q takes the server's lists to %d values together; at most %d", capacity, name, total, MaxListValues)
	}
	return nil
}

// checkListValues refuses values of list name that are not distinct, not
// each a valid value, or more than capacity.
func checkListValues(field, name string, capacity int64, values []string) error {
	if int64(len(values)) > capacity {
		return counterRefused(RefusedListFull, field, "list %q holds %d values, over its capacity %d", name, len(values), capacity)
	}
	seen := make(map[string]bool, len(values))
	for i, v := range values {
		if err := checkListValue(fmt.Sprintf("%s[%d]", field, i), v); err != nil {
			return err
		}
		if seen[v] {
			return counterRefused(RefusedListValueExists, field, "list %q holds %q twice", name, v)
		}
		seen[v] = true
	}
	return nil
}

// CheckCounterName refuses a counter's or a list's name that is not 1 to
// MaxCounterNameBytes letters, digits, '.', '_' or '-', starting with a
// letter or a digit: a name is a segment of the API's REST paths
// (…/counters/{name}).
func CheckCounterName(field, name string) error {
	ok := name != "" && len(name) <= MaxCounterNameBytes && isAlnum(rune(name[0]))
	for _, r := range name {
		ok = ok && (isAlnum(r) || strings.ContainsRune("._-", r))
	}
	if !ok {
		return Invalid(field, "%.70q must be 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", name, MaxCounterNameBytes)
	}
	return nil
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// checkListValue refuses a list value that is empty, longer than
// MaxListValueBytes, or not printable UTF-8 on one line (the views keep
// lists as jsonb, which cannot hold a NUL byte, as labels).
func checkListValue(field, v string) error {
	if v == "" || len(v) > MaxListValueBytes || !printable(v) {
		return Invalid(field, "%.70q must be 1-%d bytes of printable UTF-8 on one line", v, MaxListValueBytes)
	}
	return nil
}

// validateCounters checks a template's counters and lists; path is the
// template's field path ("fleet.template").
func validateCounters(path string, t *eventsv1.GameServerTemplate) error {
	if n := len(t.GetCounters()); n > MaxCounters {
		return Invalid(path+".counters", "at most %d counters, got %d", MaxCounters, n)
	}
	for _, name := range slices.Sorted(maps.Keys(t.GetCounters())) {
		c := t.GetCounters()[name]
		if err := CheckCounterName(path+".counters", name); err != nil {
			return err
		}
		f := fmt.Sprintf("%s.counters[%s]", path, name)
		switch {
		case c.GetCapacity() < 0:
			return Invalid(f+".capacity", "must be 0 or more, got %d", c.GetCapacity())
		case c.GetCount() < 0 || c.GetCount() > c.GetCapacity():
			return Invalid(f+".count", "must be within [0, %d], its capacity; got %d", c.GetCapacity(), c.GetCount())
		}
	}
	if n := len(t.GetLists()); n > MaxLists {
		return Invalid(path+".lists", "at most %d lists, got %d", MaxLists, n)
	}
	for _, name := range slices.Sorted(maps.Keys(t.GetLists())) {
		l := t.GetLists()[name]
		if err := CheckCounterName(path+".lists", name); err != nil {
			return err
		}
		f := fmt.Sprintf("%s.lists[%s]", path, name)
		if err := checkListCapacity(f+".capacity", name, l.GetCapacity(), t.GetLists()); err != nil {
			return Invalid(f+".capacity", "%v", err)
		}
		if err := checkListValues(f+".values", name, l.GetCapacity(), l.GetValues()); err != nil {
			if ve, ok := errors.AsType[*ValidationError](err); ok {
				return ve
			}
			return Invalid(f+".values", "%v", err)
		}
	}
	return nil
}

// namesOf lists a map's keys for messages: "none" for none.
func namesOf[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

// cloneCounters copies a template's or a state's counters.
func cloneCounters(m map[string]*eventsv1.Counter) map[string]*eventsv1.Counter {
	if m == nil {
		return nil
	}
	out := make(map[string]*eventsv1.Counter, len(m))
	for k, c := range m {
		out[k] = proto.CloneOf(c)
	}
	return out
}

// cloneLists copies a template's or a state's lists.
func cloneLists(m map[string]*eventsv1.List) map[string]*eventsv1.List {
	if m == nil {
		return nil
	}
	out := make(map[string]*eventsv1.List, len(m))
	for k, l := range m {
		out[k] = proto.CloneOf(l)
	}
	return out
}

// ChangeWords says a CounterChanged or a ListChanged in words, as history
// and explain show it: "counter rooms 3 of 10 (+1)", "list players +p2
// -p1 (2 of 100)"; an allocation's changes (GameServerAllocated,
// GameServerReallocated) joined by ", "; "" for any other event.
func ChangeWords(m proto.Message) string {
	var cs []*eventsv1.CounterChanged
	var ls []*eventsv1.ListChanged
	switch d := m.(type) {
	case *eventsv1.GameServerAllocated:
		cs, ls = d.GetCounters(), d.GetLists()
	case *eventsv1.GameServerReallocated:
		cs, ls = d.GetCounters(), d.GetLists()
	}
	if len(cs)+len(ls) > 0 {
		var words []string
		for _, c := range cs {
			words = append(words, ChangeWords(c))
		}
		for _, l := range ls {
			words = append(words, ChangeWords(l))
		}
		return strings.Join(words, ", ")
	}
	switch d := m.(type) {
	case *eventsv1.CounterChanged:
		s := fmt.Sprintf("counter %s %d of %d", d.GetName(), d.GetCount(), d.GetCapacity())
		if diff := d.GetCountDiff(); diff != 0 {
			s += fmt.Sprintf(" (%+d)", diff)
		}
		return s
	case *eventsv1.ListChanged:
		var b strings.Builder
		b.WriteString("list " + d.GetName())
		for _, v := range d.GetAdded() {
			b.WriteString(" +" + v)
		}
		for _, v := range d.GetRemoved() {
			b.WriteString(" -" + v)
		}
		fmt.Fprintf(&b, " (%d of %d)", len(d.GetValues()), d.GetCapacity())
		return b.String()
	}
	return ""
}
