package projections

import (
	"cmp"
	"slices"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// What an AllocationQuery matches, as Agones' allocation selectors have it
// (docs/counters-and-lists.md, "Allocation"): a server of the fleet, READY
// (or ALLOCATED), with the labels, and with each counter and list named, whose
// count and room left (capacity less count, or less the values held) are
// within the bounds, and with room for players within bounds. A bound's
// max of 0 is no bound. The views' query
// (projections/postgres) selects the same servers, and Matches is how the
// allocator checks a server again after it learns of a change the views
// had not shown.

// CounterBounds bound a counter of the servers a query matches.
type CounterBounds struct {
	MinCount, MaxCount         int64 `json:",omitempty"`
	MinAvailable, MaxAvailable int64 `json:",omitempty"`
}

// ListBounds bound a list of the servers a query matches.
type ListBounds struct {
	// ContainsValue must be one of the list's values; empty: any.
	ContainsValue              string `json:",omitempty"`
	MinAvailable, MaxAvailable int64  `json:",omitempty"`
}

// PlayerBounds bound the room for players of the servers a query matches:
// events.PlayerCapacity less the players its game reports connected.
type PlayerBounds struct {
	MinAvailable, MaxAvailable int64 `json:",omitempty"`
}

// PlayersAvailable is the room for players a server's game tracks: its
// player capacity less the players connected, never below 0.
func PlayersAvailable(gs *eventsv1.GameServerState) int64 {
	return max(events.PlayerCapacity(gs)-int64(len(gs.GetPlayers())), 0)
}

// Priority ranks servers by the room left on a counter or a list:
// Ascending puts the least room left first (fill servers up), descending
// the most. Servers without it come after those with it, either way.
type Priority struct {
	// List says Key names a list; otherwise a counter.
	List bool `json:",omitempty"`
	// Key is the counter's or the list's name.
	Key string
	// Descending puts the most room left first.
	Descending bool `json:",omitempty"`
}

// Matches reports whether gs is one the query selects, its host's status
// aside (the views know that, not the server's state).
func (q AllocationQuery) Matches(gs *eventsv1.GameServerState) bool {
	want := eventsv1.Lifecycle_LIFECYCLE_READY
	if q.Allocated {
		want = eventsv1.Lifecycle_LIFECYCLE_ALLOCATED
	}
	if gs.GetLifecycle() != want {
		return false
	}
	if q.Fleet != "" && fleetOf(gs.GetName()) != q.Fleet {
		return false
	}
	for k, v := range q.MatchLabels {
		if got, ok := gs.GetLabels()[k]; !ok || got != v {
			return false
		}
	}
	for name, b := range q.Counters {
		c, ok := gs.GetCounters()[name]
		if !ok || !within(c.GetCount(), b.MinCount, b.MaxCount) || !within(c.GetCapacity()-c.GetCount(), b.MinAvailable, b.MaxAvailable) {
			return false
		}
	}
	if b := q.Players; b != nil && !within(PlayersAvailable(gs), b.MinAvailable, b.MaxAvailable) {
		return false
	}
	for name, b := range q.Lists {
		l, ok := gs.GetLists()[name]
		if !ok || !within(l.GetCapacity()-int64(len(l.GetValues())), b.MinAvailable, b.MaxAvailable) {
			return false
		}
		if b.ContainsValue != "" && !slices.Contains(l.GetValues(), b.ContainsValue) {
			return false
		}
	}
	return true
}

// within reports whether n is in [lo, hi], hi 0 being no bound.
func within(n, lo, hi int64) bool {
	return n >= lo && (hi == 0 || n <= hi)
}

// fleetOf is the fleet resource name of a game server's resource name
// ("fleets/{fleet}/gameServers/{id}").
func fleetOf(gameServer string) string {
	for i, n := 0, 0; i < len(gameServer); i++ {
		if gameServer[i] == '/' {
			if n++; n == 2 {
				return gameServer[:i]
			}
		}
	}
	return ""
}

// ComparePriorities orders two servers by the query's priorities: negative
// when a ranks first, 0 when they tie on every priority.
func (q AllocationQuery) ComparePriorities(a, b *eventsv1.GameServerState) int {
	for _, p := range q.Priorities {
		ra, oka := p.roomOf(a)
		rb, okb := p.roomOf(b)
		switch {
		case oka && !okb:
			return -1
		case !oka && okb:
			return 1
		case !oka:
			continue
		}
		c := cmp.Compare(ra, rb)
		if p.Descending {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// roomOf is the room left on the priority's counter or list of gs, and
// whether gs has it.
func (p Priority) roomOf(gs *eventsv1.GameServerState) (int64, bool) {
	if p.List {
		l, ok := gs.GetLists()[p.Key]
		return l.GetCapacity() - int64(len(l.GetValues())), ok
	}
	c, ok := gs.GetCounters()[p.Key]
	return c.GetCapacity() - c.GetCount(), ok
}

// Ranked reports whether the query ranks servers by their room
// (priorities): then the best is taken first, not one of the best few at
// random, and a server with room left after an allocation stays a
// candidate for the next.
func (q AllocationQuery) Ranked() bool { return len(q.Priorities) > 0 }

// RoomQuery reports whether servers may be allocated more than once from
// the query: ALLOCATED servers, or ranked ones.
func (q AllocationQuery) RoomQuery() bool { return q.Allocated || q.Ranked() }
