package dev_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/dev/devkeys"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/testoidc"
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
		"--player-token-keys", playertoken.NewKeySpec("k1"), // accepted by tether dev too
		"--allowed-commands", filepath.Dir(gameServerBin))
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

// An operator's key is not the machine: `tether dev` runs only the
// example game server (here, the one beside its binary; the working
// directory has no bin/) and says so. A standalone server running /bin/sh
// to read the admin's key, as an operator could create before, ends at once
// with PROCESS_START_FAILED, never started, saying why; so does one running
// tether itself, beside the example (it could start an agent that runs
// anything); the example game server runs.
func TestDevRunsOnlyCommandsFromItsDirectories(t *testing.T) {
	tether, err := filepath.EvalSymlinks(tetherBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	example := filepath.Join(filepath.Dir(tether), dev.ExampleGameServer)
	if err := os.Link(gameServerBin, example); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	p := startTether(t, []string{"DATABASE_URL=" + pgtest.NewDatabase(t)}, "--log-level", "warn", "dev", "--data-dir", dataDir,
		"--hosts", "1", "--rest-port", "-1", "--grpc-port", "-1", "--nats-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1")
	operator := &stack{t: t, addrs: dev.Addresses{REST: restAddress(t, p)}, key: devKey(t, dataDir, "operator")}
	const banner = "game servers may run commands in: "
	var line string
	wait.For(t, 10*time.Second, "the banner's allowed commands", func() bool {
		var ok bool
		line, ok = p.out.find(banner)
		return ok
	})
	if !strings.Contains(line, banner+example+"   (") {
		t.Fatalf("the banner says %q, want game servers allowed only %s", line, example)
	}
	wait.For(t, 30*time.Second, "an ONLINE host", func() bool { return operator.hostState("h1") == "ONLINE" })

	refused := map[string]map[string]any{
		"shell":  {"command": "/bin/sh", "args": []string{"-c", "id; cat " + devkeys.File(dataDir, "admin")}},
		"tether": {"command": tether, "args": []string{"agent", "--allow-any-command", "--host-id", "h1"}},
	}
	for id, template := range refused {
		if code := operator.rest("POST", "/v1/fleets/standalone/gameServers?gameServerId="+id, map[string]any{"template": template}, nil); code != http.StatusOK {
			t.Fatalf("operator creates a standalone %s: %d", template["command"], code)
		}
	}
	for id, template := range refused {
		var g struct {
			gameServer
			Evidence struct {
				Detail string `json:"detail"`
			} `json:"evidence"`
		}
		wait.For(t, 30*time.Second, "the "+id+" server TERMINATED", func() bool {
			return operator.rest("GET", "/v1/fleets/standalone/gameServers/"+id, nil, &g) == http.StatusOK && g.State == "TERMINATED"
		})
		if g.Reason != "PROCESS_START_FAILED" || !strings.Contains(g.Evidence.Detail, fmt.Sprintf("command %q", template["command"])) ||
			!strings.Contains(g.Evidence.Detail, "not in a directory the agent allows commands from ("+example+")") {
			t.Errorf("%s ended %s: %q; want PROCESS_START_FAILED saying only %s is allowed", template["command"], g.Reason, g.Evidence.Detail, example)
		}
		var history struct {
			Events []struct{ Type string }
		}
		if code := operator.rest("GET", "/v1/fleets/standalone/gameServers/"+id+"/events", nil, &history); code != http.StatusOK {
			t.Fatalf("the %s server's history: %d", id, code)
		}
		for _, e := range history.Events {
			if e.Type == "ProcessStarted" {
				t.Errorf("%s was started", template["command"])
			}
		}
	}

	game := fleetSpec(0, nil)
	game["template"].(map[string]any)["command"] = example
	if code := operator.rest("POST", "/v1/fleets/standalone/gameServers?gameServerId=game", game, nil); code != http.StatusOK {
		t.Fatalf("operator creates a standalone %s: %d", example, code)
	}
	wait.For(t, 30*time.Second, "the example game server READY", func() bool {
		var g gameServer
		return operator.rest("GET", "/v1/fleets/standalone/gameServers/game", nil, &g) == http.StatusOK && g.State == "READY"
	})
}

// `tether dev` accepts an identity provider's OpenID Connect tokens, with
// the flags of `tether apiserver`, beside its own keys: both are built by
// services/compose, and dev once left OIDC out. A viewer's token lists
// fleets but may not create one; a token for another audience is 401.
func TestDevAcceptsOIDCTokens(t *testing.T) {
	idp := testoidc.New(t)
	dataDir := t.TempDir()
	p := startTether(t, []string{"DATABASE_URL=" + pgtest.NewDatabase(t)}, "--log-level", "warn", "dev", "--data-dir", dataDir,
		"--hosts", "1", "--rest-port", "-1", "--grpc-port", "-1", "--nats-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1",
		"--allowed-commands", filepath.Dir(gameServerBin),
		"--oidc-issuer", testoidc.Issuer, "--oidc-audience", "tether", "--oidc-jwks-file", idp.JWKSFile)
	s := &stack{t: t, addrs: dev.Addresses{REST: restAddress(t, p)}}
	with := func(token string) *stack {
		c := *s
		c.key = token
		return &c
	}
	viewer := with(idp.Token("tether", time.Hour, map[string]any{"email": "vera@example.com", "tether_role": "viewer"}))
	if code := viewer.rest("GET", "/v1/fleets", nil, nil); code != http.StatusOK {
		t.Errorf("a viewer's OIDC token lists fleets: %d, want 200", code)
	}
	if code := viewer.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(1, nil), nil); code != http.StatusForbidden {
		t.Errorf("a viewer's OIDC token creates a fleet: %d, want 403", code)
	}
	other := with(idp.Token("grafana", time.Hour, map[string]any{"tether_role": "admin"}))
	if code := other.rest("GET", "/v1/fleets", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("a token for another audience lists fleets: %d, want 401", code)
	}
	if code := with(devKey(t, dataDir, "viewer")).rest("GET", "/v1/fleets", nil, nil); code != http.StatusOK {
		t.Errorf("the stack's own viewer key beside OIDC: %d, want 200", code)
	}
}
