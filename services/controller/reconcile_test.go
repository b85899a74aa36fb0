package controller_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// Placement end to end: decisions appended by the controller, start
// commands sent to each server's host and only there (the placement rules
// themselves are the planner's tests, plan/plan_test.go).
func TestPlacement(t *testing.T) {
	for _, tc := range []struct {
		name       string
		scheduling eventsv1.Scheduling
		replicas   int32
		want       map[string]int // servers scheduled on each host (a pass carries out its decisions concurrently: the stream's order is not the plan's)
	}{
		{"packed fills one host first", eventsv1.Scheduling_SCHEDULING_PACKED, 2, map[string]int{"hosts/h1": 2}},
		{"distributed spreads", eventsv1.Scheduling_SCHEDULING_DISTRIBUTED, 2, map[string]int{"hosts/h1": 1, "hosts/h2": 1}},
		{"packed spills to the next host when full", eventsv1.Scheduling_SCHEDULING_PACKED, 3, map[string]int{"hosts/h1": 2, "hosts/h2": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.host("h1", 2)
			w.host("h2", 2)
			w.beat("h1", "h2")
			agents := map[string]*agent{"hosts/h1": w.agent("h1", 100), "hosts/h2": w.agent("h2", 100)}
			c := w.controller("ctl-1")
			spec := testSpec(tc.replicas, tc.scheduling)
			w.fleet("arena", spec)

			wait.For(t, 10*time.Second, "every replica READY", func() bool {
				return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == int(tc.replicas)
			})
			c.passes(t, 3) // passes that saw every replica: nothing more to do
			scheduled := ofType(w.fleetEvents("arena"), "GameServerScheduled")
			hosts := map[string]int{}
			for _, e := range scheduled {
				hosts[e.Data.(*eventsv1.GameServerScheduled).GetHost()]++
				if e.Producer != "controllers/ctl-1" || e.CorrelationID == "" {
					t.Errorf("%s: producer %q, correlation %q", e.Aggregate, e.Producer, e.CorrelationID)
				}
			}
			if !maps.Equal(hosts, tc.want) {
				t.Fatalf("scheduled on %v, want %v", hosts, tc.want)
			}
			if n := c.metric(t, "tether_controller_scheduled"); n != float64(tc.replicas) {
				t.Errorf("tether_controller_scheduled = %v", n)
			}

			// Each server's start command went to its host, and only there.
			for _, e := range scheduled {
				host := e.Data.(*eventsv1.GameServerScheduled).GetHost()
				for h, a := range agents {
					var got int
					for _, s := range a.starts() {
						if s.GetGameServer() != e.Aggregate {
							continue
						}
						got++
						if !proto.Equal(s.GetTemplate(), spec.GetTemplate()) || !proto.Equal(s.GetHealth(), spec.GetHealth()) ||
							s.GetSdkDisconnectGraceSeconds() != spec.GetSdkDisconnectGraceSeconds() || !maps.Equal(s.GetLabels(), spec.GetLabels()) {
							t.Errorf("start command of %s does not carry the spec: %v", e.Aggregate, s)
						}
					}
					if want := map[bool]int{true: 1, false: 0}[h == host]; got != want {
						t.Errorf("%s got %d start commands for %s (scheduled on %s)", h, got, e.Aggregate, host)
					}
				}
			}
			for _, a := range agents {
				for _, cmd := range a.commands() {
					if cmd.GetSender() != "controllers/ctl-1" {
						t.Errorf("command sender %q", cmd.GetSender())
					}
				}
			}
		})
	}
}

func TestNoHostWithRoomWaitsForRoom(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 1)
	w.beat("h1", "h2")
	w.agent("h1", 100)
	w.agent("h2", 100)
	c := w.controller("ctl-1")
	w.fleet("arena", testSpec(2, eventsv1.Scheduling_SCHEDULING_PACKED))
	wait.For(t, 10*time.Second, "1 READY server", func() bool { return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 1 })
	c.passes(t, 3)
	if got := ofType(w.fleetEvents("arena"), "GameServerScheduled"); len(got) != 1 {
		t.Fatalf("%d servers scheduled on a host of capacity 1", len(got))
	}
	w.host("h2", 1)
	wait.For(t, 10*time.Second, "the second server on the new host", func() bool {
		return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2
	})
}

func TestTerminatedServerIsReplaced(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 4)
	w.beat("h1")
	w.agent("h1", 100)
	c := w.controller("ctl-1")
	w.fleet("arena", testSpec(2, eventsv1.Scheduling_SCHEDULING_PACKED))
	wait.For(t, 10*time.Second, "2 READY servers", func() bool { return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2 })

	crashed := w.terminateOne("arena", "h1")
	wait.For(t, 10*time.Second, "a replacement", func() bool { return len(ofType(w.fleetEvents("arena"), "GameServerScheduled")) == 3 })
	wait.For(t, 10*time.Second, "2 READY servers again", func() bool { return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2 })
	c.passes(t, 3)
	states := w.states("arena")
	if len(states) != 3 || states[crashed] != eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
		t.Fatalf("servers: %v", states)
	}
	if got := ofType(w.fleetEvents("arena"), "ShutdownRequested"); len(got) != 0 {
		t.Fatalf("%d shutdowns requested", len(got))
	}
}

