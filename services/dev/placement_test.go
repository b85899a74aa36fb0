package dev_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// fleetCondition is a fleet condition as REST shows it.
type fleetCondition struct{ Type, Status, Reason, Message string }

// placementOf reads a fleet's PLACEMENT_BLOCKED condition and its waiting
// replicas (none before the views have the fleet).
func (s *stack) placementOf(fleet string) (fleetCondition, int) {
	s.t.Helper()
	var f struct {
		Status struct {
			Conditions      []fleetCondition
			WaitingReplicas int
		}
	}
	switch code := s.rest("GET", "/v1/fleets/"+fleet, nil, &f); code {
	case http.StatusOK, http.StatusNotFound:
	default:
		s.t.Fatalf("get fleet %s: %d", fleet, code)
	}
	for _, c := range f.Status.Conditions {
		if c.Type == "PLACEMENT_BLOCKED" {
			return c, f.Status.WaitingReplicas
		}
	}
	return fleetCondition{}, f.Status.WaitingReplicas
}

// A fleet whose template selects zone dev-b runs only on h2 (tether dev's
// hosts have zones dev-a, dev-b, dev-c); scaled past h2's 4 slots, it
// shows PLACEMENT_BLOCKED with NO_MATCHING_HOST and the servers it waits
// for, while the other hosts stay empty; scaled back, the condition turns
// False. A selector no host matches says so.
func TestHostSelectorPlacesOnMatchingHostsOnly(t *testing.T) {
	s := startStack(t, 3)
	spec := fleetSpec(3, nil)
	spec["template"].(map[string]any)["hostSelector"] = map[string]string{"zone": "dev-b"}
	if code := s.rest("POST", "/v1/fleets?fleetId=eu", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 20*time.Second, "3 READY servers", func() bool { return len(byState(s.gameServers("eu"), "READY")) == 3 })
	if code := s.rest("PATCH", "/v1/fleets/eu?updateMask=replicas", map[string]any{"replicas": 6}, nil); code != http.StatusOK {
		t.Fatalf("scale up: %d", code)
	}
	var cond fleetCondition
	var waiting int
	wait.For(t, 20*time.Second, "PLACEMENT_BLOCKED with 2 waiting", func() bool {
		cond, waiting = s.placementOf("eu")
		return cond.Status == "True" && waiting == 2
	})
	if cond.Reason != "NO_MATCHING_HOST" || cond.Message == "" {
		t.Fatalf("condition %+v, want NO_MATCHING_HOST with a message", cond)
	}
	wait.For(t, 20*time.Second, "4 READY servers", func() bool { return len(byState(s.gameServers("eu"), "READY")) == 4 })
	for _, g := range s.placedServers("eu") {
		if g.Host != "hosts/h2" {
			t.Fatalf("%s placed on %s; the selector allows only h2 (zone dev-b)", g.Name, g.Host)
		}
	}
	if code := s.rest("PATCH", "/v1/fleets/eu?updateMask=replicas", map[string]any{"replicas": 4}, nil); code != http.StatusOK {
		t.Fatalf("scale down: %d", code)
	}
	wait.For(t, 20*time.Second, "PLACEMENT_BLOCKED False", func() bool {
		cond, waiting = s.placementOf("eu")
		return cond.Status == "False" && waiting == 0
	})

	nowhere := fleetSpec(1, nil)
	nowhere["template"].(map[string]any)["hostSelector"] = map[string]string{"zone": "mars"}
	if code := s.rest("POST", "/v1/fleets?fleetId=mars", nowhere, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 20*time.Second, "PLACEMENT_BLOCKED for the selector no host matches", func() bool {
		cond, waiting = s.placementOf("mars")
		return cond.Status == "True" && waiting == 1
	})
	if want := "1 game servers wait: no ONLINE, uncordoned host has labels zone=mars"; cond.Reason != "NO_MATCHING_HOST" || cond.Message != want {
		t.Fatalf("condition %+v, want NO_MATCHING_HOST: %s", cond, want)
	}
	if n := len(s.placedServers("mars")); n != 0 {
		t.Fatalf("%d servers of a fleet no host matches", n)
	}
}

// A standalone game server honours its template's host selector and
// cordons too: placed automatically on the matching host, refused where
// no host matches, and refused on a cordoned host asked for by name.
func TestStandaloneServerHonoursSelectorAndCordon(t *testing.T) {
	s := startStack(t, 3)
	wait.For(t, 10*time.Second, "3 ONLINE hosts", func() bool {
		return s.hostState("h1") == "ONLINE" && s.hostState("h2") == "ONLINE" && s.hostState("h3") == "ONLINE"
	})
	spec := fleetSpec(0, nil)
	spec["template"].(map[string]any)["hostSelector"] = map[string]string{"zone": "dev-c"}
	var g placed
	if code := s.rest("POST", "/v1/fleets/standalone/gameServers?gameServerId=c1", spec, &g); code != http.StatusOK || g.Host != "hosts/h3" {
		t.Fatalf("standalone with zone dev-c: %d on %q, want hosts/h3", code, g.Host)
	}
	spec["template"].(map[string]any)["hostSelector"] = map[string]string{"zone": "mars"}
	var refused struct {
		Details []struct{ Reason string } `json:"details"`
	}
	if code := s.rest("POST", "/v1/fleets/standalone/gameServers?gameServerId=m1", spec, &refused); code != http.StatusTooManyRequests ||
		len(refused.Details) == 0 || refused.Details[0].Reason != "NO_MATCHING_HOST" {
		t.Fatalf("standalone with zone mars: %d %+v, want 429 NO_MATCHING_HOST", code, refused)
	}
	if code := s.rest("POST", "/v1/hosts/h1:cordon", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("cordon: %d", code)
	}
	wait.For(t, 10*time.Second, "h1 cordoned in the views", func() bool { return s.hostState("h1") == "ONLINE" && s.cordoned("h1") })
	plain := fleetSpec(0, nil)
	if code := s.rest("POST", "/v1/fleets/standalone/gameServers?gameServerId=h1-1&host=hosts/h1", plain, &refused); code != http.StatusBadRequest ||
		len(refused.Details) == 0 || refused.Details[0].Reason != "HOST_CORDONED" {
		t.Fatalf("standalone on cordoned h1: %d %+v, want 400 HOST_CORDONED", code, refused)
	}
}

// cordoned reports whether the API shows a host cordoned.
func (s *stack) cordoned(id string) bool {
	s.t.Helper()
	var h struct {
		Cordoned bool `json:"cordoned"`
	}
	return s.rest("GET", "/v1/hosts/"+id, nil, &h) == http.StatusOK && h.Cordoned
}

// tether dev gives each host a zone of its own.
func TestZonesAreDistinct(t *testing.T) {
	seen := map[string]int{}
	for i := range 800 {
		z := dev.ZoneOf(i)
		if j, ok := seen[z]; ok {
			t.Fatalf("hosts %d and %d share zone %s", j, i, z)
		}
		seen[z] = i
	}
	for i, want := range map[int]string{0: "dev-a", 1: "dev-b", 25: "dev-z", 26: "dev-aa", 27: "dev-ab", 52: "dev-ba"} {
		if got := dev.ZoneOf(i); got != want {
			t.Errorf("ZoneOf(%d) = %s, want %s", i, got, want)
		}
	}
}
