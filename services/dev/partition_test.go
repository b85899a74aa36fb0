package dev_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// Liveness timings of the partition test: short, so it runs in seconds.
const (
	partitionUnreachableAfter = time.Second
	partitionLostAfter        = 4 * time.Second
)

// partitionStack is NATS, the views, a controller with short host-liveness
// timeouts and real agents whose heartbeats can be paused, running the
// example game server. (dev.Run keeps its agents and timeouts to itself.)
type partitionStack struct {
	t      *testing.T
	ctx    context.Context
	store  *natsjs.Store
	views  *postgres.Views
	paused map[string]*atomic.Bool // by host id
}

func startPartitionStack(t *testing.T, hosts ...string) *partitionStack {
	t.Helper()
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	if err := migrate.NATS(ctx, js, migrate.Options{LeaseTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
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
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("test", t.Name())
	proj, err := postgres.NewProjector(postgres.ProjectorOptions{Pool: pool, JetStream: js, Logger: log.With("component", "projector")})
	if err != nil {
		t.Fatal(err)
	}
	fresh := postgres.NewFreshness(pool, nil)
	ctl, err := controller.New(controller.Options{
		JetStream: js, Store: store, Views: postgres.NewViews(pool), Freshness: fresh, Commands: bus,
		Interval:         100 * time.Millisecond,
		UnreachableAfter: partitionUnreachableAfter, LostAfter: partitionLostAfter,
		Logger: log.With("component", "controller"),
	})
	if err != nil {
		t.Fatal(err)
	}
	runs := []func(context.Context) error{proj.Run, fresh.Run, ctl.Run}
	s := &partitionStack{t: t, ctx: ctx, store: store, views: postgres.NewViews(pool), paused: map[string]*atomic.Bool{}}
	base := freeport.Block(t, 10*len(hosts))
	for i, id := range hosts {
		paused := &atomic.Bool{}
		s.paused[id] = paused
		a, err := agent.New(agent.Options{
			HostID: id, Capacity: 4, PortMin: base + 10*i, PortMax: base + 10*i + 9, SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0",
			LogDir: filepath.Join(t.TempDir(), id), JetStream: js, Store: store, Commands: bus,
			// SyncInterval stays at its default (60s): the heartbeat's
			// resumption is what triggers the re-read of the servers.
			HeartbeatInterval: 100 * time.Millisecond,
			SkipHeartbeat:     paused.Load, KillProcessesOnExit: true, Logger: log.With("component", "agent"),
			AllowedCommands: []string{filepath.Dir(gameServerBin)},
		})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, a.Run)
	}
	done := make(chan error, len(runs))
	for _, run := range runs {
		go func() { done <- run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range runs {
			if err := <-done; err != nil {
				t.Errorf("stack: %v", err)
			}
		}
		pool.Close()
	})
	return s
}

// fleet creates a fleet of the example game server, spread over the hosts.
func (s *partitionStack) fleet(id string, replicas int32) {
	s.t.Helper()
	spec := &eventsv1.FleetSpec{
		Replicas: replicas, Scheduling: eventsv1.Scheduling_SCHEDULING_DISTRIBUTED,
		Template: &eventsv1.GameServerTemplate{Command: gameServerBin, Ports: []*eventsv1.PortSpec{{Name: "game", Protocol: eventsv1.Protocol_PROTOCOL_UDP}}},
	}
	events.NormalizeFleetSpec(spec)
	msgs, err := events.DecideFleet(events.FleetName(id), nil, events.CreateFleet{Spec: spec})
	if err != nil {
		s.t.Fatal(err)
	}
	name := events.FleetName(id)
	if _, err := s.store.Append(s.ctx, events.MustSubject(name), 0, events.New(name, time.Now(), msgs[0])); err != nil {
		s.t.Fatal(err)
	}
}

// onHost returns the READY game servers the views place on a host, by name.
func (s *partitionStack) onHost(host string) map[string]*eventsv1.GameServerState {
	s.t.Helper()
	rows, err := s.views.ListGameServers(s.ctx, projections.GameServerQuery{Host: events.HostName(host), State: "READY", Limit: 100})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]*eventsv1.GameServerState{}
	for _, r := range rows {
		out[r.State.GetName()] = r.State
	}
	return out
}

func (s *partitionStack) history(name string) []events.Envelope {
	s.t.Helper()
	h, err := s.store.History(s.ctx, serverSubject(s.t, s.ctx, s.store, name), 0)
	if err != nil {
		s.t.Fatal(err)
	}
	return h
}

