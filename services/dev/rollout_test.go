package dev_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// revised is a game server with its revision, as REST shows it.
type revised struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	Pid      int    `json:"pid"`
	Revision int64  `json:"revision,string"`
}

// revisedServers lists a fleet's game servers with their revisions.
func (s *stack) revisedServers(fleet string) []revised {
	s.t.Helper()
	var out struct {
		GameServers []revised `json:"gameServers"`
	}
	if code := s.rest("GET", "/v1/fleets/"+fleet+"/gameServers?pageSize=1000", nil, &out); code != http.StatusOK {
		s.t.Fatalf("list game servers: %d", code)
	}
	return out.GameServers
}

// count counts the servers of a revision in a state ("" for any but
// TERMINATED).
func count(list []revised, revision int64, state string) int {
	n := 0
	for _, g := range list {
		if g.Revision == revision && (g.State == state || (state == "" && g.State != "TERMINATED")) {
			n++
		}
	}
	return n
}

// rolloutOf reads a fleet's revision and rollout state.
func (s *stack) rolloutOf(fleet string) (revision int64, state string) {
	s.t.Helper()
	var f struct {
		Revision int64 `json:"revision,string"`
		Status   struct {
			Rollout struct{ State string }
		}
	}
	if code := s.rest("GET", "/v1/fleets/"+fleet, nil, &f); code != http.StatusOK {
		s.t.Fatalf("get fleet %s: %d", fleet, code)
	}
	return f.Revision, f.Status.Rollout.State
}

// rolloutBounds returns, from stream sequence from on in the fleet's
// history (eachMoment), the most servers there were at once (neither
// SHUTTING_DOWN nor TERMINATED), and the least margin of servers serving
// (READY, RESERVED or ALLOCATED) above what the default max unavailable
// allows at that moment: replicas less 25 % (rounded down) of the servers
// without a match. A negative margin is a moment below the bound.
func (s *stack) rolloutBounds(fleet string, from uint64, replicas int) (most, margin int) {
	s.t.Helper()
	margin = replicas
	s.eachMoment(fleet, from, func(states map[string]*eventsv1.GameServerState) {
		most = max(most, len(states)-countIn(states, leavingStates...))
		busy := countIn(states, eventsv1.Lifecycle_LIFECYCLE_ALLOCATED, eventsv1.Lifecycle_LIFECYCLE_RESERVED)
		margin = min(margin, countIn(states, servingStates...)-(replicas-(replicas-busy)/4))
	})
	return most, margin
}

