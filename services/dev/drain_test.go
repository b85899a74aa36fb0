package dev_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// placed is a game server with its host, as REST shows it.
type placed struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Host   string `json:"host"`
	Pid    int    `json:"pid"`
	Reason string `json:"reason"`
}

// placedServers lists a fleet's game servers with their hosts.
func (s *stack) placedServers(fleet string) []placed {
	s.t.Helper()
	var out struct {
		GameServers []placed `json:"gameServers"`
	}
	if code := s.rest("GET", "/v1/fleets/"+fleet+"/gameServers?pageSize=1000", nil, &out); code != http.StatusOK {
		s.t.Fatalf("list game servers: %d", code)
	}
	return out.GameServers
}

// servingLow is the fewest game servers of a fleet serving (READY,
// RESERVED or ALLOCATED) at once from the first moment `from` of them
// served, from the fleet's history (eachMoment).
func (s *stack) servingLow(fleet string, from int) int {
	s.t.Helper()
	low, started := -1, false
	s.eachMoment(fleet, 0, func(states map[string]*eventsv1.GameServerState) {
		n := countIn(states, servingStates...)
		started = started || n >= from
		if started && (low < 0 || n < low) {
			low = n
		}
	})
	return low
}

// Draining a host with 2 READY servers and 1 ALLOCATED one: the READY ones
// are replaced on the other host before they stop (the fleet never has
// fewer than 3 serving), the ALLOCATED one finishes its match untouched
// and then leaves too, and the host ends DRAINED. Uncordoned, it takes
// game servers again.
func TestDrainMovesReadyServersAndLetsMatchesFinish(t *testing.T) {
	s := startStack(t, 2)
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(3, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 20*time.Second, "3 READY game servers", func() bool { return len(byState(s.gameServers("arena"), "READY")) == 3 })
	a := s.allocate("arena", "p1")
	var busy placed
	wait.For(t, 10*time.Second, "the allocation in the views", func() bool {
		for _, g := range s.placedServers("arena") {
			if g.Name == a.GameServer.Name {
				busy = g
			}
		}
		return busy.State == "ALLOCATED"
	})
	host := busy.Host
	var before []placed
	for _, g := range s.placedServers("arena") {
		if g.Host == host && g.State == "READY" {
			before = append(before, g)
		}
	}
	if len(before) != 2 {
		t.Fatalf("PACKED put %v on %s with the allocated one; want 2 READY there", before, host)
	}

	var drained struct {
		State      string `json:"state"`
		Cordoned   bool   `json:"cordoned"`
		CordonedBy string `json:"cordonedBy"`
	}
	if code := s.rest("POST", "/v1/"+host+":drain", map[string]any{}, &drained); code != http.StatusOK {
		t.Fatalf("drain %s: %d", host, code)
	}
	if drained.State != "DRAINING" || !drained.Cordoned || drained.CordonedBy == "" {
		t.Fatalf("drain answered %+v, want DRAINING, cordoned, by someone", drained)
	}
	wait.For(t, 30*time.Second, "the READY servers replaced on the other host", func() bool {
		elsewhere := 0
		for _, g := range s.placedServers("arena") {
			if g.Host != host && g.State == "READY" {
				elsewhere++
			}
		}
		return elsewhere == 2
	})
	wait.For(t, 15*time.Second, "the drained host's READY servers gone", func() bool {
		gone := 0
		for _, g := range before {
			var now placed
			s.rest("GET", "/v1/"+g.Name, nil, &now)
			if now.State == "TERMINATED" && now.Reason == "HOST_DRAINING" {
				gone++
			}
		}
		return gone == 2
	})
	if low := s.servingLow("arena", 3); low < 3 {
		t.Fatalf("the fleet had %d servers serving at one point of the drain, want never fewer than 3", low)
	}
	var match placed
	s.rest("GET", "/v1/"+busy.Name, nil, &match)
	if match.State != "ALLOCATED" || match.Pid != busy.Pid || !alive(busy.Pid) {
		t.Fatalf("the allocated server during the drain: %+v (pid %d alive %v), want it ALLOCATED, untouched", match, busy.Pid, alive(busy.Pid))
	}
	if st := s.hostState(strings.TrimPrefix(host, "hosts/")); st != "DRAINING" {
		t.Fatalf("%s with a match running: %s, want DRAINING", host, st)
	}

	// The match ends (the game calls Ready): the server leaves too, and
	// the host is drained.
	if reply := tell(t, a.Endpoint.Address, a.Endpoint.Ports[0].Port, "READY"); reply != "OK" {
		t.Fatalf("READY: %q", reply)
	}
	wait.For(t, 30*time.Second, host+" DRAINED", func() bool { return s.hostState(strings.TrimPrefix(host, "hosts/")) == "DRAINED" })
	var types []string
	for _, e := range s.history(host) {
		types = append(types, e.Type)
	}
	if !slices.Contains(types, "HostDrainRequested") || types[len(types)-1] != "HostDrained" {
		t.Fatalf("%s history %v, want HostDrainRequested … HostDrained", host, types)
	}
	wait.For(t, 30*time.Second, "3 READY servers, none on the drained host", func() bool {
		ready := 0
		for _, g := range s.placedServers("arena") {
			if g.State != "TERMINATED" && g.Host == host {
				return false
			}
			if g.State == "READY" {
				ready++
			}
		}
		return ready == 3
	})

	// Uncordoned, it takes game servers again.
	if code := s.rest("POST", "/v1/"+host+":uncordon", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("uncordon: %d", code)
	}
	if code := s.rest("PATCH", "/v1/fleets/arena?updateMask=replicas", map[string]any{"replicas": 6}, nil); code != http.StatusOK {
		t.Fatalf("scale up: %d", code)
	}
	wait.For(t, 30*time.Second, "a new server on the uncordoned host", func() bool {
		for _, g := range s.placedServers("arena") {
			if g.Host == host && g.State == "READY" {
				return true
			}
		}
		return false
	})
}
