package agent_test

import (
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// drainRequests counts the HostDrainRequested events of h1.
func (h *harness) drainRequests() int {
	h.t.Helper()
	n := 0
	for _, e := range h.history("hosts/h1") {
		if e.Type == "HostDrainRequested" {
			n++
		}
	}
	return n
}

// stopped reports whether the agent's Run has returned, keeping its
// result for the harness's cleanup.
func (h *harness) stopped() bool {
	select {
	case err := <-h.done:
		h.done <- err
		return true
	default:
		return false
	}
}

// With --drain-on-stop, a stopped agent asks for its host's drain and
// serves on, its game server untouched, until the server is stopped (as
// the controller does once a replacement serves elsewhere); then it stops.
func TestDrainOnStopWaitsForItsGameServersToEnd(t *testing.T) {
	bin := buildExample(t)
	h := newHarnessOpts(t, func(o *agent.Options) { o.DrainOnStop, o.DrainTimeout = true, time.Minute })
	name := "fleets/arena/gameServers/gs-drained"
	h.schedule(name, exampleTemplate(bin))
	pid := int(h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	h.waitEvent(name, "GameServerReady")

	h.crash() // the agent's context ends, as on SIGTERM
	wait.For(t, 10*time.Second, "the host's drain requested", func() bool { return h.drainRequests() == 1 })
	if h.stopped() || syscall.Kill(pid, 0) != nil {
		t.Fatalf("agent stopped %v, game server gone: the drain did not wait for it", h.stopped())
	}
	// The agent still takes commands: the controller's stop ends the server.
	if err := h.bus.Send(h.ctx, "h1", "tests", &agentv1.Command{Action: &agentv1.Command_Stop{Stop: &agentv1.StopGameServer{
		GameServer: name, Reason: eventsv1.Reason_REASON_HOST_DRAINING, Deadline: timestamppb.New(time.Now().Add(10 * time.Second)),
	}}}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "GameServerTerminated")
	wait.For(t, 10*time.Second, "the agent to stop once it runs nothing", h.stopped)
	if err := <-h.done; err != nil {
		t.Fatalf("agent: %v", err)
	}
	h.done <- nil
}

// A drain on stop ends early when told (a second signal), and at its
// timeout.
func TestDrainOnStopEndsEarlyOrAtItsTimeout(t *testing.T) {
	bin := buildExample(t)
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		early   bool
	}{
		{"second signal", time.Hour, true},
		{"timeout", 500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			early := make(chan struct{})
			h := newHarnessOpts(t, func(o *agent.Options) { o.DrainOnStop, o.DrainTimeout, o.StopDrain = true, tc.timeout, early })
			name := "fleets/arena/gameServers/gs-kept"
			h.schedule(name, exampleTemplate(bin))
			h.waitEvent(name, "GameServerReady")
			h.crash()
			wait.For(t, 10*time.Second, "the host's drain requested", func() bool { return h.drainRequests() == 1 })
			if tc.early {
				if h.stopped() {
					t.Fatal("the agent stopped before the drain ended")
				}
				close(early)
			}
			wait.For(t, 10*time.Second, "the agent to stop with its game server running", h.stopped)
		})
	}
}
