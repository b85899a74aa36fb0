package controller

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/testkit/natsstack"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// A heartbeat tracker whose watcher stays behind the bucket fails the
// passes (no verdict on a stale map) and is replaced after
// beatsBehindPasses of them: the controller decides again on a new
// watcher instead of waiting on the old one for as long as it stays
// behind. The stall is real: the watcher's consumer is paused on the
// server, as a replica that stopped catching up would leave it. The passes
// here are shorter than the tracker takes to call it stalled.
func TestATrackerThatStaysBehindIsReplaced(t *testing.T) {
	c, first, written := stalledTracker(t)

	// The passes on the stalled tracker need not wait the full beatsWait;
	// the reads that must succeed (a new tracker loading the bucket) do.
	c.beatsWait = 500 * time.Millisecond
	for pass := 1; pass <= beatsBehindPasses; pass++ {
		if _, err := c.readBeats(t.Context()); !errors.Is(err, hostbeat.ErrBehind) {
			t.Fatalf("pass %d on a stalled tracker: %v, want it behind", pass, err)
		}
	}
	c.beatsWait = beatsWait
	beats, err := c.readBeats(t.Context())
	if err != nil {
		t.Fatalf("the pass after %d behind: %v", beatsBehindPasses, err)
	}
	if c.beats == first {
		t.Fatal("the tracker that stayed behind was kept")
	}
	if b, ok := beats["h1"]; !ok || !b.WrittenAt().Equal(written) {
		t.Fatalf("h1's beat written at %s (found %v), want the one written at %s", b.WrittenAt(), ok, written)
	}
}

// A tracker whose watcher stalls (after a NATS restart took its consumer,
// the client library makes it anew only after two missed heartbeats, 10 s)
// is replaced within the pass that finds it stalled, and the pass decides
// on the new one: one pass of beatsWait, not beatsBehindPasses failed
// passes and another. In the cluster test's NATS restart the controller
// decided nothing for 14 s so.
func TestAStalledTrackerIsReplacedWithinThePass(t *testing.T) {
	c, first, written := stalledTracker(t)
	beats, err := c.readBeats(t.Context())
	if err != nil {
		t.Fatalf("the pass on a stalled tracker: %v", err)
	}
	if c.beats == first {
		t.Fatal("the stalled tracker was kept")
	}
	if err := first.Err(); !errors.Is(err, hostbeat.ErrStalled) {
		t.Fatalf("the replaced tracker ended with %v, want it stalled", err)
	}
	if b, ok := beats["h1"]; !ok || !b.WrittenAt().Equal(written) {
		t.Fatalf("h1's beat written at %s (found %v), want the one written at %s", b.WrittenAt(), ok, written)
	}
}

// stalledTracker returns a controller whose heartbeat tracker has read
// h1's first beat and whose watcher's consumer is then paused on the
// server, and the time in h1's next beat, stored since: the tracker must
// reach it, and cannot.
func stalledTracker(t *testing.T) (c *Controller, first *hostbeat.Tracker, written time.Time) {
	t.Helper()
	ctx := t.Context()
	js := natsstack.Start(t, natsstack.Options{}).JS
	kv, err := js.KeyValue(ctx, hostbeat.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := hostbeat.Put(ctx, kv, "h1", hostbeat.Beat{Time: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	c = &Controller{opts: Options{JetStream: js}, log: slog.New(slog.DiscardHandler), beatsWait: beatsWait}
	t.Cleanup(c.stopBeats)
	if _, err := c.readBeats(ctx); err != nil {
		t.Fatalf("first read: %v", err)
	}
	if paused := natstest.StallConsumers(t, js, "KV_"+hostbeat.Bucket); paused != 1 {
		t.Fatalf("paused %d consumers of the bucket, want the tracker's watcher alone", paused)
	}
	written = time.Unix(2, 0)
	if err := hostbeat.Put(ctx, kv, "h1", hostbeat.Beat{Time: written}); err != nil {
		t.Fatal(err)
	}
	return c, c.beats, written
}
