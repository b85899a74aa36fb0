package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// beater plays the agents' heartbeats; a host's beat can be switched off,
// and carries the inventory set for it (none by default, as an older
// agent's).
type beater struct {
	on  map[string]*atomic.Bool
	inv map[string]*atomic.Pointer[hostbeat.Inventory]
}

func (w *world) beat(hosts ...string) *beater {
	w.t.Helper()
	kv, err := hostbeat.Open(w.Ctx, w.JS)
	if err != nil {
		w.t.Fatal(err)
	}
	b := &beater{on: map[string]*atomic.Bool{}, inv: map[string]*atomic.Pointer[hostbeat.Inventory]{}}
	for _, h := range hosts {
		b.on[h] = &atomic.Bool{}
		b.on[h].Store(true)
		b.inv[h] = &atomic.Pointer[hostbeat.Inventory]{}
	}
	ctx, cancel := context.WithCancel(w.Ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			for h, on := range b.on {
				if on.Load() {
					if err := hostbeat.Put(ctx, kv, h, hostbeat.Beat{Time: time.Now(), Inventory: b.inv[h].Load()}); err != nil && ctx.Err() == nil {
						w.t.Errorf("beat %s: %v", h, err)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	w.t.Cleanup(func() { cancel(); <-done })
	return b
}

// hostEvents lists a host's event types.
func (w *world) hostEvents(host string) []string {
	w.t.Helper()
	hist, err := w.Store.History(w.Ctx, events.MustSubject(host), 0)
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, e := range hist {
		out = append(out, e.Type)
	}
	return out
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// serversOn returns the fleet's scheduled servers per host, and how many of
// them were terminated with HOST_LOST.
func (w *world) serversOn(fleet string) (map[string]int, int) {
	w.t.Helper()
	hist, err := w.Store.History(w.Ctx, events.FleetGameServersSubject(fleet), 0)
	if err != nil {
		w.t.Fatal(err)
	}
	on, lost := map[string]int{}, 0
	for _, e := range hist {
		switch d := e.Data.(type) {
		case *eventsv1.GameServerScheduled:
			on[d.GetHost()]++
		case *eventsv1.GameServerTerminated:
			if d.GetReason() == eventsv1.Reason_REASON_HOST_LOST {
				lost++
			}
		}
	}
	return on, lost
}

func TestHostLivenessUnreachableIsNotLost(t *testing.T) {
	w := newWorld(t)
	w.append("hosts/h1", events.AnySequence, &eventsv1.HostRegistered{Capacity: 4, Address: "127.0.0.1"})
	w.append("hosts/h2", events.AnySequence, &eventsv1.HostRegistered{Capacity: 4, Address: "127.0.0.1"})
	beats := w.beat("h1", "h2")

	fresh := postgres.NewFreshness(w.Pool, nil)
	ctx, cancel := context.WithCancel(w.Ctx)
	c, err := controller.New(controller.Options{
		JetStream: w.JS, Store: w.Store, Views: postgres.NewViews(w.Pool), Freshness: fresh, Commands: w.Commands,
		Interval: 50 * time.Millisecond, UnreachableAfter: 400 * time.Millisecond, LostAfter: 1500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- fresh.Run(ctx) }()
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		}
	})

	spec := &eventsv1.FleetSpec{Replicas: 2, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(spec)
	w.append("fleets/arena", 0, &eventsv1.FleetCreated{Spec: spec})
	wait.For(t, 10*time.Second, "2 servers on h1 (packed)", func() bool { on, _ := w.serversOn("arena"); return on["hosts/h1"] == 2 })

	// h1 goes silent briefly: unreachable, then online again; nothing replaced.
	beats.on["h1"].Store(false)
	wait.For(t, 10*time.Second, "h1 unreachable", func() bool { return count(w.hostEvents("hosts/h1"), "HostUnreachable") == 1 })
	views := postgres.NewViews(w.Pool)
	wait.For(t, 10*time.Second, "h1's servers shown with connection UNKNOWN", func() bool {
		rows, err := views.ListGameServers(w.Ctx, projections.GameServerQuery{Host: "hosts/h1", Limit: 10})
		return err == nil && len(rows) == 2 && rows[0].State.GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_UNKNOWN
	})
	beats.on["h1"].Store(true)
	wait.For(t, 10*time.Second, "h1 online again", func() bool { return count(w.hostEvents("hosts/h1"), "HostOnline") == 1 })
	if on, lost := w.serversOn("arena"); on["hosts/h2"] != 0 || lost != 0 {
		t.Fatalf("an unreachable host's servers were replaced: %v, %d lost", on, lost)
	}

	// Silent for good: lost, its servers terminated with HOST_LOST and replaced on h2.
	beats.on["h1"].Store(false)
	wait.For(t, 10*time.Second, "h1 lost and its servers replaced", func() bool {
		on, lost := w.serversOn("arena")
		return lost == 2 && on["hosts/h2"] == 2
	})
	if got := w.hostEvents("hosts/h1"); count(got, "HostLost") != 1 || count(got, "HostUnreachable") != 2 {
		t.Fatalf("h1 events: %v", got)
	}
}

// inventoryOf lists servers as an agent reports them.
func inventoryOf(queued int, names ...string) *hostbeat.Inventory {
	inv := &hostbeat.Inventory{Servers: []hostbeat.Server{}, Queued: queued}
	for _, n := range names {
		inv.Servers = append(inv.Servers, hostbeat.Server{Name: n, Pid: 1000})
	}
	return inv
}

// A host that comes back reports its inventory: a live server the views
// place on it that is missing from it is terminated (PROCESS_EXITED, with
// the evidence) and replaced; the servers in it carry on with no new event.
// While its agent still has events queued for the stream, the host beats
// but is not back yet (and not lost either).
func TestHostBackWithInventoryMissingAServer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a host's liveness timeouts")
	}
	w := newWorld(t)
	w.host("h1", 4)
	w.host("h2", 4)
	w.agent("h1", 10)
	w.agent("h2", 10)
	beats := w.beat("h1", "h2")
	// LostAfter leaves room for a loaded machine between the heartbeats
	// stopping and the test seeing HostUnreachable; the hold below outlasts it.
	w.controller("c1", func(o *controller.Options) {
		o.UnreachableAfter, o.LostAfter = 400*time.Millisecond, 4*time.Second
	})
	w.fleet("arena", testSpec(3, eventsv1.Scheduling_SCHEDULING_PACKED))
	var names []string
	wait.For(t, 10*time.Second, "3 READY servers on h1", func() bool {
		rows, err := w.Views.ListGameServers(w.Ctx, projections.GameServerQuery{Host: "hosts/h1", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, r := range rows {
			if r.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_READY {
				names = append(names, r.State.GetName())
			}
		}
		return len(names) == 3
	})
	beats.inv["h1"].Store(inventoryOf(0, names...))
	kept, missing := names[:2], names[2]
	before := map[string]int{}
	for _, n := range kept {
		before[n] = len(w.history(n))
	}

	beats.on["h1"].Store(false)
	wait.For(t, 10*time.Second, "h1 unreachable", func() bool { return count(w.hostEvents("hosts/h1"), "HostUnreachable") == 1 })

	// Back, but its agent still publishes queued events: not online yet,
	// and not lost although longer than LostAfter passes.
	beats.inv["h1"].Store(inventoryOf(2, kept...))
	beats.on["h1"].Store(true)
	wait.Holds(t, 5*time.Second, "h1 unreachable while its agent's events are queued", func() bool {
		got := w.hostEvents("hosts/h1")
		return count(got, "HostOnline") == 0 && count(got, "HostLost") == 0
	})
	if w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_TERMINATED) != 0 {
		t.Fatal("a server was terminated while its host's agent still had events queued")
	}

	// Queue drained: online, and the server it no longer has is replaced.
	beats.inv["h1"].Store(inventoryOf(0, kept...))
	wait.For(t, 10*time.Second, "h1 online", func() bool { return count(w.hostEvents("hosts/h1"), "HostOnline") == 1 })
	wait.For(t, 10*time.Second, "the missing server terminated and replaced", func() bool {
		st := w.states("arena")
		return st[missing] == eventsv1.Lifecycle_LIFECYCLE_TERMINATED && w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 3
	})
	h := w.history(missing)
	term, ok := h[len(h)-1].Data.(*eventsv1.GameServerTerminated)
	if !ok || term.GetReason() != eventsv1.Reason_REASON_PROCESS_EXITED ||
		!strings.HasPrefix(term.GetEvidence().GetDetail(), "not in the host's inventory when it came back") ||
		term.GetEvidence().GetRequestedBy() != "controllers/c1" {
		t.Fatalf("the missing server ended with %s %v", h[len(h)-1].Type, h[len(h)-1].Data)
	}
	for _, n := range kept {
		if got := w.history(n); len(got) != before[n] {
			t.Fatalf("%s is in the inventory but got new events: %v", n, got[before[n]:])
		}
	}
	if got := w.hostEvents("hosts/h1"); count(got, "HostLost") != 0 {
		t.Fatalf("h1 events: %v", got)
	}
}

// history returns a game server's events.
func (w *world) history(name string) []events.Envelope {
	w.t.Helper()
	h, err := w.Store.History(w.Ctx, events.MustSubject(name), 0)
	if err != nil {
		w.t.Fatal(err)
	}
	return h
}

// A new leader's passes see every beat in the bucket, never a tracker still
// filling: a host UNREACHABLE whose last beat (the last of thousands in the
// bucket) is older than UnreachableAfter stays so, where a host not in the
// beats would get a first sight's grace and be brought back ONLINE. The
// tracker ends with the leadership.
func TestNewLeaderSeesEveryBeat(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 4) // unreachable, silent
	w.append("hosts/h1", events.AnySequence, &eventsv1.HostUnreachable{})
	w.host("h2", 4) // online, never beats: unreachable after its grace
	kv, err := hostbeat.Open(w.Ctx, w.JS)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(hostbeat.Beat{Time: time.Now(), Inventory: inventoryOf(0)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		if _, err := w.JS.PublishAsync(fmt.Sprintf("$KV.%s.other-%d", hostbeat.Bucket, i), data); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-w.JS.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishing the beats timed out")
	}
	if err := hostbeat.Put(w.Ctx, kv, "h1", hostbeat.Beat{Time: time.Now(), Inventory: inventoryOf(0)}); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(w.Ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	const unreachable = 500 * time.Millisecond
	wait.For(t, 10*time.Second, "h1's beat older than UnreachableAfter", func() bool { return time.Since(e.Created()) > unreachable })

	c := w.controller("c1", func(o *controller.Options) { o.UnreachableAfter, o.LostAfter = unreachable, time.Minute })
	wait.For(t, 10*time.Second, "h2 unreachable", func() bool { return count(w.hostEvents("hosts/h2"), "HostUnreachable") == 1 })
	if got := w.hostEvents("hosts/h1"); count(got, "HostOnline") != 0 {
		t.Fatalf("h1, silent, was brought back: %v", got)
	}
	c.stop()
	wait.For(t, 10*time.Second, "no heartbeat tracker left running", func() bool { return trackers() == 0 })
}

// A tracker ends with the context of the pass that started it (under Run,
// the leadership's); the next pass starts another.
func TestHostBeatsTrackerRestarts(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 4)
	w.beat("h1")
	fresh := postgres.NewFreshness(w.Pool, nil)
	fctx, stopFresh := context.WithCancel(w.Ctx)
	freshDone := make(chan error, 1)
	go func() { freshDone <- fresh.Run(fctx) }()
	t.Cleanup(func() {
		stopFresh()
		if err := <-freshDone; err != nil {
			t.Errorf("freshness: %v", err)
		}
	})
	c, err := controller.New(controller.Options{JetStream: w.JS, Store: w.Store, Views: w.Views, Freshness: fresh, Commands: w.Commands})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ctx, cancel := context.WithCancel(w.Ctx)
		err := c.Reconcile(ctx)
		cancel()
		if err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
	}
	wait.For(t, 10*time.Second, "no heartbeat tracker left running", func() bool { return trackers() == 0 })
	if got := w.hostEvents("hosts/h1"); len(got) != 1 {
		t.Fatalf("h1 events: %v", got)
	}
}

// trackers counts the running heartbeat trackers.
func trackers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "hostbeat.(*Tracker).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestControllerStoppedBeforeItStartsStopsCleanly: a controller whose
// context ends before it could open its lease returns no error: a shutdown
// is not a failure.
func TestControllerStoppedBeforeItStartsStopsCleanly(t *testing.T) {
	w := newWorld(t)
	c, err := controller.New(controller.Options{JetStream: w.JS, Store: w.Store, Views: w.Views,
		Freshness: postgres.NewFreshness(w.Pool, nil), Commands: w.Commands})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(w.Ctx)
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("a controller stopped before it started returned %v", err)
	}
}

// A host's silence counts from no earlier than the heartbeat bucket's
// last election: while the bucket has no leader no host can beat (4-9 s
// after its node dies), and a new controller pass would otherwise take
// every host for unreachable at once. Here a host goes silent, the
// bucket's leader steps down (an election, without the wait of a dead
// node's) a third of UnreachableAfter into the silence, and the host must
// not be marked UNREACHABLE by the passes after its silence has passed
// UnreachableAfter, only once UnreachableAfter has passed since the
// election.
func TestHostSilenceCountsFromTheBeatsBucketElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node NATS cluster")
	}
	w := newWorld(t, kit.WithNATSCluster(3))
	w.host("h1", 4)
	beats := w.beat("h1")
	const unreachable = 6 * time.Second
	c := w.controller("c1", func(o *controller.Options) { o.UnreachableAfter, o.LostAfter = unreachable, time.Minute })
	c.passes(t, 2) // h1's beats seen

	beats.on["h1"].Store(false)
	silent := time.Now()            // at most a beat interval (50 ms) after h1's last beat
	hold := func(until time.Time) { // a point in time, not a wait for an outcome
		select {
		case <-time.After(time.Until(until)):
		case <-t.Context().Done():
		}
	}
	hold(silent.Add(unreachable / 3))
	stream, err := w.JS.Stream(w.Ctx, "KV_"+hostbeat.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	before := stream.CachedInfo().Cluster.Leader
	stepped := time.Now()
	if _, err := w.Conn.RequestWithContext(w.Ctx, "$JS.API.STREAM.LEADER.STEPDOWN.KV_"+hostbeat.Bucket, nil); err != nil {
		t.Fatal(err)
	}
	var elected time.Time
	wait.Until(t, 20*time.Second, "the bucket's new leader", func() error {
		ctx, cancel := context.WithTimeout(w.Ctx, time.Second)
		defer cancel()
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster.LeaderSince == nil || info.Cluster.LeaderSince.Before(stepped) {
			return fmt.Errorf("leader %s since %v", info.Cluster.Leader, info.Cluster.LeaderSince)
		}
		elected = *info.Cluster.LeaderSince
		return nil
	})

	// Past UnreachableAfter of silence, but not since the election: the
	// passes from then on must leave h1 as it is.
	hold(silent.Add(unreachable + 200*time.Millisecond))
	c.passes(t, 2)
	if checked := time.Now(); checked.Before(elected.Add(unreachable)) {
		if got := w.hostEvents("hosts/h1"); count(got, "HostUnreachable") != 0 {
			t.Fatalf("h1 marked unreachable %s into its silence, %s after the bucket's election: its silence counted from before the election (%v)",
				checked.Sub(silent).Round(time.Millisecond), checked.Sub(elected).Round(time.Millisecond), got)
		}
	} else {
		t.Logf("the passes after UnreachableAfter of silence ended %s after the election, past UnreachableAfter: not checked there", checked.Sub(elected).Round(time.Millisecond))
	}

	wait.Until(t, 20*time.Second, "h1 unreachable", func() error {
		if got := w.hostEvents("hosts/h1"); count(got, "HostUnreachable") == 0 {
			return fmt.Errorf("h1's events: %v", got)
		}
		return nil
	})
	hist, err := w.Store.History(w.Ctx, events.MustSubject("hosts/h1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	marked := hist[len(hist)-1]
	if marked.Type != "HostUnreachable" {
		t.Fatalf("h1's last event %s, want HostUnreachable", marked.Type)
	}
	t.Logf("bucket leader %s stepped down %s into h1's silence, elected again after %s; h1 marked unreachable %s after the election",
		before, stepped.Sub(silent).Round(time.Millisecond), elected.Sub(stepped).Round(time.Millisecond), marked.Time.Sub(elected).Round(time.Millisecond))
	if marked.Time.Before(elected.Add(unreachable)) {
		t.Fatalf("h1 marked unreachable %s after the bucket's election, %s after its last beat: its silence counted from before the election",
			marked.Time.Sub(elected).Round(time.Millisecond), marked.Time.Sub(silent).Round(time.Millisecond))
	}
}

// A server its agent let go without recording its end (seen once in a
// 100,000-server scale run: SHUTTING_DOWN for good, its slot on a full host
// taken, its replacement never placed) is terminated by the controller
// once its shutdown's deadline is ShutdownSettle past and its host's
// inventory no longer lists it, with its shutdown's reason and the
// evidence; the fleet then replaces it. While the inventory still lists
// it, well past the deadline, it is left to its agent.
func TestUnfinishedShutdownIsTerminated(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 2)
	a := w.agent("h1", 10)
	beats := w.beat("h1")
	w.controller("c1", func(o *controller.Options) {
		o.ShutdownGrace, o.ShutdownSettle = 200*time.Millisecond, 300*time.Millisecond
	})
	w.fleet("arena", testSpec(2, eventsv1.Scheduling_SCHEDULING_PACKED))
	var names []string
	wait.For(t, 10*time.Second, "2 READY servers", func() bool {
		names = names[:0]
		for n, l := range w.states("arena") {
			if l == eventsv1.Lifecycle_LIFECYCLE_READY {
				names = append(names, n)
			}
		}
		return len(names) == 2
	})
	beats.inv["h1"].Store(inventoryOf(0, names...))
	sick, well := names[0], names[1]
	a.dropStops.Store(true)
	if err := w.gameServerEvent(sick, "hosts/h1", events.MarkUnhealthy{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the stop sent and the server SHUTTING_DOWN", func() bool {
		return len(a.stops()) == 1 && w.states("arena")[sick] == eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN
	})
	wait.Holds(t, 2*time.Second, "the server left SHUTTING_DOWN while its host lists it", func() bool {
		return w.states("arena")[sick] == eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN
	})

	beats.inv["h1"].Store(inventoryOf(0, well))
	wait.For(t, 10*time.Second, "the server terminated and replaced", func() bool {
		return w.states("arena")[sick] == eventsv1.Lifecycle_LIFECYCLE_TERMINATED && w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 2
	})
	h := w.history(sick)
	term, ok := h[len(h)-1].Data.(*eventsv1.GameServerTerminated)
	if !ok || term.GetReason() != eventsv1.Reason_REASON_HEALTH_CHECK_FAILED ||
		!strings.HasPrefix(term.GetEvidence().GetDetail(), "shutdown past its deadline and no longer in its host's inventory") ||
		term.GetEvidence().GetRequestedBy() != "controllers/c1" {
		t.Fatalf("the server ended with %s %v", h[len(h)-1].Type, h[len(h)-1].Data)
	}
}
