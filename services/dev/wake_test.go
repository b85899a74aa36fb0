package dev_test

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The controller acts on what an operator or a crash changes at once, not
// at its next pass: with passes a minute apart, a new fleet is started, a
// crashed server replaced and a scale-up served within seconds. (A crash
// to a READY replacement took a second, the pass's period.)
func TestEventsWakeTheController(t *testing.T) {
	s := startStack(t, 1, func(o *dev.Options) {
		o.ControllerOptions = func(c *controller.Options) { c.Interval = time.Minute }
	})
	// The first pass ran when the controller took the lease; from here on,
	// only a waking event makes another within the test.
	if code := s.rest("POST", "/v1/fleets?fleetId=woken", fleetSpec(2, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var ready []gameServer
	wait.For(t, 20*time.Second, "the new fleet's 2 servers READY", func() bool {
		ready = byState(s.gameServers("woken"), "READY")
		return len(ready) == 2
	})
	if err := syscall.Kill(ready[0].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "a replacement READY", func() bool {
		list := s.gameServers("woken")
		return len(byState(list, "READY")) == 2 && len(byState(list, "TERMINATED")) == 1
	})
	if code := s.rest("PATCH", "/v1/fleets/woken?updateMask=replicas", map[string]any{"replicas": 3}, nil); code != http.StatusOK {
		t.Fatalf("scale up: %d", code)
	}
	wait.For(t, 20*time.Second, "3 READY after the scale-up", func() bool { return len(byState(s.gameServers("woken"), "READY")) == 3 })
}
