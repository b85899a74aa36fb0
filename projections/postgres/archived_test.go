package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// purge removes an aggregate's events from the stream, as the archiver
// does, and returns the sequence it purged up to.
func (e *env) purge(name string) uint64 {
	e.t.Helper()
	subject := events.MustSubject(name)
	last, err := e.store.LastSequence(e.ctx, subject)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.PurgeSubject(e.ctx, subject, last); err != nil {
		e.t.Fatal(err)
	}
	return last
}

// check runs a check that must find the views as a replay makes them.
func (e *env) check(opts postgres.ReplayOptions) postgres.CheckReport {
	e.t.Helper()
	rep, err := postgres.Check(e.ctx, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		e.t.Fatalf("check: %+v", rep.Differences)
	}
	return rep
}

// TestProjectionOverPurgedEvents: a stream with purged (archived) events,
// the last one among them, is projected from the start, checked and
// rebuilt: the gaps are not lost events, and a replay reaches the stream's
// last sequence although its event is gone.
func TestProjectionOverPurgedEvents(t *testing.T) {
	e := newEnv(t)
	e.scenario(5)
	e.purge("fleets/arena/gameServers/gs-2")
	if purged, last := e.purge("fleets/doomed"), e.lastSeq(); purged != last {
		t.Fatalf("the scenario's last event is %d, not the doomed fleet's %d", last, purged)
	}
	lastLeft, err := e.store.LastSequence(e.ctx, events.MustSubject("hosts/h1"))
	if err != nil {
		t.Fatal(err)
	}

	pool := e.pool()
	live := e.projector(pool, "live", time.Minute, 7)
	e.runLive(live)
	wait.For(t, 20*time.Second, "the views to have every event left", func() bool { return live.Checkpoint() >= lastLeft })
	views := postgres.NewViews(pool)
	for _, name := range []string{"fleets/arena/gameServers/gs-2", "fleets/doomed"} {
		var n int
		if err := pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM game_servers WHERE name = $1) + (SELECT count(*) FROM fleets WHERE name = $1)`,
			name).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s has %d rows (%v), its events purged", name, n, err)
		}
	}
	if n, err := views.DeadLetterCount(e.ctx); err != nil || n != 0 {
		t.Fatalf("%d dead letters (%v)", n, err)
	}
	if _, err := views.GameServer(e.ctx, "fleets/arena/gameServers/gs-3"); err != nil {
		t.Fatal(err)
	}

	opts := postgres.ReplayOptions{Pool: pool, JetStream: e.js, BatchSize: 7}
	e.check(opts)
	res, err := postgres.Rebuild(e.ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint != e.lastSeq() {
		t.Fatalf("rebuilt to %d, the stream's last sequence is %d", res.Checkpoint, e.lastSeq())
	}
	e.check(opts)
}

// TestCheckLeavesOutArchivedRows: a live row whose events were purged is a
// difference, unless the archive catalog holds them (the archiver stopped
// between its purge and its removal of the rows).
func TestCheckLeavesOutArchivedRows(t *testing.T) {
	e := newEnv(t)
	e.scenario(5)
	pool := e.pool()
	live := e.projector(pool, "live", time.Minute, 7)
	e.runLive(live)
	want := e.lastSeq()
	wait.For(t, 20*time.Second, "the live views", func() bool { return live.Checkpoint() >= want })
	gs := "fleets/arena/gameServers/gs-2"
	last := e.purge(gs)

	opts := postgres.ReplayOptions{Pool: pool, JetStream: e.js, BatchSize: 7}
	rep, err := postgres.Check(e.ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string]int{}
	for _, d := range rep.Differences {
		if d.Kind == postgres.DiffExtra {
			extra[d.Table]++
		}
	}
	if len(rep.Differences) != 8 || extra["game_servers"] != 1 || extra["events"] != 7 {
		t.Fatalf("differences after an unrecorded purge: %+v; want %s's row and its seven events", rep.Differences, gs)
	}

	if _, err := pool.Exec(e.ctx, `INSERT INTO archive_segments (name, state, aggregates, create_time, update_time)
VALUES ('s.seg', 'PURGED', 1, now(), now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(e.ctx, `INSERT INTO archived_aggregates (aggregate, last_sequence, subject, kind, end_time, segment)
VALUES ($1, $2, $3, 'gs', now(), 's.seg')`, gs, int64(last), events.MustSubject(gs)); err != nil {
		t.Fatal(err)
	}
	e.check(opts)
}

// TestReplayWaitsForAnArchivingPass: a check waits for the archive lock an
// archiving pass holds, and holds it while it replays.
func TestReplayWaitsForAnArchivingPass(t *testing.T) {
	e := newEnv(t)
	e.scenario(2)
	pool := e.pool()
	live := e.projector(pool, "live", time.Minute, 7)
	e.runLive(live)
	release, err := postgres.LockArchiving(e.ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.LockArchiving(e.ctx, pool); !errors.Is(err, postgres.ErrArchiveBusy) {
		t.Fatalf("a second pass's lock: %v, want ErrArchiveBusy", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := postgres.Check(context.WithoutCancel(e.ctx), postgres.ReplayOptions{Pool: pool, JetStream: e.js})
		done <- err
	}()
	wait.Holds(t, 300*time.Millisecond, "the check waiting for the pass", func() bool { return len(done) == 0 })
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	release, err = postgres.LockArchiving(e.ctx, pool)
	if err != nil {
		t.Fatalf("a pass after the check: %v", err)
	}
	release()
}
