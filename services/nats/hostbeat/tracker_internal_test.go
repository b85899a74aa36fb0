package hostbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// Wait returns only once the tracker holds every value the bucket had when
// it started (read here without Beats, which would wait on its own).
func TestTrackerWaitLoadsInitialValues(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	const hosts = 1000
	for i := range hosts {
		if err := Put(t.Context(), kv, fmt.Sprintf("h%d", i), Beat{Time: time.Unix(int64(i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	tr := track(t, js)
	if err := tr.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	n, last := len(tr.beats), tr.beats[fmt.Sprintf("h%d", hosts-1)]
	tr.mu.Unlock()
	if n != hosts || !last.WrittenAt().Equal(time.Unix(hosts-1, 0)) {
		t.Fatalf("after Wait: %d beats, the last %+v", n, last)
	}
}

// Beats leaves out what the bucket has expired: the watcher does not tell.
func TestTrackerForgetsExpiredBeats(t *testing.T) {
	now := time.Now()
	tr := &Tracker{beats: map[string]Beat{
		"old":   {Stored: now.Add(-2 * time.Hour)},
		"fresh": {Stored: now.Add(-time.Minute)},
	}}
	got := tr.snapshotLocked(time.Hour)
	if _, ok := got["fresh"]; len(got) != 1 || !ok {
		t.Fatalf("snapshot %+v", got)
	}
	if _, ok := tr.beats["old"]; ok {
		t.Fatal("an expired beat is kept")
	}
	if got := (&Tracker{beats: map[string]Beat{"old": {Stored: now.Add(-2 * time.Hour)}}}).snapshotLocked(0); len(got) != 1 {
		t.Fatalf("no TTL: snapshot %+v", got)
	}
}

// A tracker whose watcher stalls serves no more beats, even when every
// revision it misses is superseded before it could get it (as a host's beat
// is by its next one): Beats waits, then fails.
func TestTrackerStalledServesNothing(t *testing.T) {
	tr, kv, _ := playedTracker(t)
	if err := Put(t.Context(), kv, "h1", Beat{}); err != nil {
		t.Fatal(err)
	}
	// A tracker that applied nothing and hears nothing more.
	tr.beats["h1"] = Beat{Stored: time.Now()}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() { // h1 beats on, each beat replacing the last
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			if err := Put(ctx, kv, "h1", Beat{}); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	bctx, bcancel := context.WithTimeout(t.Context(), 3*probeEvery)
	defer bcancel()
	got, err := tr.Beats(bctx)
	if !errors.Is(err, ErrBehind) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a stalled tracker served %+v, %v", got, err)
	}
	cancel()
	<-done
}

// A tracker that is behind the bucket serves nothing, even when a replica
// behind the leader answers its reads: here one that holds only h1's beat
// (natstest.BehindReplica), as a replica cut off before h2 beat would.
func TestTrackerBehindServesNothingWhenAReplicaAnswers(t *testing.T) {
	tr, kv, js := playedTracker(t)
	if err := Put(t.Context(), kv, "h1", Beat{}); err != nil {
		t.Fatal(err)
	}
	natstest.BehindReplica(t, js, streamName, "$KV."+Bucket+".h1")
	if err := Put(t.Context(), kv, "h2", Beat{}); err != nil {
		t.Fatal(err)
	}
	// A tracker that applied h1's beat and hears nothing more: its map is
	// the past, before h2 beat.
	tr.rev, tr.beats["h1"] = 1, Beat{Stored: time.Now()}
	// Ten reads of what is left: if they were direct gets, all ten going
	// to the bucket's own stream would have odds of 1 in 1,024.
	bctx, bcancel := context.WithTimeout(t.Context(), 10*probeEvery+probeEvery/2)
	defer bcancel()
	got, err := tr.Beats(bctx)
	if !errors.Is(err, ErrBehind) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a tracker behind the bucket served %+v, %v", got, err)
	}
}

// A value the watcher passes over was removed, superseded by a later value
// of its key, which may come after the revision Beats waits for: Beats
// waits for it too. Here h2's beat at revision 2 is in the bucket when
// Beats asks (revision 2 is the last), then h3 beats (3) and h2 again
// (4, removing 2); the watcher delivers 3, passing over 2, and only then 4.
// Beats used to answer at 3, without h2 at all (TestTrackerConcurrent
// failed 4 times in 400 runs under load so).
func TestTrackerWaitsForWhatReplacedAValuePassedOver(t *testing.T) {
	tr, kv, _ := playedTracker(t)
	put := func(key string, at int64) entry {
		t.Helper()
		v, err := json.Marshal(Beat{Time: time.Unix(at, 0)})
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Put(t.Context(), key, v)
		if err != nil {
			t.Fatal(err)
		}
		return entry{key: key, value: v, rev: rev, created: time.Now()}
	}
	h1 := put("h1", 1)
	put("h2", 2)
	tr.apply(h1) // the watcher, played by the test
	type answer struct {
		beats map[string]Beat
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		b, err := tr.Beats(t.Context())
		done <- answer{b, err}
	}()
	waiting := func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.awaiting
	}
	wait.For(t, 10*time.Second, "Beats waits for revision 2", waiting)
	h3 := put("h3", 3)
	h2 := put("h2", 4)
	tr.apply(h3) // revision 2 is gone: the watcher passes over it
	// Beats answers at revision 3, or waits again, for revision 4.
	var got answer
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for answered := false; !answered; {
		select {
		case got = <-done:
			answered = true
		case <-tick.C:
			if waiting() {
				tr.apply(h2)
				got, answered = <-done, true
			}
		case <-deadline:
			t.Fatal("Beats neither answered nor waited again within 10 s")
		}
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	if b, ok := got.beats["h2"]; !ok || !b.WrittenAt().Equal(time.Unix(4, 0)) {
		t.Fatalf("h2, stored before the call: present %v, written at %v; want its beat at 4 (%d beats)", ok, b.WrittenAt(), len(got.beats))
	}
}

// track starts a tracker of the bucket, stopped when the test ends.
func track(t *testing.T, js jetstream.JetStream) *Tracker {
	t.Helper()
	tr, err := Track(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Stop(); err != nil {
			t.Error(err)
		}
	})
	return tr
}

// playedTracker returns a bucket on a server of its own and a tracker of
// it whose watcher the test plays: it has loaded its initial values (none)
// and applies only what the test gives it (apply).
func playedTracker(t *testing.T) (*Tracker, jetstream.KeyValue, jetstream.JetStream) {
	t.Helper()
	nc, js := natstest.Connect(t, natstest.Start(t))
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), streamName)
	if err != nil {
		t.Fatal(err)
	}
	loaded := make(chan struct{})
	close(loaded)
	return &Tracker{stream: st, nc: nc, ctx: t.Context(), loaded: loaded, beats: map[string]Beat{}, changed: make(chan struct{})}, kv, js
}

// setUp creates the bucket, as `tether migrate` does, and opens it.
func setUp(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	if err := Setup(ctx, js, 1); err != nil {
		return nil, err
	}
	return Open(ctx, js)
}

// A tracker keeps each beat as stored and decodes it only when its
// inventory or time is asked for, once for every copy, from any goroutine.
func TestTrackerDecodesBeatsWhenUsed(t *testing.T) {
	tr := &Tracker{beats: map[string]Beat{}, changed: make(chan struct{})}
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	v, err := json.Marshal(Beat{Time: at, Inventory: &Inventory{Servers: []Server{{Name: "fleets/a/gameServers/gs-1", Pid: 7}}, Queued: 2}})
	if err != nil {
		t.Fatal(err)
	}
	tr.apply(entry{key: "h1", value: v, rev: 1, created: at.Add(time.Millisecond)})
	b, ok := tr.Latest("h1")
	if !ok || b.stored == nil || b.stored.raw == nil || b.Inventory != nil {
		t.Fatalf("the applied beat was decoded (or lost): ok=%v %+v", ok, b)
	}
	if !b.Stored.Equal(at.Add(time.Millisecond)) {
		t.Fatalf("stored %v", b.Stored)
	}
	var wg sync.WaitGroup
	invs := make([]*Inventory, 8)
	for i := range invs {
		wg.Go(func() { invs[i] = b.Inv() })
	}
	wg.Wait()
	for _, inv := range invs {
		if inv != invs[0] || inv == nil || inv.Queued != 2 || len(inv.Servers) != 1 || inv.Servers[0].Pid != 7 {
			t.Fatalf("inventories %+v: want one shared, decoded", invs)
		}
	}
	if b.stored.raw != nil || !b.WrittenAt().Equal(at) {
		t.Fatalf("after use: raw kept %v, written at %v", b.stored.raw != nil, b.WrittenAt())
	}
	again, _ := tr.Latest("h1")
	if again.Inv() != invs[0] {
		t.Fatal("a second copy of the beat decoded it again")
	}
}

// A tracker is stalled only once the bucket has held a value past the
// revision it applied for stallAfter with nothing applied since: a
// revision it moves past starts the count again, and so does a read
// answered after it moved.
func TestTrackerPendingCountsFromTheFirstValueItMissed(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tr := &Tracker{rev: 5, stallAfter: 2 * time.Second, changed: make(chan struct{}), ctx: ctx, cancel: cancel}
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		rev     uint64 // what the tracker has applied now
		asked   uint64 // what it had when it asked the bucket
		after   time.Duration
		stalled bool
	}{
		{5, 5, 0, false},                       // first found behind: the count starts
		{5, 5, 1999 * time.Millisecond, false}, // not yet
		{6, 5, 2500 * time.Millisecond, false}, // it applied one while the read was out
		{6, 6, 3 * time.Second, false},         // behind at 6: the count starts again
		{6, 6, 4 * time.Second, false},
		{6, 6, 5 * time.Second, true}, // 2 s at 6 with nothing applied
	}
	for i, s := range steps {
		tr.rev = s.rev
		err := tr.pending(s.asked, at.Add(s.after))
		if got := errors.Is(err, ErrStalled); got != s.stalled {
			t.Fatalf("step %d (applied %d, asked at %d, %s in): %v, want stalled %v", i, s.rev, s.asked, s.after, err, s.stalled)
		}
	}
	if err := tr.Err(); !errors.Is(err, ErrStalled) || !errors.Is(err, ErrWatchEnded) {
		t.Fatalf("the tracker's error after it stalled: %v", err)
	}
	if ctx.Err() == nil {
		t.Fatal("a stalled tracker's watcher was not stopped")
	}
}

