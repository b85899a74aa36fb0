package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// TestAllocationCandidatesFewerThanTheLimitAreAll: the allocator takes
// fewer rows than it asked for to mean there is no other READY server.
// The hosts whose rows are read are ranked and counted first; servers that
// leave READY on those hosts meanwhile (allocations being projected) must
// not hide the READY servers of a host that was not counted in: here h4,
// least busy so ranked last, keeps 5 READY servers throughout while the
// projector's writes churn the busier hosts.
func TestAllocationCandidatesFewerThanTheLimitAreAll(t *testing.T) {
	e := newEnv(t)
	tmpl := &eventsv1.GameServerTemplate{Command: "/bin/game"}
	servers := map[string]int{"h1": 20, "h2": 20, "h3": 20, "h4": 5}
	for i, h := range []string{"h1", "h2", "h3", "h4"} {
		e.append("hosts/"+h, &eventsv1.HostRegistered{Capacity: 100, Address: "127.0.0.1"})
		for j := range servers[h] {
			name := fmt.Sprintf("fleets/arena/gameServers/%s-%02d", h, j)
			e.append(name, &eventsv1.GameServerScheduled{Host: "hosts/" + h, Template: tmpl},
				&eventsv1.ProcessStarted{Pid: int32(100*i + j + 1), Address: "127.0.0.1", Attempt: 1},
				&eventsv1.GameServerReady{})
		}
		if h != "h4" { // busier than h4: PACKED ranks h4 last
			for j := range 3 {
				e.append(fmt.Sprintf("fleets/arena/gameServers/%s-%02d", h, j), &eventsv1.GameServerAllocated{GameSession: fmt.Sprintf("gameSessions/%s-%d", h, j)})
			}
		}
	}
	pool := e.pool()
	e.run(e.projector(pool, "candidates", time.Minute, 100))
	v := postgres.NewViews(pool)

	// 51 READY on h1-h3, so a limit of 50 counts h4 out; the churn takes
	// 10 of h1's READY servers out of READY and back, as allocations and
	// returns being projected do.
	const limit = 50
	ctx, stop := context.WithCancel(e.ctx)
	var churn sync.WaitGroup
	churn.Go(func() {
		for i := 0; ctx.Err() == nil && i < 100_000; i++ {
			state := []string{"SCHEDULED", "READY"}[i%2]
			if _, err := pool.Exec(ctx, `UPDATE game_servers SET state = $1 WHERE name LIKE 'fleets/arena/gameServers/h1-1%'`, state); err != nil && ctx.Err() == nil {
				t.Errorf("churn: %v", err)
				return
			}
		}
	})
	short := 0
	for i := range 400 {
		got, err := v.AllocationCandidates(e.ctx, projections.AllocationQuery{Fleet: "fleets/arena", Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= limit {
			continue
		}
		short++
		fromH4 := 0
		for _, r := range got {
			if strings.HasSuffix(r.State.GetHost(), "/h4") {
				fromH4++
			}
		}
		if fromH4 != servers["h4"] {
			stop()
			churn.Wait()
			t.Fatalf("read %d: %d rows (fewer than the limit %d, so every candidate), but %d of h4's %d READY servers", i, len(got), limit, fromH4, servers["h4"])
		}
	}
	stop()
	churn.Wait()
	if short == 0 {
		t.Fatal("no read came back short of the limit: the churn never took h1's servers out of READY")
	}
}
