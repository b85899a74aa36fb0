package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// world is NATS, the views kept by a running projector, and the commands
// bus (the shared testkit stack), with the helpers of the controller's
// tests.
type world struct {
	*kit.Stack
	t *testing.T
}

func newWorld(t *testing.T, opts ...kit.Option) *world {
	t.Helper()
	k := kit.New(t, append([]kit.Option{kit.WithProjector(), kit.WithCommands()}, opts...)...)
	return &world{Stack: k, t: t}
}

func (w *world) append(name string, expected uint64, payload proto.Message) uint64 {
	w.t.Helper()
	seq, err := w.Store.Append(w.Ctx, events.MustSubject(name), expected, events.New(name, time.Now(), payload))
	if err != nil {
		w.t.Fatal(err)
	}
	return seq
}

// host registers a host with a capacity.
func (w *world) host(id string, capacity int32) {
	w.t.Helper()
	w.append(events.HostName(id), events.AnySequence, &eventsv1.HostRegistered{Capacity: capacity, Address: "127.0.0.1"})
}

// fleet creates a fleet.
func (w *world) fleet(id string, spec *eventsv1.FleetSpec) {
	w.t.Helper()
	msgs, err := events.DecideFleet(events.FleetName(id), nil, events.CreateFleet{Spec: spec})
	if err != nil {
		w.t.Fatal(err)
	}
	w.append(events.FleetName(id), 0, msgs[0])
}

// scale changes a fleet's replica count as the API would: decided on the
// fleet's history, appended with its sequence as guard.
func (w *world) scale(id string, replicas int32) {
	w.t.Helper()
	name := events.FleetName(id)
	hist, err := w.Store.History(w.Ctx, events.MustSubject(name), 0)
	if err != nil {
		w.t.Fatal(err)
	}
	var state *eventsv1.FleetState
	for _, e := range hist {
		if state, err = events.ApplyFleet(state, e); err != nil {
			w.t.Fatal(err)
		}
	}
	msgs, err := events.DecideFleet(name, state, events.UpdateFleet{Spec: &eventsv1.FleetSpec{Replicas: replicas}, Paths: []string{"replicas"}})
	if err != nil || len(msgs) != 1 {
		w.t.Fatalf("scale %s to %d: %v %v", id, replicas, msgs, err)
	}
	w.append(name, hist[len(hist)-1].Sequence, msgs[0])
}

// gameServerEvent appends facts to a game server as its agent would:
// checked against the server's folded history and guarded by its last
// sequence, retried on a conflict. cmd is an events.GameServerCommand or
// a single event.
func (w *world) gameServerEvent(name, producer string, cmd any) error {
	for range 10 {
		hist, err := w.Store.History(w.Ctx, events.MustSubject(name), 0)
		if err != nil {
			return err
		}
		var state *eventsv1.GameServerState
		for _, e := range hist {
			if state, err = events.ApplyGameServer(state, e); err != nil {
				return err
			}
		}
		var msgs []proto.Message
		switch c := cmd.(type) {
		case events.GameServerCommand:
			if msgs, err = events.DecideGameServer(name, state, c); err != nil {
				return err
			}
		case proto.Message:
			if _, err := events.ApplyGameServer(state, events.Envelope{Aggregate: name, Type: events.TypeOf(c), Data: c}); err != nil {
				return err
			}
			msgs = []proto.Message{c}
		}
		var guard uint64
		if len(hist) > 0 {
			guard = hist[len(hist)-1].Sequence
		}
		evs := make([]events.Envelope, len(msgs))
		for i, m := range msgs {
			evs[i] = events.New(name, time.Now(), m)
			evs[i].Producer = producer
		}
		_, err = w.Store.Append(w.Ctx, events.MustSubject(name), guard, evs...)
		if !errors.Is(err, events.ErrConflict) {
			return err
		}
	}
	return errors.New("too many conflicts")
}