// A rolling update of 10 servers, 4 of them ALLOCATED: the 6 READY ones
// are replaced within the default bounds (surge 3; unavailable 1 of the 6
// without a match, 2 once the matches end) at every
// moment of the history, the 4 ALLOCATED keep running on revision 1 until
// their matches end and are replaced then, and the rollout completes.
// Undo goes back to revision 1 the same way.
func TestRollingUpdateKeepsMatchesAndBounds(t *testing.T) {
	s := startStack(t, 3, func(o *dev.Options) { o.HostCapacity = 8 })
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(10, map[string]string{"VERSION": "1"}), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 30*time.Second, "10 READY servers", func() bool { return count(s.revisedServers("arena"), 1, "READY") == 10 })
	var matches []allocation
	for range 4 {
		matches = append(matches, s.allocate("arena", "p"))
	}
	wait.For(t, 10*time.Second, "4 ALLOCATED", func() bool { return count(s.revisedServers("arena"), 1, "ALLOCATED") == 4 })
	busy := map[string]int{}
	for _, g := range s.revisedServers("arena") {
		if g.State == "ALLOCATED" {
			busy[g.Name] = g.Pid
		}
	}

	v2 := fleetSpec(10, map[string]string{"VERSION": "2"})
	if code := s.rest("PATCH", "/v1/fleets/arena?updateMask=template", map[string]any{"template": v2["template"]}, nil); code != http.StatusOK {
		t.Fatalf("update the template: %d", code)
	}
	var started uint64
	for _, e := range s.history("fleets/arena") {
		if d, ok := e.Data.(*eventsv1.FleetRolloutStarted); ok && d.GetRevision() == 2 {
			started = e.Sequence
		}
	}
	if started == 0 {
		t.Fatal("no FleetRolloutStarted for revision 2 in the fleet's history")
	}
	wait.For(t, 60*time.Second, "6 READY servers of revision 2, the 4 matches on revision 1", func() bool {
		list := s.revisedServers("arena")
		return count(list, 2, "READY") == 6 && count(list, 1, "") == 4
	})
	for _, g := range s.revisedServers("arena") {
		if pid, ok := busy[g.Name]; ok && (g.State != "ALLOCATED" || g.Revision != 1 || g.Pid != pid || !alive(pid)) {
			t.Fatalf("match server %s during the rollout: %+v, want ALLOCATED on revision 1, pid %d running", g.Name, g, pid)
		}
	}
	if _, st := s.rolloutOf("arena"); st != "PROGRESSING" {
		t.Fatalf("rollout %s with 4 matches on revision 1, want PROGRESSING", st)
	}

	// The matches end: their servers are replaced too, and the rollout
	// completes.
	for _, a := range matches {
		if reply := tell(t, a.Endpoint.Address, a.Endpoint.Ports[0].Port, "READY"); reply != "OK" {
			t.Fatalf("READY: %q", reply)
		}
	}
	wait.For(t, 60*time.Second, "the rollout COMPLETED with 10 READY on revision 2", func() bool {
		_, st := s.rolloutOf("arena")
		list := s.revisedServers("arena")
		return st == "COMPLETED" && count(list, 2, "READY") == 10 && count(list, 1, "") == 0
	})
	// Surge 3 (25 % of 10, up); unavailable 25 % of the servers without a
	// match (rounded down): 1 while the 4 matches run, 2 after.
	most, margin := s.rolloutBounds("arena", started, 10)
	if most > 13 || margin < 0 {
		t.Fatalf("during the rollout: up to %d servers (max 10 + surge 3), and %d below the unavailability bound at one moment", most, -margin)
	}

	// Undo: back to revision 1, rolled out the same way.
	var undone struct {
		Revision int64 `json:"revision,string"`
		Template struct {
			Env map[string]string `json:"env"`
		} `json:"template"`
	}
	if code := s.rest("POST", "/v1/fleets/arena:undoRollout", map[string]any{}, &undone); code != http.StatusOK {
		t.Fatalf("undo: %d", code)
	}
	if undone.Revision != 1 || undone.Template.Env["VERSION"] != "1" {
		t.Fatalf("undo answered revision %d with env %v, want revision 1 with VERSION=1", undone.Revision, undone.Template.Env)
	}
	wait.For(t, 60*time.Second, "10 READY servers of revision 1 again", func() bool {
		_, st := s.rolloutOf("arena")
		list := s.revisedServers("arena")
		return st == "COMPLETED" && count(list, 1, "READY") == 10 && count(list, 2, "") == 0
	})
	var types []string
	for _, e := range s.history("fleets/arena") {
		types = append(types, e.Type)
	}
	for _, want := range []string{"FleetRolloutStarted", "FleetRolloutProgressed", "FleetRolloutCompleted", "FleetRolledBack"} {
		if !slices.Contains(types, want) {
			t.Fatalf("fleet history %v has no %s", types, want)
		}
	}
}

// A new revision whose servers crash before READY halts its rollout by
// itself after the strategy's threshold (3 in a row): the old servers
// keep serving (no fewer than replicas less max_unavailable READY on
// revision 1), and undo brings the fleet back.
func TestCrashLoopingRevisionHaltsItsRollout(t *testing.T) {
	s := startStack(t, 2)
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(4, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 30*time.Second, "4 READY servers", func() bool { return count(s.revisedServers("arena"), 1, "READY") == 4 })
	broken := fleetSpec(4, map[string]string{"TETHER_EXAMPLE_CRASH_BEFORE_READY": "true"})
	if code := s.rest("PATCH", "/v1/fleets/arena?updateMask=template", map[string]any{"template": broken["template"]}, nil); code != http.StatusOK {
		t.Fatalf("update the template: %d", code)
	}
	wait.For(t, 60*time.Second, "the rollout HALTED", func() bool {
		_, st := s.rolloutOf("arena")
		return st == "HALTED"
	})
	var halted *eventsv1.FleetRolloutHalted
	for _, e := range s.history("fleets/arena") {
		if d, ok := e.Data.(*eventsv1.FleetRolloutHalted); ok {
			halted = d
		}
	}
	if halted.GetConsecutiveFailures() < 3 || halted.GetRevision() != 2 {
		t.Fatalf("halt %v, want revision 2 after 3 failures", halted)
	}
	// Surge 1, unavailable 1 (25 % of 4): at least 3 old servers serve, and
	// they keep serving while it is halted.
	wait.Holds(t, 3*time.Second, "3 or more READY servers of revision 1", func() bool {
		return count(s.revisedServers("arena"), 1, "READY") >= 3
	})
	if code := s.rest("POST", "/v1/fleets/arena:undoRollout", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("undo: %d", code)
	}
	wait.For(t, 60*time.Second, "4 READY servers of revision 1, the rollout back COMPLETED", func() bool {
		rev, st := s.rolloutOf("arena")
		list := s.revisedServers("arena")
		return rev == 1 && st == "COMPLETED" && count(list, 1, "READY") == 4 && count(list, 2, "") == 0
	})
}