// rows returns a fleet's game servers from the views.
func (w *world) rows(fleet string) []projections.Row[*eventsv1.GameServerState] {
	w.t.Helper()
	rows, err := w.Views.ListGameServers(w.Ctx, projections.GameServerQuery{Fleet: events.FleetName(fleet), Limit: 1000})
	if err != nil {
		w.t.Fatal(err)
	}
	return rows
}

func TestScaleDownReadyFirstNeverAllocated(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 8)
	w.beat("h1")
	a := w.agent("h1", 3) // the fourth server stays STARTING
	c := w.controller("ctl-1")
	w.fleet("arena", testSpec(4, eventsv1.Scheduling_SCHEDULING_PACKED))
	wait.For(t, 10*time.Second, "3 READY servers and 1 STARTING", func() bool {
		return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 3 && w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_STARTING) == 1
	})

	// Allocate the newest READY server; name the others.
	var ready []*eventsv1.GameServerState
	var starting string
	for _, r := range w.rows("arena") {
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_READY:
			ready = append(ready, r.State)
		case eventsv1.Lifecycle_LIFECYCLE_STARTING:
			starting = r.State.GetName()
		}
	}
	slices.SortFunc(ready, func(x, y *eventsv1.GameServerState) int {
		return y.GetCreateTime().AsTime().Compare(x.GetCreateTime().AsTime())
	})
	allocated, newer, older := ready[0].GetName(), ready[1].GetName(), ready[2].GetName()
	if err := w.gameServerEvent(allocated, "apiservers/test", &eventsv1.GameServerAllocated{GameSession: "gameSessions/s1"}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the allocation in the views", func() bool {
		return w.states("arena")[allocated] == eventsv1.Lifecycle_LIFECYCLE_ALLOCATED
	})

	shutdowns := func() []events.Envelope { return ofType(w.fleetEvents("arena"), "ShutdownRequested") }
	for i, step := range []struct {
		replicas int32
		want     string // the server shut down
		detail   string
	}{
		{3, newer, "fleet scaled from 4 to 3"},    // READY first, newest first
		{2, older, "fleet scaled from 3 to 2"},    // then the other READY one
		{0, starting, "fleet scaled from 2 to 0"}, // then the one not yet ready; never the ALLOCATED one
	} {
		before := time.Now()
		w.scale("arena", step.replicas)
		wait.For(t, 10*time.Second, "a shutdown", func() bool { return len(shutdowns()) == i+1 })
		e := shutdowns()[i]
		d := e.Data.(*eventsv1.ShutdownRequested)
		if e.Aggregate != step.want {
			t.Fatalf("scaled to %d: shut down %s (%v), want %s", step.replicas, e.Aggregate, w.states("arena")[e.Aggregate], step.want)
		}
		if d.GetReason() != eventsv1.Reason_REASON_FLEET_SCALED_DOWN || d.GetEvidence().GetRequestedBy() != "controllers/ctl-1" ||
			d.GetEvidence().GetDetail() != step.detail || e.Producer != "controllers/ctl-1" {
			t.Fatalf("shutdown of %s: %v by %s", e.Aggregate, d, e.Producer)
		}
		// A decision is dated from its pass's start (the snapshot's Now),
		// and the pass that read the new size may have begun before the
		// test scaled (both cores busy: 2.04 s into the test, a deadline
		// just under 30 s after before): allow it a pass's length.
		if dl := d.GetDeadline().AsTime(); dl.Before(before.Add(30*time.Second-passAllowance)) || dl.After(time.Now().Add(30*time.Second)) {
			t.Fatalf("deadline %s is not 30 s after the decision (scaled at %s)", dl, before)
		}
		wait.For(t, 10*time.Second, "the stop command", func() bool {
			for _, s := range a.stops() {
				if s.GetGameServer() == step.want {
					if s.GetReason() != eventsv1.Reason_REASON_FLEET_SCALED_DOWN || !s.GetDeadline().AsTime().Equal(d.GetDeadline().AsTime()) {
						t.Fatalf("stop command %v", s)
					}
					return true
				}
			}
			return false
		})
		wait.For(t, 10*time.Second, "the server to end", func() bool {
			return w.states("arena")[step.want] == eventsv1.Lifecycle_LIFECYCLE_TERMINATED
		})
		c.passes(t, 3)
		if n := len(shutdowns()); n != i+1 {
			t.Fatalf("scaled to %d: %d shutdowns in all", step.replicas, n)
		}
	}
	if got := w.states("arena")[allocated]; got != eventsv1.Lifecycle_LIFECYCLE_ALLOCATED {
		t.Fatalf("allocated server is %v", got)
	}
	if n := len(ofType(w.fleetEvents("arena"), "GameServerScheduled")); n != 4 {
		t.Fatalf("%d servers scheduled", n)
	}
	if n := c.metric(t, "tether_controller_shutdowns"); n != 3 {
		t.Fatalf("tether_controller_shutdowns = %v", n)
	}
}

