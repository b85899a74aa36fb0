package hostbeat_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// track starts a tracker stopped when the test ends.
func track(t testing.TB, ctx context.Context, js jetstream.JetStream) *hostbeat.Tracker {
	t.Helper()
	tr, err := hostbeat.Track(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return tr
}

// sameBeats fails unless two reads of the bucket agree, beat by beat.
func sameBeats(t *testing.T, got, want map[string]hostbeat.Beat) {
	t.Helper()
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("hosts %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for h, w := range want {
		g := got[h]
		if !g.Stored.Equal(w.Stored) || !g.WrittenAt().Equal(w.WrittenAt()) || !reflect.DeepEqual(g.Inv(), w.Inv()) {
			t.Fatalf("%s: %v %v %+v, want %v %v %+v", h, g.Stored, g.WrittenAt(), g.Inv(), w.Stored, w.WrittenAt(), w.Inv())
		}
	}
}

// beats reads the tracker, bounded.
func beats(t *testing.T, tr *hostbeat.Tracker) map[string]hostbeat.Beat {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := tr.Beats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A tracker reads what Read reads: the values the bucket had when it
// started, then every put, delete and purge, each visible to the next Beats.
func TestTrackerFollowsBucket(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 5, time.UTC)
	inv := &hostbeat.Inventory{Servers: []hostbeat.Server{{Name: "fleets/a/gameServers/gs-1", Pid: 42}}, Queued: 1}
	if err := hostbeat.Put(t.Context(), kv, "h1", hostbeat.Beat{Time: at, Inventory: inv}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "h2", []byte(at.Format(time.RFC3339Nano))); err != nil { // an older agent's
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "h3", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	read := func() map[string]hostbeat.Beat {
		t.Helper()
		b, err := hostbeat.Read(t.Context(), kv)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	tr := track(t, t.Context(), js)
	if err := tr.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := beats(t, tr)
	if len(got) != 3 || got["h1"].Inv().Queued != 1 || !got["h2"].WrittenAt().Equal(at) {
		t.Fatalf("initial beats %+v", got)
	}
	sameBeats(t, got, read())

	// Later writes: each is in the very next Beats, no polling.
	if err := hostbeat.Put(t.Context(), kv, "h4", hostbeat.Beat{Time: at.Add(time.Second), Inventory: &hostbeat.Inventory{}}); err != nil {
		t.Fatal(err)
	}
	if err := hostbeat.Put(t.Context(), kv, "h1", hostbeat.Beat{Time: at.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	got = beats(t, tr)
	if _, ok := got["h4"]; !ok || !got["h1"].WrittenAt().Equal(at.Add(2*time.Second)) || got["h1"].Inv() != nil {
		t.Fatalf("after puts %+v", got)
	}
	sameBeats(t, got, read())

	if err := kv.Delete(t.Context(), "h2"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(t.Context(), "h3"); err != nil {
		t.Fatal(err)
	}
	got = beats(t, tr)
	if _, ok := got["h2"]; ok {
		t.Fatalf("deleted host still there: %+v", got)
	}
	if _, ok := got["h3"]; ok {
		t.Fatalf("purged host still there: %+v", got)
	}
	sameBeats(t, got, read())
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
}

// The bucket's last revision can be gone before the tracker sees it (here a
// delete marker, purged): Beats does not wait for it.
func TestTrackerLastRevisionGone(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h2"} {
		if err := hostbeat.Put(t.Context(), kv, h, hostbeat.Beat{Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(t.Context(), "h2"); err != nil {
		t.Fatal(err)
	}
	if err := kv.PurgeDeletes(t.Context(), jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	tr := track(t, t.Context(), js)
	got := beats(t, tr)
	if _, ok := got["h1"]; len(got) != 1 || !ok {
		t.Fatalf("beats %+v", got)
	}
}

// A stopped tracker, or one whose context ended, reports it; it serves no
// more beats.
func TestTrackerStop(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	if _, err := setUp(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	tr, err := hostbeat.Track(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	default:
		t.Fatal("Stop returned before the tracker ended")
	}
	if err := tr.Err(); !errors.Is(err, hostbeat.ErrStopped) {
		t.Fatalf("Err after Stop: %v", err)
	}
	if _, err := tr.Beats(t.Context()); !errors.Is(err, hostbeat.ErrStopped) {
		t.Fatalf("Beats after Stop: %v", err)
	}
	if err := tr.Stop(); err != nil { // idempotent
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	tr = track(t, ctx, js)
	if err := tr.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := tr.Err(); !errors.Is(err, hostbeat.ErrStopped) { // at once, not when it notices
		t.Fatalf("Err after its context ended: %v", err)
	}
	if _, err := tr.Beats(t.Context()); !errors.Is(err, hostbeat.ErrStopped) {
		t.Fatalf("Beats after its context ended: %v", err)
	}
	ended(t, tr)
}

// ended waits (bounded) for a tracker to end.
func ended(t *testing.T, tr *hostbeat.Tracker) {
	t.Helper()
	select {
	case <-tr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the tracker did not end")
	}
}

// A tracker whose watcher ends (here its connection closes) says so rather
// than serve the last map it had; so does Wait on one that never loaded.
func TestTrackerWatchEnded(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	if err := hostbeat.Put(t.Context(), kv, "h1", hostbeat.Beat{Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	nc2, js2 := natstest.Connect(t, ns)
	tr := track(t, t.Context(), js2)
	if got := beats(t, tr); len(got) != 1 {
		t.Fatalf("beats %+v", got)
	}
	nc2.Close()
	ended(t, tr)
	if err := tr.Err(); !errors.Is(err, hostbeat.ErrWatchEnded) {
		t.Fatalf("Err after the connection closed: %v", err)
	}
	if _, err := tr.Beats(t.Context()); !errors.Is(err, hostbeat.ErrWatchEnded) {
		t.Fatalf("Beats after the connection closed: %v", err)
	}
	if err := tr.Wait(t.Context()); !errors.Is(err, hostbeat.ErrWatchEnded) {
		t.Fatalf("Wait after the connection closed: %v", err)
	}
}

// Writers put and delete beats while readers read them: every read sees
// every beat written before it began, never a beat older than one it saw
// before, and the last read is exactly the bucket.
func TestTrackerConcurrent(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	const writers, hosts, rounds = 4, 10, 15
	// Some hosts are there before the tracker starts.
	for i := range hosts {
		if err := hostbeat.Put(t.Context(), kv, fmt.Sprintf("w0-h%d", i), hostbeat.Beat{Time: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	tr := track(t, t.Context(), js)

	var wg sync.WaitGroup
	written := make([]sync.Map, writers) // host → its last beat's Time, or nil once deleted, per writer
	stop := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				for i := range hosts {
					h := fmt.Sprintf("w%d-h%d", w, i)
					if i%2 == 1 {
						h = fmt.Sprintf("w%d-churn%d", w, i) // comes and goes
					}
					if i%2 == 1 && (r+i)%4 == 3 {
						if err := kv.Delete(t.Context(), h); err != nil {
							t.Error(err)
							return
						}
						written[w].Store(h, nil)
						continue
					}
					at := time.Unix(int64(r+1), 0)
					if err := hostbeat.Put(t.Context(), kv, h, hostbeat.Beat{Time: at, Inventory: &hostbeat.Inventory{Queued: r}}); err != nil {
						t.Error(err)
						return
					}
					written[w].Store(h, at)
				}
			}
		})
	}
	var readers sync.WaitGroup
	for range 3 {
		readers.Go(func() {
			seen := map[string]time.Time{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				// What was written before the read must be in it.
				before := map[string]any{}
				for w := range writers {
					written[w].Range(func(k, v any) bool { before[k.(string)] = v; return true })
				}
				got, err := tr.Beats(t.Context())
				if err != nil {
					t.Error(err)
					return
				}
				for h, v := range before {
					// Hosts never deleted are in a read, as recent as
					// when it began at least.
					if at, ok := v.(time.Time); ok && !strings.Contains(h, "churn") {
						if b, ok := got[h]; !ok || b.WrittenAt().Before(at) {
							t.Errorf("%s: read (present %v) written at %s, stored at %s, inventory %+v, after %s was written",
								h, ok, b.WrittenAt(), b.Stored, b.Inv(), at)
							return
						}
					}
				}
				for h, b := range got {
					if b.WrittenAt().Before(seen[h]) {
						t.Errorf("%s went back from %s to %s", h, seen[h], b.WrittenAt())
						return
					}
					seen[h] = b.WrittenAt()
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	want, err := hostbeat.Read(t.Context(), kv)
	if err != nil {
		t.Fatal(err)
	}
	sameBeats(t, beats(t, tr), want)
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
}

// A replicated bucket's tracker says when the bucket's leader was elected,
// and a new election moves it: the controller counts a host's silence from
// no earlier than that.
func TestTrackerLeaderSinceFollowsElections(t *testing.T) {
	nodes := natstest.StartCluster(t, 3)
	nc, js := natstest.Connect(t, nodes[0])
	ctx := t.Context()
	if err := hostbeat.Setup(ctx, js, 3); err != nil {
		t.Fatal(err)
	}
	kv, err := hostbeat.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if err := hostbeat.Put(ctx, kv, "h1", hostbeat.Beat{Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tr := track(t, ctx, js)
	beats(t, tr)
	first := tr.LeaderSince()
	if first.IsZero() || first.After(time.Now()) {
		t.Fatalf("leader since %v, want a time before now", first)
	}

	stepped := time.Now()
	if _, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN.KV_"+hostbeat.Bucket, nil); err != nil {
		t.Fatal(err)
	}
	// An election after the step-down; Beats fails while there is none,
	// and a tracker whose watcher ended is replaced, as its owners do.
	wait.Until(t, 30*time.Second, "the tracker to report the new leader's election", func() error {
		if err := tr.Err(); err != nil {
			tr = track(t, ctx, js)
			return err
		}
		bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := tr.Beats(bctx); err != nil {
			return err
		}
		if since := tr.LeaderSince(); !since.After(first) || since.Before(stepped.Add(-time.Second)) {
			return fmt.Errorf("leader since %v (first %v, stepped down at %v)", since, first, stepped)
		}
		return nil
	})
}
