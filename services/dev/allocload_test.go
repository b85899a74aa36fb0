package dev_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/wait"
	"github.com/tetherhq/tether/services/tools/allocload"
)

// The matchmaker load generator works against the real stack (a small run
// of BenchmarkMatchmakerAllocate's, in make test so the tool does not rot):
// every call is answered, every allocated server goes back to READY
// through its game, and the table says so.
func TestAllocloadAllocatesAndReturns(t *testing.T) {
	s := startStack(t, 2)
	const servers = 6
	if code := s.rest("POST", "/v1/fleets?fleetId=load", fleetSpec(servers, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 60*time.Second, "6 READY servers", func() bool { return len(byState(s.gameServers("load"), "READY")) == servers })
	res, err := allocload.Run(s.ctx, allocload.Options{
		Targets: []string{s.addrs.GRPC}, Parent: "fleets/load", Callers: 2, Duration: 30 * time.Second, Max: 4,
		Return: allocload.ReturnByReady("game", 50*time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Allocations != 4 || len(res.Errors) != 0 || res.Returned != 4 || res.ReturnFailed != 0 || res.Rate() <= 0 || res.Quantile(0.99) <= 0 {
		t.Fatalf("result %+v", res)
	}
	wait.For(t, 30*time.Second, "every server READY again", func() bool { return len(byState(s.gameServers("load"), "READY")) == servers })
	var table strings.Builder
	if err := res.Table(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "allocs/s") || !strings.Contains(table.String(), "none") {
		t.Fatalf("table:\n%s", table.String())
	}
}

// The example game server plays its matches out on its own with
// --match-length (TETHER_EXAMPLE_MATCH_LENGTH): once the allocation
// reaches it, the match lasts that long and the game calls Ready, which
// ends the game session (SERVER_READY_AGAIN) and makes the server READY
// for the next match, with nobody telling it. BenchmarkMatchmakerAllocate
// sustains its pool this way.
func TestGameServersEndTheirOwnMatches(t *testing.T) {
	s := startStack(t, 1)
	const fleet = "selfplay"
	if code := s.rest("POST", "/v1/fleets?fleetId="+fleet, fleetSpec(1, map[string]string{"TETHER_EXAMPLE_MATCH_LENGTH": "300ms"}), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 60*time.Second, "a READY server", func() bool { return len(byState(s.gameServers(fleet), "READY")) == 1 })
	for match := range 2 {
		a := s.allocate(fleet, "p1")
		wait.For(t, 15*time.Second, fmt.Sprintf("match %d ended by the game's Ready", match), func() bool {
			var gs gameSession
			return s.rest("GET", "/v1/"+a.GameSession.Name, nil, &gs) == http.StatusOK && gs.State == "ENDED" && gs.EndReason == "SERVER_READY_AGAIN"
		})
		wait.For(t, 15*time.Second, "the server READY again", func() bool { return len(byState(s.gameServers(fleet), "READY")) == 1 })
	}
}
