package apiserver

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The API's host beat tracker is replaced when its watcher stalls (its
// consumer lost with a NATS node; here paused on the server), so hosts'
// last beats show current again within a check, not once the client
// library makes the consumer anew.
func TestLiveBeatsReplaceAStalledTracker(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	if err := hostbeat.Setup(t.Context(), js, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := hostbeat.Open(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	put := func(at time.Time) {
		t.Helper()
		if err := hostbeat.Put(t.Context(), kv, "h1", hostbeat.Beat{Time: at}); err != nil {
			t.Fatal(err)
		}
	}
	put(time.Unix(1, 0))
	beats := &liveBeats{} // checking every beatsCheckEvery
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); beats.run(ctx, js, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { cancel(); <-done })
	shown := func(at time.Time) func() bool {
		return func() bool {
			b, ok := beats.beat("h1")
			return ok && b.WrittenAt().Equal(at)
		}
	}
	wait.For(t, 10*time.Second, "h1's first beat shown", shown(time.Unix(1, 0)))
	if n := natstest.StallConsumers(t, js, "KV_"+hostbeat.Bucket); n != 1 {
		t.Fatalf("stalled %d consumers of the bucket, want the tracker's watcher alone", n)
	}
	put(time.Unix(2, 0))
	wait.For(t, 10*time.Second, "h1's second beat shown", shown(time.Unix(2, 0)))
}
