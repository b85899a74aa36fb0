package controller

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/nats/hostbeat"
	kit "github.com/tetherhq/tether/services/testkit/stack"
)

// A heartbeat tracker whose watcher stays behind the bucket fails the
// passes (no verdict on a stale map) and is replaced after
// beatsBehindPasses of them: the controller decides again on a new
// watcher instead of waiting on the old one for as long as it stays
// behind. The stall is real: the watcher's consumer is paused on the
// server, as a replica that stopped catching up would leave it.
func TestATrackerThatStaysBehindIsReplaced(t *testing.T) {
	ctx := t.Context()
	js := kit.New(t).JS
	kv, err := js.KeyValue(ctx, hostbeat.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := hostbeat.Put(ctx, kv, "h1", hostbeat.Beat{Time: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	c := &Controller{opts: Options{JetStream: js}, log: slog.New(slog.DiscardHandler), beatsWait: beatsWait}
	t.Cleanup(c.stopBeats)
	if _, err := c.readBeats(ctx); err != nil {
		t.Fatalf("first read: %v", err)
	}
	first := c.beats

	// Stall the tracker's watcher, then beat again: the tracker must
	// reach the new beat, and cannot.
	stream, err := js.Stream(ctx, "KV_"+hostbeat.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	paused := 0
	for name := range stream.ConsumerNames(ctx).Name() {
		if _, err := stream.PauseConsumer(ctx, name, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		paused++
	}
	if paused != 1 {
		t.Fatalf("paused %d consumers of the bucket, want the tracker's watcher alone", paused)
	}
	written := time.Unix(2, 0)
	if err := hostbeat.Put(ctx, kv, "h1", hostbeat.Beat{Time: written}); err != nil {
		t.Fatal(err)
	}

	// The passes on the stalled tracker need not wait the full beatsWait;
	// the reads that must succeed (a new tracker loading the bucket) do.
	c.beatsWait = 500 * time.Millisecond
	for pass := 1; pass <= beatsBehindPasses; pass++ {
		if _, err := c.readBeats(ctx); !errors.Is(err, hostbeat.ErrBehind) {
			t.Fatalf("pass %d on a stalled tracker: %v, want it behind", pass, err)
		}
	}
	c.beatsWait = beatsWait
	beats, err := c.readBeats(ctx)
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
