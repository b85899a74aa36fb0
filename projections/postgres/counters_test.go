package postgres_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A game server's counters and lists reach its row: the template's at
// GameServerScheduled, then as each CounterChanged and ListChanged left
// them, in the row's state and in its counters and lists columns (JSON
// numbers, for queries). A change the state refuses (a count over its
// capacity) is dead-lettered and leaves the row as it was.
func TestCountersAndListsReachTheViews(t *testing.T) {
	e := newEnv(t)
	const gs, plain = "fleets/arena/gameServers/gs-c", "fleets/arena/gameServers/gs-plain"
	template := &eventsv1.GameServerTemplate{Command: "/bin/game",
		Counters: map[string]*eventsv1.Counter{"rooms": {Count: 0, Capacity: 10}, "seats": {Count: 2, Capacity: 2}},
		Lists:    map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"p0"}}},
	}
	e.append(gs, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: template})
	e.append(plain, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}})
	e.append(gs,
		&eventsv1.ProcessStarted{Pid: 7, Attempt: 1},
		&eventsv1.GameServerReady{},
		&eventsv1.CounterChanged{Name: "rooms", Count: 3, Capacity: 10, CountDiff: 3},
		&eventsv1.ListChanged{Name: "players", Capacity: 3, Values: []string{"p0", "p1"}, Added: []string{"p1"}},
		&eventsv1.CounterChanged{Name: "rooms", Count: 11, Capacity: 10, CountDiff: 8}, // out of range: refused
		&eventsv1.ListChanged{Name: "players", Capacity: 5, Values: []string{"p1", "p2"}, Added: []string{"p2"}, Removed: []string{"p0"}},
	)

	pool := e.pool()
	e.run(e.projector(pool, "counters", time.Minute, 3))

	row, err := postgres.NewViews(pool).GameServer(e.ctx, gs)
	if err != nil {
		t.Fatal(err)
	}
	if c := row.State.GetCounters()["rooms"]; c.GetCount() != 3 || c.GetCapacity() != 10 {
		t.Errorf("rooms = %v, want 3 of 10 (the change over the capacity refused)", c)
	}
	if c := row.State.GetCounters()["seats"]; c.GetCount() != 2 || c.GetCapacity() != 2 {
		t.Errorf("seats = %v, want the template's 2 of 2", c)
	}
	if l := row.State.GetLists()["players"]; l.GetCapacity() != 5 || !slices.Equal(l.GetValues(), []string{"p1", "p2"}) {
		t.Errorf("players = %v, want [p1 p2] of 5", l)
	}

	var counters, lists []byte
	if err := pool.QueryRow(e.ctx, `SELECT counters, lists FROM game_servers WHERE name = $1`, gs).Scan(&counters, &lists); err != nil {
		t.Fatal(err)
	}
	var gotCounters map[string]map[string]int64
	if err := json.Unmarshal(counters, &gotCounters); err != nil {
		t.Fatalf("counters column %s: %v", counters, err)
	}
	if gotCounters["rooms"]["count"] != 3 || gotCounters["rooms"]["capacity"] != 10 || gotCounters["seats"]["count"] != 2 || len(gotCounters) != 2 {
		t.Errorf("counters column %s", counters)
	}
	var gotLists map[string]struct {
		Capacity int64    `json:"capacity"`
		Values   []string `json:"values"`
	}
	if err := json.Unmarshal(lists, &gotLists); err != nil {
		t.Fatalf("lists column %s: %v", lists, err)
	}
	if p := gotLists["players"]; p.Capacity != 5 || !slices.Equal(p.Values, []string{"p1", "p2"}) {
		t.Errorf("lists column %s", lists)
	}
	// Queries compare counts as numbers.
	var n int
	if err := pool.QueryRow(e.ctx, `SELECT count(*) FROM game_servers
		WHERE (counters->'rooms'->>'capacity')::bigint - (counters->'rooms'->>'count')::bigint >= 7`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d servers with 7 rooms free, want 1", n)
	}
	// A server without counters or lists has {} in both.
	if err := pool.QueryRow(e.ctx, `SELECT counters, lists FROM game_servers WHERE name = $1`, plain).Scan(&counters, &lists); err != nil {
		t.Fatal(err)
	}
	if string(counters) != "{}" || string(lists) != "{}" {
		t.Errorf("a server without counters: counters %s, lists %s, want {} and {}", counters, lists)
	}
	var dead []string
	rows, err := pool.Query(e.ctx, `SELECT type FROM dead_letters ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, typ)
	}
	if !slices.Equal(dead, []string{"CounterChanged"}) {
		t.Errorf("dead letters %v, want the CounterChanged over the capacity", dead)
	}
}
