package controller_test

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev/wait"
	"github.com/tetherhq/tether/services/hostbeat"
)

// beater plays the agents' heartbeats; a host's beat can be switched off.
type beater struct{ on map[string]*atomic.Bool }

func (w *world) beat(hosts ...string) *beater {
	w.t.Helper()
	kv, err := hostbeat.Open(w.ctx, w.js)
	if err != nil {
		w.t.Fatal(err)
	}
	b := &beater{on: map[string]*atomic.Bool{}}
	for _, h := range hosts {
		b.on[h] = &atomic.Bool{}
		b.on[h].Store(true)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			for h, on := range b.on {
				if on.Load() {
					if err := hostbeat.Beat(ctx, kv, h, time.Now()); err != nil && ctx.Err() == nil {
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
	hist, err := w.store.History(w.ctx, events.MustSubject(host), 0)
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
	hist, err := w.store.History(w.ctx, events.FleetGameServersSubject(fleet), 0)
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

	fresh := postgres.NewFreshness(w.pool, nil)
	ctx, cancel := context.WithCancel(w.ctx)
	c, err := controller.New(controller.Options{
		JetStream: w.js, Store: w.store, Views: postgres.NewViews(w.pool), Freshness: fresh, Commands: w.bus,
		LeaseTTL: time.Second, Interval: 50 * time.Millisecond, UnreachableAfter: 400 * time.Millisecond, LostAfter: 1500 * time.Millisecond,
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
	views := postgres.NewViews(w.pool)
	wait.For(t, 10*time.Second, "h1's servers shown with connection UNKNOWN", func() bool {
		rows, err := views.ListGameServers(w.ctx, postgres.GameServerQuery{Host: "hosts/h1", Limit: 10})
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