// fleetEvents lists the events of a fleet's game servers, in stream order.
func (w *world) fleetEvents(fleet string) []events.Envelope {
	w.t.Helper()
	hist, err := w.Store.History(w.Ctx, events.FleetGameServersSubject(fleet), 0)
	if err != nil {
		w.t.Fatal(err)
	}
	return hist
}

// ofType keeps the events of one type.
func ofType(evs []events.Envelope, typ string) []events.Envelope {
	return slices.DeleteFunc(slices.Clone(evs), func(e events.Envelope) bool { return e.Type != typ })
}

// scheduledBy counts GameServerScheduled events of a fleet by producer.
func (w *world) scheduledBy(fleet string) map[string]int {
	w.t.Helper()
	out := map[string]int{}
	for _, e := range ofType(w.fleetEvents(fleet), "GameServerScheduled") {
		out[e.Producer]++
	}
	return out
}

// states returns a fleet's game servers by name, from the views.
func (w *world) states(fleet string) map[string]eventsv1.Lifecycle {
	w.t.Helper()
	rows, err := w.Views.ListGameServers(w.Ctx, projections.GameServerQuery{Fleet: events.FleetName(fleet), Limit: 1000})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]eventsv1.Lifecycle{}
	for _, r := range rows {
		out[r.State.GetName()] = r.State.GetLifecycle()
	}
	return out
}

// countStates counts a fleet's game servers in a lifecycle state.
func (w *world) countStates(fleet string, l eventsv1.Lifecycle) int {
	n := 0
	for _, s := range w.states(fleet) {
		if s == l {
			n++
		}
	}
	return n
}

// ctl is a running controller with its metrics.
type ctl struct {
	*controller.Controller
	metrics *sdkmetric.ManualReader
	stop    func() // cancels its Run and waits for it
}

// controller starts a controller with test timings; opts may change its
// options.
func (w *world) controller(id string, opts ...func(*controller.Options)) *ctl {
	w.t.Helper()
	fresh := postgres.NewFreshness(w.Pool, nil)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o := controller.Options{
		JetStream: w.JS, Store: w.Store, Views: w.Views, Freshness: fresh, Commands: w.Commands,
		ID: id, Interval: 50 * time.Millisecond, MeterProvider: mp,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("test", w.t.Name()),
	}
	for _, f := range opts {
		f(&o)
	}
	c, err := controller.New(o)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(w.Ctx)
	done := make(chan error, 2)
	go func() { done <- fresh.Run(ctx) }()
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			for range 2 {
				if err := <-done; err != nil {
					w.t.Errorf("controller %s: %v", id, err)
				}
			}
		})
	}
	w.t.Cleanup(stop)
	return &ctl{Controller: c, metrics: reader, stop: stop}
}

// metric returns the sum of a counter or gauge, or the count of a
// histogram, 0 if it has not been recorded.
func (c *ctl) metric(t *testing.T, name string) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := c.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					v += float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					v += float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					v += float64(p.Count)
				}
			}
		}
	}
	return v
}

// passes waits until the controller has completed n more reconcile passes:
// it has then seen the state that held when passes was called.
func (c *ctl) passes(t *testing.T, n int) {
	t.Helper()
	from := c.metric(t, "tether_controller_pass_duration_seconds")
	wait.For(t, 10*time.Second, "reconcile passes", func() bool {
		return c.metric(t, "tether_controller_pass_duration_seconds") >= from+float64(n)
	})
}

// agent plays a host's agent: it consumes the host's commands, records
// them, and reports what a real agent would: a start command makes the
// server STARTING (ProcessStarted), then READY if it is among the first
// ready servers of this agent; a stop command ends it (ProcessExited,
// GameServerTerminated). Duplicate commands change nothing.
type agent struct {
	w        *world
	host     string
	producer string

	mu    sync.Mutex
	cmds  []*agentv1.Command
	ready int // servers it may still make READY
	// dropStops makes it record nothing for a stop: an agent that let the
	// server go without recording its end.
	dropStops atomic.Bool
}

