package replicas_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/nats/replicas"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// run starts m.Run until the returned stop is called (or the test ends).
func run(t *testing.T, m *replicas.Member) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// Two replicas split the candidates between them; one that stops gives its
// slice back at once, and one that goes silent (a crash) after the TTL.
func TestReplicasSliceTheCandidates(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	ctx := context.Background()
	const ttl = time.Second
	if err := replicas.Setup(ctx, js, ttl, 1); err != nil {
		t.Fatal(err)
	}
	a, err := replicas.Join(ctx, js, "api-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := replicas.Join(ctx, js, "api-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Slice() != replicas.Whole {
		t.Fatalf("before Run: %+v, want the whole", a.Slice())
	}
	stopA := run(t, a)
	run(t, b)
	wait.For(t, 10*time.Second, "both replicas see two", func() bool {
		return a.Slice().Count == 2 && b.Slice().Count == 2
	})
	if a.Slice().Index == b.Slice().Index {
		t.Fatalf("both replicas took slice %d", a.Slice().Index)
	}
	// Every server is in exactly one of the two slices.
	for i := range 1000 {
		name := fmt.Sprintf("fleets/f/gameServers/gs-%04d", i)
		if a.Slice().Holds(name) == b.Slice().Holds(name) {
			t.Fatalf("%s: in a's slice %v, in b's %v", name, a.Slice().Holds(name), b.Slice().Holds(name))
		}
	}

	stopA()
	wait.For(t, 10*time.Second, "b alone once a stopped", func() bool { return b.Slice() == replicas.Whole })

	// A replica that wrote its key once and went silent.
	kv, err := js.KeyValue(ctx, replicas.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	// b dates the key when it arrives, after put; it may drop it a TTL
	// after that, never sooner, however late this test looks.
	put := time.Now()
	if _, err := kv.PutString(ctx, "api-crashed", "api-crashed"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "b sees the replica that is to crash", func() bool { return b.Slice().Count == 2 })
	wait.For(t, 10*time.Second, "b ages out the silent replica", func() bool { return b.Slice() == replicas.Whole })
	if d := time.Since(put); d <= ttl {
		t.Fatalf("a silent replica was dropped %v after its last write, within its TTL %v", d, ttl)
	}
}

// Joining needs the bucket `tether migrate` creates.
func TestJoinWithoutTheBucket(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	if _, err := replicas.Join(context.Background(), js, "api-a", nil); err == nil {
		t.Fatal("joined a bucket that does not exist")
	}
}

// Slot spreads servers over the slices.
func TestSlotSpreads(t *testing.T) {
	counts := make([]int, 3)
	for i := range 3000 {
		counts[replicas.Slot(fmt.Sprintf("fleets/f/gameServers/gs-%05d", i), 3)]++
	}
	for i, n := range counts {
		if n < 800 || n > 1200 {
			t.Fatalf("slot %d holds %d of 3000 servers: %v", i, n, counts)
		}
	}
}

// A replica whose watch stalls (its consumer lost with a NATS server; here
// paused on the server) watches anew once its own write has not come back
// by the next one, and sees a replica that joined meanwhile. Without that
// it would hear from no other replica until the client library made the
// consumer anew, and take the whole in the meantime.
func TestAReplicaWhoseWatchStallsWatchesAnew(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	ctx := context.Background()
	if err := replicas.Setup(ctx, js, time.Second, 1); err != nil {
		t.Fatal(err)
	}
	join := func(id string) *replicas.Member {
		m, err := replicas.Join(ctx, js, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		run(t, m)
		return m
	}
	a, b := join("api-a"), join("api-b")
	wait.For(t, 10*time.Second, "both replicas see two", func() bool {
		return a.Slice().Count == 2 && b.Slice().Count == 2
	})
	if paused := natstest.StallConsumers(t, js, "KV_"+replicas.Bucket); paused != 2 {
		t.Fatalf("paused %d watches, want both replicas'", paused)
	}
	c := join("api-c")
	wait.For(t, 10*time.Second, "every replica to see three", func() bool {
		return a.Slice().Count == 3 && b.Slice().Count == 3 && c.Slice().Count == 3
	})
}
