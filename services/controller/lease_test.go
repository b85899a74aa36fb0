package controller_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/commands"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev/natsembed/natstest"
	"github.com/tetherhq/tether/services/dev/pgtemp/pgtest"
	"github.com/tetherhq/tether/services/dev/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// world is NATS, the views kept by a running projector, and the commands bus.
type world struct {
	t     *testing.T
	ctx   context.Context
	js    jetstream.JetStream
	store *natsjs.Store
	pool  *pgxpool.Pool
	bus   *commands.Bus
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	bus, err := commands.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	proj, err := postgres.NewProjector(postgres.ProjectorOptions{Pool: pool, JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- proj.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
		pool.Close()
	})
	return &world{t: t, ctx: ctx, js: js, store: store, pool: pool, bus: bus}
}

func (w *world) append(name string, expected uint64, payload proto.Message) uint64 {
	w.t.Helper()
	seq, err := w.store.Append(w.ctx, events.MustSubject(name), expected, events.New(name, time.Now(), payload))
	if err != nil {
		w.t.Fatal(err)
	}
	return seq
}

// controller starts a controller; stop cancels its Run and waits for it.
func (w *world) controller(id string) (c *controller.Controller, stop func()) {
	w.t.Helper()
	fresh := postgres.NewFreshness(w.pool, nil)
	ctx, cancel := context.WithCancel(w.ctx)
	c, err := controller.New(controller.Options{
		JetStream: w.js, Store: w.store, Views: postgres.NewViews(w.pool), Freshness: fresh, Commands: w.bus,
		ID: id, LeaseTTL: time.Second, Interval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- fresh.Run(ctx) }()
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				w.t.Errorf("controller %s: %v", id, err)
			}
		}
	}
	w.t.Cleanup(stop)
	return c, stop
}

// scheduledBy counts GameServerScheduled events of a fleet by producer.
func (w *world) scheduledBy(fleet string) map[string]int {
	w.t.Helper()
	hist, err := w.store.History(w.ctx, events.FleetGameServersSubject(fleet), 0)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range hist {
		if e.Type == "GameServerScheduled" {
			out[e.Producer]++
		}
	}
	return out
}

func TestOnlyTheLeaderActsAndTheStandbyTakesOver(t *testing.T) {
	w := newWorld(t)
	w.append("hosts/h1", events.AnySequence, &eventsv1.HostRegistered{Capacity: 10, Address: "127.0.0.1"})
	a, stopA := w.controller("ctl-a")
	b, stopB := w.controller("ctl-b")
	wait.For(t, 5*time.Second, "a leader", func() bool { return a.IsLeader() || b.IsLeader() })
	leader, standby, stopLeader := a, b, stopA
	if b.IsLeader() {
		leader, standby, stopLeader = b, a, stopB
	}
	if standby.IsLeader() {
		t.Fatal("both controllers lead")
	}

	spec := &eventsv1.FleetSpec{Replicas: 2, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(spec)
	created := w.append("fleets/arena", 0, &eventsv1.FleetCreated{Spec: spec})
	wait.For(t, 10*time.Second, "2 servers scheduled", func() bool { return w.scheduledBy("arena")["controllers/"+leader.ID()] == 2 })
	if n := w.scheduledBy("arena")["controllers/"+standby.ID()]; n != 0 {
		t.Fatalf("the standby scheduled %d servers", n)
	}

	stopLeader()
	wait.For(t, 10*time.Second, "the standby to take over", standby.IsLeader)
	more := proto.CloneOf(spec)
	more.Replicas = 3
	w.append("fleets/arena", created, &eventsv1.FleetUpdated{Spec: more, ChangedFields: []string{"replicas"}})
	wait.For(t, 10*time.Second, "the new leader to schedule the third server", func() bool {
		return w.scheduledBy("arena")["controllers/"+standby.ID()] == 1
	})
	if got := w.scheduledBy("arena"); got["controllers/"+leader.ID()] != 2 || len(got) != 2 {
		t.Fatalf("scheduling events by producer: %v", got)
	}
}