// agent starts a fake agent for host that makes at most ready servers READY.
func (w *world) agent(host string, ready int) *agent {
	w.t.Helper()
	a := &agent{w: w, host: host, producer: events.HostName(host), ready: ready}
	w.consumeCommands(host, func(cmd *agentv1.Command) error {
		a.mu.Lock()
		a.cmds = append(a.cmds, cmd)
		a.mu.Unlock()
		return a.handle(cmd)
	})
	return a
}

// consumeCommands plays the command loop of host's agent until the test
// ends: each command goes to handle, whose error fails the test (unless the
// world is stopping), and is acknowledged.
func (w *world) consumeCommands(host string, handle func(*agentv1.Command) error) {
	w.t.Helper()
	cons, err := w.Commands.Consumer(w.Ctx, host, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		w.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := it.Next()
			if err != nil {
				return // stopped
			}
			cmd, err := commands.Decode(m.Data())
			if err != nil {
				w.t.Errorf("agent %s: %v", host, err)
				continue
			}
			if err := handle(cmd); err != nil && w.Ctx.Err() == nil {
				w.t.Errorf("agent %s: %v", host, err)
			}
			if err := m.Ack(); err != nil && w.Ctx.Err() == nil {
				w.t.Errorf("agent %s: ack: %v", host, err)
			}
		}
	}()
	w.t.Cleanup(func() { it.Stop(); <-done })
}

func (a *agent) handle(cmd *agentv1.Command) error {
	switch c := cmd.GetAction().(type) {
	case *agentv1.Command_Start:
		name := c.Start.GetGameServer()
		err := a.w.gameServerEvent(name, a.producer, events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: 1000, Address: "127.0.0.1", Attempt: 1}})
		var terr *events.TransitionError
		if errors.As(err, &terr) {
			return nil // a duplicate: already started (or ended)
		}
		if err != nil {
			return err
		}
		a.mu.Lock()
		ready := a.ready > 0
		a.ready--
		a.mu.Unlock()
		if ready {
			return a.w.gameServerEvent(name, a.producer, events.MarkReady{})
		}
	case *agentv1.Command_Stop:
		if a.dropStops.Load() {
			return nil
		}
		name := c.Stop.GetGameServer()
		var code int32
		err := a.w.gameServerEvent(name, a.producer, events.RecordExit{Exited: &eventsv1.ProcessExited{ExitCode: &code, Attempt: 1}})
		var terr *events.TransitionError
		if errors.As(err, &terr) {
			return nil // already ended
		}
		return err
	}
	return nil
}

// commands returns the commands received so far.
func (a *agent) commands() []*agentv1.Command {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.cmds)
}

// starts returns the game servers it was told to start, in order.
func (a *agent) starts() []*agentv1.StartGameServer {
	var out []*agentv1.StartGameServer
	for _, c := range a.commands() {
		if s := c.GetStart(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// stops returns the stop commands it received, in order.
func (a *agent) stops() []*agentv1.StopGameServer {
	var out []*agentv1.StopGameServer
	for _, c := range a.commands() {
		if s := c.GetStop(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// testSpec is a fleet spec with every field the start command carries.
func testSpec(replicas int32, scheduling eventsv1.Scheduling) *eventsv1.FleetSpec {
	spec := &eventsv1.FleetSpec{
		Replicas: replicas, Scheduling: scheduling,
		Template: &eventsv1.GameServerTemplate{Command: "/bin/game", Args: []string{"--port", "${TETHER_PORT_GAME}"},
			Env: map[string]string{"MODE": "ranked"}},
		Health:                    &eventsv1.HealthPolicy{PeriodSeconds: 2, FailureThreshold: 4, InitialDelaySeconds: 1},
		SdkDisconnectGraceSeconds: 45,
		Labels:                    map[string]string{"mode": "ranked"},
	}
	events.NormalizeFleetSpec(spec)
	return spec
}
