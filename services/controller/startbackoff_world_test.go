package controller_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/testkit/wait"
)

const execError = "fork/exec /nonexistent/game: no such file or directory"

// failingAgent plays a host's agent that cannot launch the fleet's command
// until fixed: a start command ends the server PROCESS_START_FAILED with
// the exec error; once fixed, the server starts and is READY.
func (w *world) failingAgent(host string) (fixed *atomic.Bool) {
	w.t.Helper()
	fixed = &atomic.Bool{}
	producer := events.HostName(host)
	start := func(name string) error {
		if !fixed.Load() {
			return w.gameServerEvent(name, producer, events.Terminate{Reason: eventsv1.Reason_REASON_PROCESS_START_FAILED,
				Evidence: &eventsv1.Evidence{Detail: execError, StartAttempts: 1}})
		}
		if err := w.gameServerEvent(name, producer, events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: 1000, Address: "127.0.0.1", Attempt: 1}}); err != nil {
			return err
		}
		return w.gameServerEvent(name, producer, events.MarkReady{})
	}
	w.consumeCommands(host, func(cmd *agentv1.Command) error {
		s, ok := cmd.GetAction().(*agentv1.Command_Start)
		if !ok {
			return nil
		}
		var terr *events.TransitionError
		if err := start(s.Start.GetGameServer()); err != nil && !errors.As(err, &terr) {
			return err // a TransitionError is a duplicate start
		}
		return nil
	})
	return fixed
}

// fleetState reads a fleet from the views; nil before they show it.
func (w *world) fleetState(id string) *eventsv1.FleetState {
	w.t.Helper()
	f, err := w.Views.Fleet(w.Ctx, events.FleetName(id))
	if errors.Is(err, projections.ErrNotFound) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return f.State
}

// A fleet whose command cannot be launched gets its failed servers replaced
// after a backoff that doubles up to the cap, one probe at a time, with the
// failure and its exec error on the fleet; a new leader goes on counting
// where the last one stopped; once the servers start again the fleet
// recovers and is filled at once.
func TestStartFailuresBackOff(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 10)
	w.beat("h1")
	fixed := w.failingAgent("h1")
	clk := clockwork.NewFakeClockAt(time.Now())
	opts := func(o *controller.Options) {
		o.Clock, o.StartBackoffBase, o.StartBackoffCap = clk, time.Second, 4*time.Second
		o.UnreachableAfter, o.LostAfter = time.Hour, 2*time.Hour // the test clock moves on its own
	}
	c := w.controller("ctl-1", opts)
	w.fleet("arena", testSpec(3, eventsv1.Scheduling_SCHEDULING_PACKED))

	// The first three fail: counted, and nothing more is scheduled while the
	// clock stands before the backoff's end.
	wait.For(t, 10*time.Second, "3 failures on the fleet", func() bool {
		return w.fleetState("arena").GetStartFailing().GetConsecutiveFailures() == 3
	})
	c.passes(t, 5)
	if n := len(ofType(w.fleetEvents("arena"), "GameServerScheduled")); n != 3 {
		t.Fatalf("%d servers scheduled during the backoff, want 3", n)
	}
	f := w.fleetState("arena").GetStartFailing()
	if f.GetReason() != eventsv1.Reason_REASON_PROCESS_START_FAILED || f.GetLastError() != execError ||
		!f.GetBackoffUntil().AsTime().Equal(clk.Now().Add(4*time.Second)) {
		t.Fatalf("fleet failing: %v, want PROCESS_START_FAILED, the exec error, backoff 4s (3 failures, capped)", f)
	}

	// Past the backoff: one probe, which fails too; the backoff stays capped.
	clk.Advance(4 * time.Second)
	wait.For(t, 10*time.Second, "the probe's failure", func() bool {
		return w.fleetState("arena").GetStartFailing().GetConsecutiveFailures() == 4
	})
	c.passes(t, 5)
	if n := len(ofType(w.fleetEvents("arena"), "GameServerScheduled")); n != 4 {
		t.Fatalf("%d servers scheduled after one backoff, want 4 (one probe)", n)
	}

	// A new leader counts on from the fleet's failures, not from zero, and
	// does not count the old ones again.
	c.stop()
	c2 := w.controller("ctl-2", opts)
	wait.For(t, 10*time.Second, "ctl-2 to lead", c2.IsLeader)
	c2.passes(t, 5)
	if got := w.fleetState("arena").GetStartFailing().GetConsecutiveFailures(); got != 4 {
		t.Fatalf("after a new leader: %d failures, want 4", got)
	}
	if n := len(ofType(w.fleetEvents("arena"), "GameServerScheduled")); n != 4 {
		t.Fatalf("%d servers scheduled after a new leader took over during the backoff, want 4", n)
	}

	// The command works again: the next probe becomes READY, the fleet
	// recovers and is filled.
	fixed.Store(true)
	clk.Advance(4 * time.Second)
	wait.For(t, 10*time.Second, "3 READY servers", func() bool {
		return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 3
	})
	st := w.fleetState("arena")
	if st.GetStartFailing() != nil || st.GetStartRecovered().GetConsecutiveFailures() != 4 {
		t.Fatalf("after recovery: failing %v, recovered %v", st.GetStartFailing(), st.GetStartRecovered())
	}
	if n := len(ofType(w.fleetEvents("arena"), "GameServerScheduled")); n != 7 {
		t.Fatalf("%d servers scheduled in all, want 7 (3, a failed probe, a good probe, 2 more)", n)
	}
}
