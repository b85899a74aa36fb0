package controller_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// lockedBuffer is a log sink safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// loggedController starts a world with one beating host of 10 slots and
// a controller c1 with opts, whose log it returns.
func loggedController(t *testing.T, opts func(*controller.Options)) (*world, *ctl, *lockedBuffer) {
	t.Helper()
	w := newWorld(t)
	w.host("h1", 10)
	w.agent("h1", 10)
	w.beat("h1")
	logs := &lockedBuffer{}
	c := w.controller("c1", func(o *controller.Options) {
		opts(o)
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	return w, c, logs
}

// TestControllerNoticesStaleViews: the projector stops while a server
// crashes. Once the views' checkpoint has stood still behind the stream for
// StaleViewsAfter, the leader says so (log, gauges, Ready) and decides
// nothing from the views; when the projector is back it says so again, is
// ready, and replaces the crashed server.
func TestControllerNoticesStaleViews(t *testing.T) {
	w, c, logs := loggedController(t, func(o *controller.Options) { o.StaleViewsAfter = 300 * time.Millisecond })
	w.fleet("arena", testSpec(2, eventsv1.Scheduling_SCHEDULING_PACKED))
	wait.For(t, 10*time.Second, "2 READY servers", func() bool {
		return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2
	})
	c.passes(t, 2)
	if err := c.Ready(); err != nil || c.metric(t, "tether_controller_views_stale") != 0 {
		t.Fatalf("with moving views: Ready %v, stale gauge %v", err, c.metric(t, "tether_controller_views_stale"))
	}

	w.StopProjector()
	crashed := w.rows("arena")[0].State.GetName()
	var code int32 = 139
	if err := w.gameServerEvent(crashed, "hosts/h1", events.RecordExit{Exited: &eventsv1.ProcessExited{ExitCode: &code, Attempt: 1}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the stale gauge", func() bool { return c.metric(t, "tether_controller_views_stale") == 1 })
	if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "views stale") {
		t.Fatalf("Ready with stale views: %v", err)
	}
	if lag := c.metric(t, "tether_controller_views_lag"); lag < 2 {
		t.Errorf("lag gauge %v, want the crash's events (2)", lag)
	}
	if !strings.Contains(logs.String(), "views are not moving") {
		t.Fatalf("no log line about stale views:\n%s", logs.String())
	}
	c.passes(t, 3)
	if n := w.scheduledBy("arena")["controllers/c1"]; n != 2 {
		t.Fatalf("%d servers scheduled, want the first 2 only while the views are stale", n)
	}

	w.StartProjector()
	wait.For(t, 10*time.Second, "the crashed server replaced", func() bool {
		return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2 &&
			w.states("arena")[crashed] == eventsv1.Lifecycle_LIFECYCLE_TERMINATED
	})
	wait.For(t, 10*time.Second, "the stale gauge cleared", func() bool { return c.metric(t, "tether_controller_views_stale") == 0 })
	if err := c.Ready(); err != nil {
		t.Fatalf("Ready after the views moved again: %v", err)
	}
	if !strings.Contains(logs.String(), "views are moving again") {
		t.Fatalf("no log line about the views moving again:\n%s", logs.String())
	}
}

// A pass slower than SlowPassAfter is logged as a warning that says where
// its time went, step by step: a controller whose passes stalled during a
// NATS partition made no decision for 20 s and logged nothing (cluster
// test, scenario g). Here every pass counts as slow.
func TestASlowPassSaysWhereItsTimeWent(t *testing.T) {
	w, c, logs := loggedController(t, func(o *controller.Options) { o.SlowPassAfter = time.Nanosecond })
	w.fleet("arena", testSpec(1, eventsv1.Scheduling_SCHEDULING_PACKED))
	c.passes(t, 2)
	wait.For(t, 10*time.Second, "a slow pass's warning with its steps", func() bool {
		out := logs.String()
		return strings.Contains(out, `msg="slow pass"`) && strings.Contains(out, "heartbeats read") &&
			strings.Contains(out, "start failures read") && strings.Contains(out, "executed")
	})
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, `msg="slow pass"`) {
			t.Log(line)
			break
		}
	}
}
