package replicas

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// failingRewatch is the bucket, whose watches after the first fail: NATS
// away when a stalled watch is made anew.
type failingRewatch struct {
	jetstream.KeyValue
	watches atomic.Int32
}

var errNoWatch = errors.New("no responders")

func (f *failingRewatch) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if f.watches.Add(1) > 1 {
		return nil, errNoWatch
	}
	return f.KeyValue.WatchAll(ctx, opts...)
}

// A replica whose stalled watch cannot be made anew (NATS away) ends Run
// with the error, for its owner to join again later. It used to leave the
// failed watch's nil in place of the stopped one, and the deferred Stop
// crashed the API server (CI: both replicas down in the API-kill
// scenario).
func TestARewatchThatFailsEndsRun(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	ctx := t.Context()
	if err := Setup(ctx, js, 3*time.Second, 1); err != nil { // a write every second: an echo is never that late
		t.Fatal(err)
	}
	m, err := Join(ctx, js, "api-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	kv := &failingRewatch{KeyValue: m.kv}
	m.kv = kv
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	// Stall the watch once it exists: its consumer paused on the server.
	wait.For(t, 10*time.Second, "the watch's consumer, paused", func() bool {
		return natstest.StallConsumers(t, js, "KV_"+Bucket) > 0
	})
	select {
	case err := <-done:
		if !errors.Is(err, errNoWatch) {
			t.Fatalf("Run ended with %v, want the failed watch's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on for 10s with a stalled watch it could not make anew")
	}
	if kv.watches.Load() != 2 {
		t.Fatalf("%d watches, want the first and one more", kv.watches.Load())
	}
}
