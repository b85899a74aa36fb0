package dev_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// `tether dev` authenticates every API call with the keys it makes, one
// per role in <data-dir>/keys: no key is 401; a viewer lists fleets but
// may not create one; a matchmaker allocates but may not delete a fleet;
// admin may do all; and a fleet's history names the key that created it.
func TestDevAuthenticatesEveryCall(t *testing.T) {
	dataDir := t.TempDir()
	p := startTether(t, []string{"DATABASE_URL=" + pgtest.NewDatabase(t)}, "--log-level", "warn", "dev", "--data-dir", dataDir,
		"--hosts", "1", "--rest-port", "-1", "--grpc-port", "-1", "--nats-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1",
		"--player-token-keys", playertoken.NewKeySpec("k1")) // accepted by tether dev too
	s := &stack{t: t, addrs: dev.Addresses{REST: restAddress(t, p)}}
	as := func(role string) *stack {
		c := *s
		if role != "" {
			c.key = devKey(t, dataDir, role)
		}
		return &c
	}

	if code := as("").rest("GET", "/v1/fleets", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("no key lists fleets: %d, want 401", code)
	}
	if code := as("viewer").rest("GET", "/v1/fleets", nil, nil); code != http.StatusOK {
		t.Errorf("viewer lists fleets: %d, want 200", code)
	}
	if code := as("viewer").rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(1, nil), nil); code != http.StatusForbidden {
		t.Errorf("viewer creates a fleet: %d, want 403", code)
	}
	if code := as("operator").rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(1, nil), nil); code != http.StatusOK {
		t.Fatalf("operator creates a fleet: %d", code)
	}
	admin := as("admin")
	wait.For(t, 30*time.Second, "the fleet's server READY", func() bool { return len(byState(admin.gameServers("arena"), "READY")) == 1 })
	if code := as("matchmaker").rest("POST", "/v1/fleets/arena/gameServers:allocate", map[string]any{}, nil); code != http.StatusOK {
		t.Errorf("matchmaker allocates: %d, want 200", code)
	}
	if code := as("matchmaker").rest("DELETE", "/v1/fleets/arena", nil, nil); code != http.StatusForbidden {
		t.Errorf("matchmaker deletes a fleet: %d, want 403", code)
	}
	var history struct {
		Events []struct{ Type, Actor string }
	}
	if code := as("auditor").rest("GET", "/v1/fleets/arena/events", nil, &history); code != http.StatusOK || len(history.Events) == 0 {
		t.Fatalf("auditor reads the fleet's history: %d, %d events", code, len(history.Events))
	}
	if e := history.Events[0]; e.Type != "FleetCreated" || e.Actor != "dev-operator (operator, api-key)" {
		t.Errorf("the fleet's first event: %s by %q, want FleetCreated by the operator key", e.Type, e.Actor)
	}
	if code := admin.rest("DELETE", "/v1/fleets/arena", nil, nil); code != http.StatusOK {
		t.Errorf("admin deletes the fleet: %d, want 200", code)
	}
}
