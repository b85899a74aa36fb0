package postgres_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// The views' allocation query selects exactly the servers
// AllocationQuery.Matches selects, by state, labels, counter and list
// bounds, a list value and room for tracked players, and ranks them by their priorities: the
// allocator checks a server again with Matches after a lost race, and the
// two must agree. Random servers and queries from a fixed seed.
func TestAllocationQueryMatchesWhatTheViewsSelect(t *testing.T) {
	e := newEnv(t)
	r := rand.New(rand.NewPCG(42, 1))
	e.append("hosts/h1", &eventsv1.HostRegistered{Capacity: 100, Address: "127.0.0.1"})
	e.append("hosts/h2", &eventsv1.HostRegistered{Capacity: 100, Address: "127.0.0.1"})
	players := []string{"p0", "p1", "p2", "p3"}
	var names []string
	for i := range 60 {
		tmpl := &eventsv1.GameServerTemplate{Command: "/bin/game",
			Counters: map[string]*eventsv1.Counter{"rooms": {Count: int64(r.IntN(5)), Capacity: 4}},
			Lists:    map[string]*eventsv1.List{},
		}
		if r.IntN(4) > 0 {
			l := &eventsv1.List{Capacity: 3}
			for _, p := range players {
				if len(l.Values) < 3 && r.IntN(3) == 0 {
					l.Values = append(l.Values, p)
				}
			}
			tmpl.Lists["players"] = l
		}
		if r.IntN(5) == 0 {
			tmpl.Counters = map[string]*eventsv1.Counter{} // no rooms at all
		}
		name := fmt.Sprintf("fleets/arena/gameServers/gs-%02d", i)
		names = append(names, name)
		host := []string{"hosts/h1", "hosts/h2"}[r.IntN(2)]
		e.append(name, &eventsv1.GameServerScheduled{Host: host, Template: tmpl, Labels: map[string]string{"mode": []string{"a", "b"}[r.IntN(2)]}},
			&eventsv1.ProcessStarted{Pid: int32(i + 1), Address: "127.0.0.1", Attempt: 1},
			&eventsv1.GameServerReady{})
		// Tracked players (Agones' player tracking): a capacity set or
		// the default (1,000), and up to three players connected.
		if r.IntN(2) == 0 {
			e.append(name, &eventsv1.PlayerCapacitySet{Capacity: int64(r.IntN(5))})
		}
		for j := range r.IntN(4) {
			e.append(name, &eventsv1.TrackedPlayerConnected{PlayerId: fmt.Sprintf("t%d", j), Count: int64(j + 1)})
		}
		if r.IntN(2) == 0 {
			e.append(name, &eventsv1.GameServerAllocated{GameSession: fmt.Sprintf("gameSessions/s%d", i)})
		}
	}
	pool := e.pool()
	e.run(e.projector(pool, "rooms", time.Minute, 100))
	v := postgres.NewViews(pool)
	all := map[string]*eventsv1.GameServerState{}
	for _, name := range names {
		row, err := v.GameServer(e.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		all[name] = row.State
	}

	bound := func() int64 { return []int64{0, 0, 1, 2, 3}[r.IntN(5)] }
	matched := 0
	for i := range 300 {
		q := projections.AllocationQuery{Fleet: "fleets/arena", Allocated: r.IntN(2) == 0, Limit: 1000}
		if r.IntN(3) == 0 {
			q.MatchLabels = map[string]string{"mode": "a"}
		}
		if r.IntN(2) == 0 {
			q.Counters = map[string]projections.CounterBounds{"rooms": {MinCount: bound(), MaxCount: bound(), MinAvailable: bound(), MaxAvailable: bound()}}
		}
		if r.IntN(2) == 0 {
			lb := projections.ListBounds{MinAvailable: bound(), MaxAvailable: bound()}
			if r.IntN(2) == 0 {
				lb.ContainsValue = players[r.IntN(len(players))]
			}
			q.Lists = map[string]projections.ListBounds{"players": lb}
		}
		if r.IntN(3) == 0 {
			q.Players = &projections.PlayerBounds{MinAvailable: bound(), MaxAvailable: []int64{0, 1, 2, 3, 1000}[r.IntN(5)]}
		}
		if r.IntN(2) == 0 {
			q.Priorities = append(q.Priorities, projections.Priority{Key: "rooms", Descending: r.IntN(2) == 0})
		}
		if r.IntN(3) == 0 {
			q.Priorities = append(q.Priorities, projections.Priority{List: true, Key: "players", Descending: r.IntN(2) == 0})
		}
		got, err := v.AllocationCandidates(e.ctx, q)
		if err != nil {
			t.Fatalf("query %d %+v: %v", i, q, err)
		}
		var gotNames, want []string
		for _, row := range got {
			gotNames = append(gotNames, row.State.GetName())
		}
		for _, name := range names {
			if q.Matches(all[name]) {
				want = append(want, name)
			}
		}
		if !slices.Equal(slices.Sorted(slices.Values(gotNames)), want) {
			t.Fatalf("query %d %+v:\nthe views select %v\nMatches selects  %v", i, q, slices.Sorted(slices.Values(gotNames)), want)
		}
		for j := 1; j < len(got); j++ {
			if q.ComparePriorities(got[j-1].State, got[j].State) > 0 {
				t.Fatalf("query %d %+v: %s ranks before %s against its priorities", i, q, got[j-1].State.GetName(), got[j].State.GetName())
			}
		}
		matched += len(want)
	}
	if matched == 0 {
		t.Fatal("no query matched any server: the test checks nothing")
	}
}
