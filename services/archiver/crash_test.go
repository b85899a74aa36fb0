package archiver_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/archiver"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The environment of a crash test's child: the step to die after, and
// where its parent's NATS, database and archive directory are, and the
// time on its clock.
const (
	crashStepEnv = "TETHER_ARCHIVER_CRASH_STEP"
	crashNATSEnv = "TETHER_ARCHIVER_CRASH_NATS"
	crashDBEnv   = "TETHER_ARCHIVER_CRASH_DB"
	crashDirEnv  = "TETHER_ARCHIVER_CRASH_DIR"
	crashNowEnv  = "TETHER_ARCHIVER_CRASH_NOW"
)

// stepWriting is the crash in the middle of writing the segment: the
// child dies with part of it in the store's temporary file.
const stepWriting = "writing"

// crashSteps are the points a child dies at, in a pass's order, with the
// state the catalog then records for the first segment ("" for none) and
// whether its file is in the store.
var crashSteps = []struct {
	step, state string
	stored      bool
}{
	{"selected", "", false},
	{"intent", "INTENT", false},
	{stepWriting, "INTENT", false},
	{"put", "INTENT", true},
	{"stored", "STORED", true},
	{"purged-one", "STORED", true},
	{"purged-all", "STORED", true},
	{"purged", "PURGED", true},
	{"done", "DONE", true},
}

// TestKillAtEveryStep kills an archiver (kill -9: a child process that
// sends itself SIGKILL) right after each step of a pass, then runs a fresh
// one: it finishes the work, and nothing is lost (every event that was in
// the stream is in the stream or in exactly one recorded segment, byte for
// byte), nothing is duplicated (no event in two segments or in a segment
// and the stream, no aggregate recorded twice, no file but the recorded
// segments), and the views are what a replay of the stream makes.
func TestKillAtEveryStep(t *testing.T) {
	for _, c := range crashSteps {
		t.Run(c.step, func(t *testing.T) {
			w := newWorld(t)
			w.scenario()
			before := w.snapshot()

			cmd := exec.CommandContext(w.ctx, os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
			cmd.Env = append(os.Environ(),
				crashStepEnv+"="+c.step, crashNATSEnv+"="+w.k.NATS.ClientURL(), crashDBEnv+"="+w.k.DBURL,
				crashDirEnv+"="+w.dir.Path(), crashNowEnv+"="+afterRetention.Format(time.RFC3339Nano))
			out, err := cmd.CombinedOutput()
			if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child did not die by SIGKILL after %s: %v\n%s", c.step, err, out)
			}

			segs, aggs := w.catalogAsIs()
			switch {
			case c.state == "" && len(segs) != 0:
				t.Fatalf("after %s the catalog has %v", c.step, segs)
			case c.state != "" && (len(segs) != 1 || segs[0].state != c.state):
				t.Fatalf("after %s the catalog has %+v, want one segment %s", c.step, segs, c.state)
			case c.state != "":
				if _, err := w.dir.Stat(w.ctx, segs[0].name); (err == nil) != c.stored {
					t.Fatalf("after %s the segment's file: %v, want stored %v", c.step, err, c.stored)
				}
				if len(aggs) == 0 {
					t.Fatalf("after %s the catalog records no aggregate", c.step)
				}
			}

			a := w.archiver(afterRetention)
			var res archiver.Result
			wait.Until(t, 20*time.Second, "a pass after the crash", func() error {
				r, err := a.RunOnce(w.ctx)
				if err != nil {
					t.Fatalf("pass after a crash after %s: %v", c.step, err)
				}
				if r.Busy {
					return errors.New("the archive lock is held: PostgreSQL has not seen the killed child's session end yet")
				}
				res = r
				return nil
			})
			if resumed := c.state != "" && c.state != "DONE"; (res.Resumed == 1) != resumed {
				t.Errorf("pass after a crash after %s: %+v, resumed %v", c.step, res, resumed)
			}
			w.checkArchived(before, archivedAtFirst)
			if res := runOnce(t, w.ctx, a); res.Segments != 0 || res.Purged != 0 {
				t.Errorf("a second pass archived again: %+v", res)
			}
		})
	}
}

// segmentRow is a segment as the catalog records it.
type segmentRow struct{ name, state string }

// catalogAsIs reads the catalog's segments, whatever their states.
func (w *world) catalogAsIs() ([]segmentRow, []catalogRow) {
	w.t.Helper()
	rows, err := w.k.Pool.Query(w.ctx, `SELECT name, state FROM archive_segments ORDER BY name`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var segs []segmentRow
	for rows.Next() {
		var s segmentRow
		if err := rows.Scan(&s.name, &s.state); err != nil {
			w.t.Fatal(err)
		}
		segs = append(segs, s)
	}
	var aggs []catalogRow
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	r, err := w.k.Pool.Query(w.ctx, `SELECT aggregate FROM archived_aggregates`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var c catalogRow
		if err := r.Scan(&c.aggregate); err != nil {
			w.t.Fatal(err)
		}
		aggs = append(aggs, c)
	}
	return segs, aggs
}

// TestCrashChild is TestKillAtEveryStep's child: an archiver over its
// parent's NATS, database and directory, which kills its own process
// after the step its parent names.
func TestCrashChild(t *testing.T) {
	step := os.Getenv(crashStepEnv)
	if step == "" {
		t.Skip("the child of TestKillAtEveryStep")
	}
	ctx := context.Background()
	nc, err := nats.Connect(os.Getenv(crashNATSEnv))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv(crashDBEnv))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := archive.NewDir(os.Getenv(crashDirEnv))
	if err != nil {
		t.Fatal(err)
	}
	now, err := time.Parse(time.RFC3339Nano, os.Getenv(crashNowEnv))
	if err != nil {
		t.Fatal(err)
	}
	var segments archive.SegmentStore = dir
	if step == stepWriting {
		segments = dyingStore{dir}
	}
	a, err := archiver.New(archiver.Options{Stream: store, Pool: pool, Segments: segments, Retention: retention,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	archiver.SetAfterStep(a, func(s string) {
		if s == step {
			die()
		}
	})
	res, err := a.RunOnce(ctx)
	t.Fatalf("the pass ended without reaching step %s: %+v, %v", step, res, err)
}

// die kills the process as kill -9 does: no deferred call, no flush, no
// goodbye to PostgreSQL or NATS.
func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// dyingStore is a segment store whose process dies in the middle of a Put,
// with part of the segment written.
type dyingStore struct{ *archive.Dir }

// Put implements archive.SegmentStore.
func (d dyingStore) Put(ctx context.Context, name string, r io.Reader) (archive.Info, error) {
	return d.Dir.Put(ctx, name, &dyingReader{r: r})
}

// dyingReader kills the process at its second read, once the first has
// reached the file.
type dyingReader struct {
	r     io.Reader
	reads int
}

// Read implements io.Reader.
func (d *dyingReader) Read(p []byte) (int, error) {
	if d.reads++; d.reads == 2 {
		die()
	}
	return d.r.Read(p)
}
