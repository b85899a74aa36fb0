package postgres_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// backlog appends n health events (degraded, recovered, ...) to a READY
// server of the scenario.
func (e *env) backlog(n int) {
	e.t.Helper()
	for i := 0; i < n; i += 100 {
		var evs []proto.Message
		for j := i; j < min(i+100, n); j++ {
			if j%2 == 0 {
				evs = append(evs, &eventsv1.HealthDegraded{MissedPeriods: 1, FailureThreshold: 3})
			} else {
				evs = append(evs, &eventsv1.HealthRecovered{})
			}
		}
		e.append("fleets/arena/gameServers/gs-0", evs...)
	}
}

// start runs a projector until the test ends or the returned stop is called.
func (e *env) start(p *postgres.Projector) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("projector: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// deliver has n events delivered through a projector's durable consumer,
// and neither applies nor acknowledges them.
func (e *env) deliver(p *postgres.Projector, n int) {
	e.t.Helper()
	cons, err := p.Consumer(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for got := 0; got < n; {
		batch, err := cons.Fetch(n-got, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			e.t.Fatal(err)
		}
		for range batch.Messages() {
			got++
		}
		if err := batch.Error(); err != nil {
			e.t.Fatal(err)
		}
		if got < n && time.Now().After(deadline) {
			e.t.Fatalf("delivered %d of %d events", got, n)
		}
	}
}

// TestRestartedProjectorCatchesUpPromptly stops a projector with events
// delivered to it that it never applied, and starts another on the same
// views and durable consumer, as a restarted projector process does. It must
// catch up at once and apply every event: neither wait for the ack wait (a
// minute) to have them handed back, nor apply what follows them and skip
// them.
func TestRestartedProjectorCatchesUpPromptly(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stop leaves events delivered to the first life, unapplied.
		stop func(e *env, pool *pgxpool.Pool)
	}{
		{
			// Stopped in the middle of a backlog: as many events out as the
			// consumer allows (MaxAckPending), so nothing more is delivered.
			name: "stopped mid-backlog",
			stop: func(e *env, pool *pgxpool.Pool) {
				e.backlog(3000)
				first := e.projector(pool, "restarted", time.Minute, 50)
				stop := e.start(first)
				wait.For(e.t, 20*time.Second, "part of the backlog", func() bool { return first.Checkpoint() >= 500 })
				stop()
			},
		},
		{
			// Killed holding a batch it had not committed, with more events
			// appended after: JetStream delivers those first.
			name: "killed holding a batch",
			stop: func(e *env, pool *pgxpool.Pool) {
				e.run(e.projector(pool, "restarted", time.Minute, 50))
				e.backlog(40)
				e.deliver(e.projector(pool, "restarted", time.Minute, 50), 40) // never applied nor acknowledged
				e.backlog(40)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.scenario(3)
			pool := e.pool()
			tc.stop(e, pool)
			want := e.lastSeq()

			// The ack wait is a minute: catching up within 15 s is no wait for it.
			second := e.projector(pool, "restarted", time.Minute, 50)
			e.start(second)
			wait.For(t, 15*time.Second, "the restarted projector to catch up", func() bool { return second.Checkpoint() >= want })
			var n uint64
			if err := pool.QueryRow(e.ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != want {
				t.Fatalf("the views hold %d of the stream's %d events", n, want)
			}
			assertSameViews(t, pool, e.freshReplay())
		})
	}
}

// levels records the level of every log record.
type levels struct {
	mu   sync.Mutex
	seen map[slog.Level][]string
}

func (l *levels) Enabled(context.Context, slog.Level) bool { return true }
func (l *levels) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[r.Level] = append(l.seen[r.Level], r.Message)
	return nil
}
func (l *levels) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levels) WithGroup(string) slog.Handler      { return l }

func (l *levels) warnings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(l.seen[slog.LevelWarn], l.seen[slog.LevelError]...)
}

// TestProjectorRestartsWithoutWarnings restarts a projector as tether dev
// does, on empty views (a throwaway database) against a kept stream whose
// consumer acknowledged everything, and as a service does, on its own
// views: neither is anything to warn about, and the second keeps its
// consumer. Views restored from an older copy are still warned about.
func TestProjectorRestartsWithoutWarnings(t *testing.T) {
	e := newEnv(t)
	e.scenario(3)
	pool := e.pool()
	e.run(e.projector(pool, "kept", time.Minute, 7))
	created := consumerCreated(t, e, "kept")

	restart := func(pool *pgxpool.Pool) *levels {
		t.Helper()
		log := &levels{seen: map[slog.Level][]string{}}
		p, err := postgres.NewProjector(postgres.ProjectorOptions{
			Pool: pool, JetStream: e.js, Durable: "kept", BatchSize: 7, Logger: slog.New(log),
		})
		if err != nil {
			t.Fatal(err)
		}
		e.run(p)
		return log
	}
	if w := restart(pool).warnings(); len(w) > 0 {
		t.Errorf("restart on its own views logged %q", w)
	}
	if c := consumerCreated(t, e, "kept"); !c.Equal(created) {
		t.Errorf("restart on its own views recreated the consumer (created %s, then %s)", created, c)
	}

	empty := e.pool()
	if w := restart(empty).warnings(); len(w) > 0 {
		t.Errorf("restart on empty views logged %q", w)
	}
	assertSameViews(t, empty, pool)

	// Views of the first 5 events, as a restored older copy would be.
	older := e.pool()
	p := e.projector(older, "older", time.Minute, 100)
	if err := p.ApplyBatch(e.ctx, fetchAll(t, e, p)[:5]); err != nil {
		t.Fatal(err)
	}
	if w := restart(older).warnings(); len(w) != 1 {
		t.Errorf("restart on views behind the consumer logged %q, want one warning", w)
	}
	assertSameViews(t, older, pool)
}

func consumerCreated(t *testing.T, e *env, name string) time.Time {
	t.Helper()
	info, err := mustConsumer(t, e, name).Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.Created
}