// A tracker whose watcher stalls ends with ErrStalled (a new one is
// needed) stallAfter after it first finds a value it has not got, instead
// of waiting until its caller gives up. The stall is real: the watcher's
// consumer is paused on the server.
func TestTrackerWhoseWatcherStallsEnds(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(t.Context(), kv, "h1", Beat{}); err != nil {
		t.Fatal(err)
	}
	tr := track(t, js)
	if _, err := tr.Beats(t.Context()); err != nil {
		t.Fatal(err)
	}
	if paused := natstest.StallConsumers(t, js, streamName); paused != 1 {
		t.Fatalf("paused %d consumers of the bucket, want the tracker's watcher alone", paused)
	}
	if err := Put(t.Context(), kv, "h2", Beat{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got, err := tr.Beats(ctx)
	if !errors.Is(err, ErrStalled) || ctx.Err() != nil {
		t.Fatalf("a stalled watcher's tracker served %+v, %v (its wait: %v)", got, err, ctx.Err())
	}
	if err := tr.Err(); !errors.Is(err, ErrStalled) {
		t.Fatalf("the tracker's error: %v", err)
	}
	select {
	case <-tr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a stalled tracker's watcher still runs 10s later")
	}
	if err := tr.Err(); !errors.Is(err, ErrStalled) {
		t.Fatalf("the tracker's error once done: %v", err)
	}
}

// Beats asks for the bucket's last revision again after a request that got
// no answer, within the caller's deadline, instead of waiting the deadline
// out on the first (a controller pass would then judge no host).
func TestBeatsAsksAgainAfterNoAnswer(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(t.Context(), kv, "h1", Beat{Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tr := track(t, js)
	if err := tr.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	u := &natstest.UnansweredOnce{Stream: tr.stream}
	tr.stream = u // only Beats reads it, and nothing calls Beats yet
	// An attempt is 2 s (jsclient.StreamInfo); one more fits in 5 s.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	beats, err := tr.Beats(ctx)
	if err != nil {
		t.Fatalf("after an unanswered request: %v", err)
	}
	if _, ok := beats["h1"]; !ok || u.InfoCalls() != 2 {
		t.Fatalf("beats %v in %d requests, want h1's in 2", beats, u.InfoCalls())
	}
}
