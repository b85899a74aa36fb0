package dev_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// A game server that heartbeats but never says Ready (stuck loading) used
// to stay STARTING for ever, holding its slot. Now the fleet's ready
// timeout ends it: the example game server, told to wait an hour before
// Ready, goes UNHEALTHY with READY_TIMEOUT two seconds after its start
// while its heartbeats are on time, :explain says why, its fleet replaces
// it, and a template that says Ready brings the fleet up.
func TestAServerThatNeverSaysReadyIsReplaced(t *testing.T) {
	s := startStack(t, 1)
	// Judged on Ready alone: the ready timeout (2 s) ends it long before a
	// health period could (5 s). With fleetWithHealth's 1 s period, which
	// the example's heartbeat every second barely meets, a machine at load
	// 9 delayed one beat past its period: a HealthDegraded the server's
	// health did not deserve, and the test's contract, not the agent's.
	spec := fleetWithHealth(1, map[string]string{"TETHER_EXAMPLE_READY_DELAY": "1h"})
	spec["health"] = map[string]any{"initialDelaySeconds": 1, "periodSeconds": 5, "failureThreshold": 3, "readyTimeoutSeconds": 2}
	if code := s.rest("POST", "/v1/fleets?fleetId=stuck", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var name string
	wait.For(t, 30*time.Second, "a server ended with READY_TIMEOUT", func() bool {
		for _, g := range s.gameServers("stuck") {
			if g.Reason == "READY_TIMEOUT" {
				name = g.Name
				return true
			}
		}
		return false
	})
	var x explanation
	if code := s.rest("GET", "/v1/"+name+":explain", nil, &x); code != http.StatusOK {
		t.Fatalf("explain: %d", code)
	}
	if x.Reason != "READY_TIMEOUT" || x.Evidence["lastHeartbeatTime"] == nil {
		t.Fatalf("explain: reason %s evidence %v; want READY_TIMEOUT and the heartbeats it did send", x.Reason, x.Evidence)
	}
	var unhealthy *eventsv1.GameServerUnhealthy
	for _, e := range s.history(name) {
		switch d := e.Data.(type) {
		case *eventsv1.HealthDegraded:
			t.Fatalf("%s missed a heartbeat: it was to be judged on Ready alone, not on its health", name)
		case *eventsv1.GameServerUnhealthy:
			unhealthy = d
		}
	}
	if !strings.Contains(unhealthy.GetEvidence().GetDetail(), "had not called Ready 2s later") {
		t.Fatalf("GameServerUnhealthy %v; want its evidence to give the timeout", unhealthy)
	}
	wait.For(t, 30*time.Second, "a replacement scheduled", func() bool { return s.scheduled("stuck") >= 2 })

	fixed := fleetWithHealth(1, nil)
	if code := s.rest("PATCH", "/v1/fleets/stuck?updateMask=template", map[string]any{"template": fixed["template"]}, nil); code != http.StatusOK {
		t.Fatalf("fix the template: %d", code)
	}
	wait.For(t, 30*time.Second, "a READY server once the template says Ready", func() bool {
		return len(byState(s.gameServers("stuck"), "READY")) == 1
	})
}