func TestDeletedFleetIsShutDown(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 4)
	w.beat("h1")
	a := w.agent("h1", 100)
	c := w.controller("ctl-1")
	w.fleet("arena", testSpec(2, eventsv1.Scheduling_SCHEDULING_PACKED))
	w.fleet("other", testSpec(1, eventsv1.Scheduling_SCHEDULING_PACKED))
	wait.For(t, 10*time.Second, "3 READY servers", func() bool {
		return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2 && w.countStates("other", eventsv1.Lifecycle_LIFECYCLE_READY) == 1
	})
	hist, err := w.Store.History(w.Ctx, events.MustSubject("fleets/arena"), 0)
	if err != nil {
		t.Fatal(err)
	}
	w.append("fleets/arena", hist[len(hist)-1].Sequence, &eventsv1.FleetDeleted{})

	wait.For(t, 10*time.Second, "the deleted fleet's servers to end", func() bool {
		return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_TERMINATED) == 2
	})
	c.passes(t, 3)
	for _, e := range ofType(w.fleetEvents("arena"), "ShutdownRequested") {
		if r := e.Data.(*eventsv1.ShutdownRequested).GetReason(); r != eventsv1.Reason_REASON_FLEET_DELETED {
			t.Fatalf("%s shut down with %v", e.Aggregate, r)
		}
	}
	if n := len(a.stops()); n != 2 {
		t.Fatalf("%d stop commands", n)
	}
	if n := len(ofType(w.fleetEvents("arena"), "GameServerScheduled")); n != 2 {
		t.Fatalf("a deleted fleet got %d servers", n)
	}
	if got := w.states("other"); len(got) != 1 || slices.Collect(maps.Values(got))[0] != eventsv1.Lifecycle_LIFECYCLE_READY {
		t.Fatalf("the other fleet: %v", got)
	}
}

// passAllowance is how long before a test's action a pass that saw it may
// have begun: a pass reads the views after its start, and the tracker's
// catch-up alone may take 5 s of it.
const passAllowance = 5 * time.Second

// A start command that gets no ProcessStarted is sent again after the
// start timeout, and only then: not on every pass. The timeout runs on the
// test's clock, so the test waits for passes, not for the timeout.
func TestStartCommandResentAfterTimeout(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 4)
	w.beat("h1")
	const timeout = 10 * time.Second
	clk := clockwork.NewFakeClockAt(time.Now())
	c := w.controller("ctl-1", func(o *controller.Options) {
		o.StartTimeout, o.Clock = timeout, clk
		o.UnreachableAfter, o.LostAfter = time.Hour, 2*time.Hour // one beat, and the clock moves by hand
	})
	cons, err := w.Commands.Consumer(w.Ctx, "h1", 0) // the agent is away: commands wait
	if err != nil {
		t.Fatal(err)
	}
	w.fleet("arena", testSpec(1, eventsv1.Scheduling_SCHEDULING_PACKED))
	// pending counts the commands not yet handled: those not delivered, and
	// those delivered (the fake agent pulls them in batches) but not yet
	// acknowledged, which it does after recording them.
	pending := func() uint64 {
		info, err := cons.Info(w.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumPending + uint64(info.NumAckPending)
	}
	for sent := uint64(1); sent <= 3; sent++ {
		wait.For(t, 10*time.Second, fmt.Sprintf("start command %d sent", sent), func() bool { return pending() >= sent })
		c.passes(t, 3)
		if got := pending(); got != sent {
			t.Fatalf("%d start commands before the start timeout passed, want %d", got, sent)
		}
		clk.Advance(timeout)
		c.passes(t, 2)
		if got := pending(); got != sent {
			t.Fatalf("%d start commands with the start timeout just reached, want %d", got, sent)
		}
		clk.Advance(time.Millisecond)
	}

	// The agent comes back: the server starts (the duplicates change
	// nothing) and no more start commands are sent.
	a := w.agent("h1", 100)
	wait.For(t, 10*time.Second, "the server READY", func() bool { return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 1 })
	// The clock is past the third start's timeout: a pass that looked
	// before the server was READY may still send the fourth it decided
	// then (a make test-short with both cores busy saw it arrive after the
	// count). The pass in flight ends, and the next looked after READY.
	c.passes(t, 2)
	wait.For(t, 10*time.Second, "every command handled", func() bool { return pending() == 0 })
	n := len(a.starts())
	c.passes(t, 3)
	clk.Advance(2 * timeout)
	c.passes(t, 3)
	if len(a.starts()) != n || pending() != 0 {
		t.Fatalf("start commands after the server became READY: %d received (was %d), %d pending", len(a.starts()), n, pending())
	}
	if got := ofType(w.fleetEvents("arena"), "GameServerScheduled"); len(got) != 1 {
		t.Fatalf("%d servers scheduled", len(got))
	}
	for _, s := range a.starts() {
		if s.GetGameServer() != ofType(w.fleetEvents("arena"), "GameServerScheduled")[0].Aggregate || s.GetTemplate().GetCommand() != "/bin/game" {
			t.Fatalf("start command %v", s)
		}
	}
}
