package archiver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/archiver"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// runOnce runs a pass that must not fail.
func runOnce(t testing.TB, ctx context.Context, a *archiver.Archiver) archiver.Result {
	t.Helper()
	res, err := a.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestArchiveEndedAggregates archives what ended before the retention
// window, end to end: the segments hold every event of those aggregates
// byte for byte and verify, their subjects are purged, their rows are gone
// from the views, and what is live or ended inside the window is
// untouched; a later clock archives the rest; a pass with nothing due does
// nothing; the views stay what a replay makes.
func TestArchiveEndedAggregates(t *testing.T) {
	w := newWorld(t)
	w.scenario()
	before := w.snapshot()
	liveRows := map[string][2]int{}
	for _, name := range append(neverArchived, archivedLater...) {
		v, e := w.rows(name)
		liveRows[name] = [2]int{v, e}
	}

	// Before the window has passed for anything, nothing goes.
	if res := runOnce(t, w.ctx, w.archiver(t0.Add(retention))); res.Segments != 0 {
		t.Fatalf("archived before the retention window passed: %+v", res)
	}

	res := runOnce(t, w.ctx, w.archiver(afterRetention))
	// The deleted fleet with a server goes in a second segment, once its
	// server's row is gone.
	if res.Segments != 2 || res.Aggregates != len(archivedAtFirst) || res.Resumed != 0 || res.Events == 0 ||
		res.Purged != uint64(res.Events) || res.Rows == 0 || res.Bytes == 0 || res.LateEvents != 0 {
		t.Fatalf("first pass: %+v", res)
	}
	w.checkArchived(before, archivedAtFirst)
	for _, name := range archivedAtFirst {
		if last, err := w.k.Store.LeaderLastSequence(w.ctx, events.MustSubject(name)); err != nil || last != 0 {
			t.Errorf("%s: last sequence %d (%v) after its purge, want none", name, last, err)
		}
	}
	for name, want := range liveRows {
		if v, e := w.rows(name); v != want[0] || e != want[1] {
			t.Errorf("%s: %d view rows and %d events rows, had %d and %d", name, v, e, want[0], want[1])
		}
	}

	if res := runOnce(t, w.ctx, w.archiver(afterRetention)); res.Segments != 0 || res.Purged != 0 || res.Rows != 0 {
		t.Fatalf("a second pass at the same time archived again: %+v", res)
	}

	later := afterRetention.Add(recentAt.Sub(t0))
	if res := runOnce(t, w.ctx, w.archiver(later)); res.Segments != 1 || res.Aggregates != len(archivedLater) {
		t.Fatalf("pass after the recent ones' window: %+v", res)
	}
	w.checkArchived(before, append(append([]string{}, archivedAtFirst...), archivedLater...))
	if res := runOnce(t, w.ctx, w.archiver(later.Add(365*24*time.Hour))); res.Segments != 0 {
		t.Fatalf("archived something live: %+v", res)
	}

	// A rebuild of the views from the stream makes the same views.
	if _, err := postgres.Rebuild(w.ctx, postgres.ReplayOptions{Pool: w.k.Pool, JetStream: w.k.JS, Logger: w.k.Logger}); err != nil {
		t.Fatalf("rebuild after archiving: %v", err)
	}
	w.check()
}

// TestSegmentLimits: a pass writes segments of at most MaxAggregates
// aggregates, at most MaxSegments of them; the next pass goes on.
func TestSegmentLimits(t *testing.T) {
	w := newWorld(t)
	w.scenario()
	before := w.snapshot()
	a := w.archiver(afterRetention, func(o *archiver.Options) { o.MaxAggregates, o.MaxSegments = 1, 2 })
	var segments, aggs int
	for range len(archivedAtFirst) {
		res := runOnce(t, w.ctx, a)
		if res.Segments > 2 || res.Aggregates != res.Segments {
			t.Fatalf("pass over the limits: %+v", res)
		}
		segments += res.Segments
		aggs += res.Aggregates
	}
	if segments != len(archivedAtFirst) || aggs != len(archivedAtFirst) {
		t.Fatalf("%d segments, %d aggregates; want one segment per aggregate, %d", segments, aggs, len(archivedAtFirst))
	}
	w.checkArchived(before, archivedAtFirst)
}

// TestLateEventStaysInTheStream: an event appended to an aggregate after
// the pass read it (illegal on an ended aggregate, but a stale writer may
// try) is not purged: the segment holds the history as read, the stream
// keeps the late event, and nothing is lost.
func TestLateEventStaysInTheStream(t *testing.T) {
	w := newWorld(t)
	w.scenario()
	a := w.archiver(afterRetention)
	var late uint64
	archiver.SetAfterStep(a, func(step string) {
		if step == "stored" && late == 0 {
			e := events.New(gsOld, afterRetention, &eventsv1.LabelsChanged{Set: map[string]string{"late": "yes"}})
			seq, err := w.k.Store.Append(w.ctx, events.MustSubject(gsOld), events.AnySequence, e)
			if err != nil {
				t.Error(err)
			}
			late = seq
		}
	})
	before := w.snapshot()
	res := runOnce(t, w.ctx, a)
	if res.LateEvents != 1 || late == 0 {
		t.Fatalf("pass: %+v, late event %d", res, late)
	}
	left, err := w.k.Store.Stored(w.ctx, events.MustSubject(gsOld), 1, late)
	if err != nil || len(left) != 1 || left[0].Sequence != late {
		t.Fatalf("%s keeps %+v (%v) in the stream, want the late event %d alone", gsOld, left, err, late)
	}
	// Everything else is as if it had not come.
	_, aggs := w.catalog()
	var archivedUpTo int64
	for _, c := range aggs {
		if c.aggregate == gsOld {
			archivedUpTo = c.last
		}
	}
	for seq, m := range before {
		if m.Subject == events.MustSubject(gsOld) && int64(seq) > archivedUpTo {
			t.Errorf("event %d of %s is after the archived part", seq, gsOld)
		}
	}
}

// TestUnprojectedAggregateWaits: an ended aggregate whose stream holds an
// event its view row does not reflect is left for a later pass; once the
// projector dead-letters that event (it is illegal on an ended aggregate),
// the aggregate waits for an operator and no pass takes it.
func TestUnprojectedAggregateWaits(t *testing.T) {
	w := newWorld(t)
	w.scenario()
	w.k.StopProjector()
	w.append(gsOld, &eventsv1.LabelsChanged{Set: map[string]string{"late": "yes"}})
	res := runOnce(t, w.ctx, w.archiver(afterRetention))
	if res.Deferred != 1 {
		t.Fatalf("pass: %+v; want %s deferred", res, gsOld)
	}
	if v, _ := w.rows(gsOld); v != 1 {
		t.Fatalf("%s has %d view rows, want its row kept", gsOld, v)
	}
	w.k.StartProjector()
	w.waitProjected()
	res = runOnce(t, w.ctx, w.archiver(afterRetention))
	if res.Deferred != 0 || res.Segments != 0 {
		t.Fatalf("pass after the dead letter: %+v; want %s left out", res, gsOld)
	}
	if v, _ := w.rows(gsOld); v != 1 {
		t.Fatalf("%s has %d view rows, want its row kept", gsOld, v)
	}
}

// TestPassWaitsForTheArchiveLock: while a rebuild, a check or another pass
// holds the archive lock, a pass does nothing.
func TestPassWaitsForTheArchiveLock(t *testing.T) {
	w := newWorld(t)
	w.scenario()
	release, err := postgres.LockArchiving(w.ctx, w.k.Pool)
	if err != nil {
		t.Fatal(err)
	}
	a := w.archiver(afterRetention)
	if res := runOnce(t, w.ctx, a); !res.Busy || res.Segments != 0 {
		t.Fatalf("pass under the lock: %+v", res)
	}
	release()
	if res := runOnce(t, w.ctx, a); res.Busy || res.Segments == 0 {
		t.Fatalf("pass after the lock: %+v", res)
	}
}

// deniedStream is a stream that denies purges, as one set up by an older
// version does.
type deniedStream struct{ *natsjs.Store }

func (deniedStream) PurgesAllowed(context.Context) error { return natsjs.ErrPurgeDenied }

// TestNothingWrittenWhenPurgesAreDenied: on a stream that denies purges a
// pass fails before it writes anything.
func TestNothingWrittenWhenPurgesAreDenied(t *testing.T) {
	w := newWorld(t)
	w.scenario()
	a := w.archiver(afterRetention, func(o *archiver.Options) { o.Stream = deniedStream{w.k.Store} })
	if _, err := a.RunOnce(w.ctx); !errors.Is(err, natsjs.ErrPurgeDenied) {
		t.Fatalf("pass: %v, want ErrPurgeDenied", err)
	}
	if segs, aggs := w.catalog(); len(segs) != 0 || len(aggs) != 0 {
		t.Fatalf("catalog after a denied pass: %v, %v", segs, aggs)
	}
}

// TestRunPasses: Run passes at its interval until its context ends.
func TestRunPasses(t *testing.T) {
	w := newWorld(t)
	w.scenario()
	a := w.archiver(afterRetention)
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, 10*time.Millisecond) }()
	wait.For(t, 20*time.Second, "the archiver to archive the old aggregates", func() bool {
		_, aggs := w.catalog()
		n := 0
		for _, c := range aggs {
			if c.state == "DONE" {
				n++
			}
		}
		return n == len(archivedAtFirst)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOptions: missing and bad options are refused.
func TestOptions(t *testing.T) {
	dir, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool := &pgxpool.Pool{}
	for name, o := range map[string]archiver.Options{
		"no stream":          {Pool: pool, Segments: dir},
		"no pool":            {Stream: deniedStream{}, Segments: dir},
		"no store":           {Stream: deniedStream{}, Pool: pool},
		"negative retention": {Stream: deniedStream{}, Pool: pool, Segments: dir, Retention: -time.Second},
		"negative limit":     {Stream: deniedStream{}, Pool: pool, Segments: dir, MaxEvents: -1},
	} {
		if _, err := archiver.New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestLastPassIsRecorded: every pass that runs records when it ended (by
// the archiver's clock), its retention and its error, for `tetherctl
// archive status`; a pass that found the lock held records nothing.
func TestLastPassIsRecorded(t *testing.T) {
	w := newWorld(t)
	w.scenario()
	lastPass := func() (at time.Time, seconds int64, msg string, ok bool) {
		t.Helper()
		err := w.k.Pool.QueryRow(w.ctx, `SELECT pass_time, retention_seconds, error FROM archive_last_pass`).Scan(&at, &seconds, &msg)
		if errors.Is(err, pgx.ErrNoRows) {
			return at, 0, "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		return at, seconds, msg, true
	}
	if _, _, _, ok := lastPass(); ok {
		t.Fatal("a pass is recorded before any ran")
	}
	denied := w.archiver(afterRetention, func(o *archiver.Options) { o.Stream = deniedStream{w.k.Store} })
	if _, err := denied.RunOnce(w.ctx); err == nil {
		t.Fatal("a pass on a stream that denies purges succeeded")
	}
	if at, seconds, msg, ok := lastPass(); !ok || !at.Equal(afterRetention) || seconds != int64(retention/time.Second) ||
		!strings.Contains(msg, natsjs.ErrPurgeDenied.Error()) {
		t.Fatalf("after a failed pass: %s, %d s, %q, %v", at, seconds, msg, ok)
	}
	later := afterRetention.Add(time.Hour)
	runOnce(t, w.ctx, w.archiver(later))
	if at, _, msg, ok := lastPass(); !ok || !at.Equal(later) || msg != "" {
		t.Fatalf("after a pass: %s, %q, %v", at, msg, ok)
	}
	release, err := postgres.LockArchiving(w.ctx, w.k.Pool)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if res := runOnce(t, w.ctx, w.archiver(later.Add(time.Hour))); !res.Busy {
		t.Fatalf("pass under the lock: %+v", res)
	}
	if at, _, _, _ := lastPass(); !at.Equal(later) {
		t.Fatalf("a pass that found the lock held was recorded at %s", at)
	}
}
