package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// viewsCheckpoint reads the views' checkpoint from the database itself.
func viewsCheckpoint(t *testing.T, pool *pgxpool.Pool) uint64 {
	t.Helper()
	cp, err := postgres.NewViews(pool).Checkpoint(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// The database is restored from an older copy under a running projector
// and the API's freshness tracker. The projector must not fold the events
// that follow on top of views that lack the ones before them (it used to:
// the views silently missed them, with a lag of 0), and the tracker must
// not go on saying the views hold what they no longer hold. Both wait
// until a rebuild brings the views back past them, and then the views are
// what a replay from sequence 1 gives.
func TestProjectorAndFreshnessUnderARestoredDatabase(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	e.scenario(3)
	dbURL := pgtest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")

	// The backup: the views at the scenario's end, copied while nothing
	// is connected to them.
	first, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	e.run(e.projector(first, "live", time.Minute, 50))
	first.Close()
	older := e.lastSeq()
	backup := fmt.Sprintf("%.40s_backup", db) // within PostgreSQL's 63 characters
	srv := pgtest.Server()
	// A backend may outlive its closed connection for a moment, and
	// PostgreSQL copies no database that has one.
	wait.Until(t, 10*time.Second, "the backup copy", func() error { return srv.CreateDatabase(ctx, backup, db) })
	t.Cleanup(func() {
		if err := srv.DropDatabase(context.Background(), backup); err != nil {
			t.Error(err)
		}
	})

	// Live: the projector goes on past the backup, the tracker with it.
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p := e.projector(pool, "live", time.Minute, 50)
	e.start(p)
	fresh := postgres.NewFreshness(pool, testLogger())
	fctx, stopFresh := context.WithCancel(ctx)
	freshDone := make(chan error, 1)
	go func() { freshDone <- fresh.Run(fctx) }()
	t.Cleanup(func() {
		stopFresh()
		if err := <-freshDone; err != nil {
			t.Error(err)
		}
	})
	e.backlog(20)
	newer := e.lastSeq()
	wait.For(t, 20*time.Second, fmt.Sprintf("the projector and the tracker at %d", newer), func() bool {
		return p.Checkpoint() == newer && fresh.Seen() == newer
	})

	// The database goes away. Once the projector fails to connect, no
	// connection from before is left in the pool.
	if err := srv.DropDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	e.backlog(2)
	wait.Until(t, 20*time.Second, "the projector to report the database gone", func() error {
		if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "3D000") {
			return fmt.Errorf("ready: %v", err)
		}
		return nil
	})

	// It comes back from the backup, behind the projector.
	if err := srv.CreateDatabase(ctx, db, backup); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 20*time.Second, "the projector to refuse views behind it", func() error {
		if err := p.Ready(); !errors.Is(err, postgres.ErrViewsBehind) {
			return fmt.Errorf("ready: %v", err)
		}
		return nil
	})
	if cp := viewsCheckpoint(t, pool); cp != older {
		t.Fatalf("views' checkpoint %d after the projector saw the restored views, want the backup's %d: it applied events over a gap", cp, older)
	}
	wait.For(t, 10*time.Second, fmt.Sprintf("the tracker to follow the views back to %d", older), func() bool {
		return fresh.Seen() == older
	})
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := fresh.WaitFor(short, newer); err == nil {
		t.Fatalf("WaitFor(%d) returned while the views are at %d", newer, older)
	}

	// A rebuild brings the views past the projector, which goes on.
	if _, err := postgres.Rebuild(ctx, postgres.ReplayOptions{Pool: pool, JetStream: e.js, Logger: testLogger()}); err != nil {
		t.Fatal(err)
	}
	last := e.lastSeq()
	wait.Until(t, 20*time.Second, fmt.Sprintf("the projector at %d and ready", last), func() error {
		if err := p.Ready(); err != nil {
			return err
		}
		if cp := p.Checkpoint(); cp != last {
			return fmt.Errorf("checkpoint %d", cp)
		}
		return nil
	})
	waitCtx, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	if err := fresh.WaitFor(waitCtx, last); err != nil {
		t.Fatal(err)
	}
	e.backlog(2)
	wait.For(t, 20*time.Second, "the projector to apply what follows", func() bool { return p.Checkpoint() == e.lastSeq() })
	assertSameViews(t, pool, e.freshReplay())
}
