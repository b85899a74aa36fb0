package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/nats/lease"
	"github.com/tetherhq/tether/services/testkit/natstest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// leaderOf waits for one of the controllers to lead and checks that only
// one does; it returns the leader and the others.
func leaderOf(t *testing.T, cs ...*ctl) (*ctl, []*ctl) {
	t.Helper()
	wait.For(t, 5*time.Second, "a leader", func() bool {
		for _, c := range cs {
			if c.IsLeader() {
				return true
			}
		}
		return false
	})
	var leader *ctl
	var others []*ctl
	for _, c := range cs {
		switch {
		case !c.IsLeader():
			others = append(others, c)
		case leader != nil:
			t.Fatalf("both %s and %s lead", leader.ID(), c.ID())
		default:
			leader = c
		}
	}
	return leader, others
}

// terminateOne ends one READY server of a fleet as its agent would report a
// crash, and returns its name.
func (w *world) terminateOne(fleet, host string) string {
	w.t.Helper()
	for name, l := range w.states(fleet) {
		if l == eventsv1.Lifecycle_LIFECYCLE_READY {
			code := int32(3)
			if err := w.gameServerEvent(name, events.HostName(host), events.RecordExit{Exited: &eventsv1.ProcessExited{ExitCode: &code, Attempt: 1}}); err != nil {
				w.t.Fatal(err)
			}
			return name
		}
	}
	w.t.Fatal("no READY server to terminate")
	return ""
}

func TestOnlyTheLeaderActsAndTheStandbyTakesOver(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 10)
	w.beat("h1")
	w.agent("h1", 100)
	a, b := w.controller("ctl-a"), w.controller("ctl-b")
	leader, others := leaderOf(t, a, b)
	standby := others[0]

	w.fleet("arena", testSpec(2, eventsv1.Scheduling_SCHEDULING_PACKED))
	wait.For(t, 10*time.Second, "2 READY servers", func() bool { return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2 })
	if got := w.scheduledBy("arena"); got["controllers/"+leader.ID()] != 2 || len(got) != 1 {
		t.Fatalf("scheduling events by producer: %v", got)
	}
	if leader.metric(t, "tether_controller_leader") != 1 || standby.metric(t, "tether_controller_leader") != 0 {
		t.Fatal("tether_controller_leader gauge is not 1 on the leader and 0 on the standby")
	}
	if n := standby.metric(t, "tether_controller_pass_duration_seconds"); n != 0 {
		t.Fatalf("the standby ran %v passes", n)
	}

	// The leader stops: it releases the lease, the standby takes over at
	// once (well within the TTL) and replaces a crashed server.
	stopped := time.Now()
	leader.stop()
	wait.For(t, 5*time.Second, "the standby to take over", standby.IsLeader)
	if d := time.Since(stopped); d > 3*time.Second {
		t.Fatalf("took over after %s", d)
	}
	crashed := w.terminateOne("arena", "h1")
	wait.For(t, 10*time.Second, "the new leader to schedule a replacement", func() bool {
		return w.scheduledBy("arena")["controllers/"+standby.ID()] == 1
	})
	wait.For(t, 10*time.Second, "2 READY servers again", func() bool { return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2 })
	if w.states("arena")[crashed] != eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
		t.Fatalf("crashed server %s is %v", crashed, w.states("arena")[crashed])
	}
	standby.passes(t, 3)
	if got := w.scheduledBy("arena"); got["controllers/"+leader.ID()] != 2 || got["controllers/"+standby.ID()] != 1 || len(got) != 2 {
		t.Fatalf("scheduling events by producer: %v", got)
	}
}

// A leader cut off from NATS cannot renew: it stops acting, and the standby
// takes over once the lease expires (nothing released it).
func TestLeaderCutOffLosesTheLease(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 10)
	w.beat("h1")
	w.agent("h1", 100)
	nc, js := natstest.Connect(t, w.NATS)
	a := w.controller("ctl-a", func(o *controller.Options) { o.JetStream = js })
	leaderOf(t, a)
	b := w.controller("ctl-b")
	w.fleet("arena", testSpec(1, eventsv1.Scheduling_SCHEDULING_PACKED))
	wait.For(t, 10*time.Second, "1 READY server", func() bool { return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 1 })
	if b.IsLeader() {
		t.Fatal("both controllers lead")
	}

	nc.Close()
	wait.For(t, 5*time.Second, "ctl-a to lose leadership", func() bool { return !a.IsLeader() })
	wait.For(t, 5*time.Second, "ctl-b to take over", b.IsLeader)
	if a.IsLeader() {
		t.Fatal("both controllers lead")
	}
	w.terminateOne("arena", "h1")
	wait.For(t, 10*time.Second, "ctl-b to schedule a replacement", func() bool { return w.scheduledBy("arena")["controllers/ctl-b"] == 1 })
}

// The lease is lost at once when its key is not ours any more, and a
// leader that stops releases it so a standby need not wait for the TTL.
func TestLeaseOverwrittenIsLost(t *testing.T) {
	w := newWorld(t, kit.WithLeaseTTL(3*time.Second))
	a := w.controller("ctl-a")
	leaderOf(t, a)
	kv, err := w.JS.KeyValue(w.Ctx, lease.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(w.Ctx, "controller")
	if err != nil || string(e.Value()) != "ctl-a" {
		t.Fatalf("lease key: %v %v", e, err)
	}
	if _, err := kv.Put(w.Ctx, "controller", []byte("intruder")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "ctl-a to lose leadership", func() bool { return !a.IsLeader() })
	if err := kv.Delete(w.Ctx, "controller"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "ctl-a to lead again", a.IsLeader)
	a.stop()
	if _, err := kv.Get(w.Ctx, "controller"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("lease not released: %v", err)
	}
}

// WhileLeading runs on the leader only, for as long as it leads: the
// standby starts it when it takes over.
func TestWhileLeadingRunsOnTheLeader(t *testing.T) {
	w := newWorld(t)
	running := map[string]chan bool{"ctl-a": make(chan bool, 2), "ctl-b": make(chan bool, 2)}
	whileLeading := func(id string) func(*controller.Options) {
		return func(o *controller.Options) {
			o.WhileLeading = func(ctx context.Context) error {
				running[id] <- true
				<-ctx.Done()
				running[id] <- false
				return nil
			}
		}
	}
	a, b := w.controller("ctl-a", whileLeading("ctl-a")), w.controller("ctl-b", whileLeading("ctl-b"))
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	recv := func(id string) bool {
		t.Helper()
		select {
		case r := <-running[id]:
			return r
		case <-time.After(5 * time.Second):
			t.Fatalf("%s's work did not start or stop", id)
			return false
		}
	}
	if !recv(leader.ID()) {
		t.Fatal("the leader's work did not start")
	}
	if len(running[standby.ID()]) != 0 {
		t.Fatal("the standby's work started")
	}
	leader.stop()
	if recv(leader.ID()) {
		t.Fatal("the old leader's work did not stop with its leadership")
	}
	wait.For(t, 5*time.Second, "the standby to take over", standby.IsLeader)
	if !recv(standby.ID()) {
		t.Fatal("the new leader's work did not start")
	}
}
