package plan

import (
	"fmt"
	"testing"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Servers are grouped by fleet in their order whether or not they come
// ordered by name; a misnamed one is left out and reported; a group is a
// run of the servers given, and appending to it does not write over the
// next group's servers.
func TestGroupByFleet(t *testing.T) {
	row := func(name string, seq uint64) projections.Row[*eventsv1.GameServerState] {
		return projections.Row[*eventsv1.GameServerState]{State: &eventsv1.GameServerState{Name: name}, Sequence: seq}
	}
	servers := []projections.Row[*eventsv1.GameServerState]{
		row("fleets/a/gameServers/gs-1", 1),
		row("fleets/a/gameServers/gs-2", 2),
		row("fleets/b/gameServers/gs-3", 3),
		row("not a server name", 4),
		row("fleets/b/gameServers/gs-5", 5),
		row("fleets/a/gameServers/gs-6", 6), // out of order
	}
	byFleet, misnamed := GroupByFleet(servers)
	seqs := func(rows []projections.Row[*eventsv1.GameServerState]) string {
		var out []uint64
		for _, r := range rows {
			out = append(out, r.Sequence)
		}
		return fmt.Sprint(out)
	}
	if got := seqs(byFleet["fleets/a"]); got != "[1 2 6]" {
		t.Errorf("fleet a: %s, want [1 2 6]", got)
	}
	if got := seqs(byFleet["fleets/b"]); got != "[3 5]" {
		t.Errorf("fleet b: %s, want [3 5]", got)
	}
	if len(byFleet) != 2 || len(misnamed) != 1 {
		t.Errorf("%d groups and %d misnamed, want 2 and 1 (%v)", len(byFleet), len(misnamed), misnamed)
	}

	sorted := servers[:3] // a, a, b: in name order, each group a run
	byFleet, _ = GroupByFleet(sorted)
	_ = append(byFleet["fleets/a"], row("fleets/a/gameServers/gs-9", 9))
	if sorted[2].Sequence != 3 {
		t.Fatalf("appending to fleet a's group wrote over fleet b's server: %d", sorted[2].Sequence)
	}
}