// hostEvents counts a host's events of a type.
func (s *partitionStack) hostEvents(host, typ string) int {
	n := 0
	for _, e := range s.history(events.HostName(host)) {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// A real agent's host heartbeat stops (its processes run on). For less than
// the HostLost timeout: its servers are untouched, shown with connection
// UNKNOWN while it is unreachable. Past it: they are terminated with
// HOST_LOST and replaced elsewhere, and the agent stops their processes.
func TestHostPartitionWithRealAgents(t *testing.T) {
	s := startPartitionStack(t, "h1", "h2")
	s.fleet("arena", 4)
	var h1, h2 map[string]*eventsv1.GameServerState
	wait.For(t, 15*time.Second, "2 READY servers on each host", func() bool {
		h1, h2 = s.onHost("h1"), s.onHost("h2")
		return len(h1) == 2 && len(h2) == 2
	})
	for _, on := range []map[string]*eventsv1.GameServerState{h1, h2} {
		for name, st := range on {
			if !alive(int(st.GetPid())) {
				t.Fatalf("%s: process %d is not running", name, st.GetPid())
			}
		}
	}

	t.Run("shorter than HostLost", func(t *testing.T) {
		paused := time.Now()
		s.paused["h1"].Store(true)
		wait.For(t, 10*time.Second, "h1 unreachable", func() bool { return s.hostEvents("h1", "HostUnreachable") == 1 })
		wait.For(t, 10*time.Second, "h1's servers shown with connection UNKNOWN", func() bool {
			rows, err := s.views.ListGameServers(s.ctx, projections.GameServerQuery{Host: "hosts/h1", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			unknown := 0
			for _, r := range rows {
				if r.State.GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_UNKNOWN {
					unknown++
				}
			}
			return unknown == 2
		})
		s.paused["h1"].Store(false)
		wait.For(t, 10*time.Second, "h1 online", func() bool { return s.hostEvents("h1", "HostOnline") == 1 })
		if d := time.Since(paused); d >= partitionLostAfter {
			t.Fatalf("the pause lasted %s, not less than HostLost's %s", d, partitionLostAfter)
		}
		if s.hostEvents("h1", "HostLost") != 0 {
			t.Fatal("h1 was lost")
		}
		for name, st := range h1 {
			if !alive(int(st.GetPid())) {
				t.Fatalf("%s: process %d is gone", name, st.GetPid())
			}
			for _, e := range s.history(name) {
				switch e.Type {
				case "ShutdownRequested", "GameServerUnhealthy", "ProcessSignalled", "ProcessExited", "GameServerTerminated":
					t.Fatalf("%s got %s while its host was merely unreachable", name, e.Type)
				}
			}
		}
		wait.For(t, 10*time.Second, "h1's servers READY with the same processes", func() bool {
			now := s.onHost("h1")
			for name, st := range h1 {
				if now[name].GetPid() != st.GetPid() {
					return false
				}
			}
			return len(now) == 2
		})
	})

	t.Run("past HostLost", func(t *testing.T) {
		s.paused["h2"].Store(true)
		wait.For(t, 15*time.Second, "h2 lost, and its servers replaced on h1", func() bool {
			return s.hostEvents("h2", "HostLost") == 1 && len(s.onHost("h1")) == 4
		})
		if s.hostEvents("h2", "HostUnreachable") != 1 {
			t.Fatalf("h2: %d HostUnreachable", s.hostEvents("h2", "HostUnreachable"))
		}
		for name := range h2 {
			h := s.history(name)
			term, ok := h[len(h)-1].Data.(*eventsv1.GameServerTerminated)
			if !ok || term.GetReason() != eventsv1.Reason_REASON_HOST_LOST {
				t.Fatalf("%s: last event %s %v, want GameServerTerminated HOST_LOST", name, h[len(h)-1].Type, h[len(h)-1].Data)
			}
		}
		// Its heartbeat resumes: the host is online again, and none of the
		// replaced servers' processes runs beside its replacement (the
		// agent re-reads its servers when its heartbeat resumes, and stops them).
		s.paused["h2"].Store(false)
		wait.For(t, 10*time.Second, "h2 online again", func() bool { return s.hostEvents("h2", "HostOnline") == 1 })
		for name, st := range h2 {
			wait.For(t, 10*time.Second, fmt.Sprintf("%s's process %d stopped", name, st.GetPid()), func() bool { return !alive(int(st.GetPid())) })
		}
		if got := s.onHost("h1"); len(got) != 4 {
			t.Fatalf("%d READY on h1 after h2 came back, want 4", len(got))
		}
	})
}
