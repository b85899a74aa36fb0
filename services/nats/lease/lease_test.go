package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/nats/lease"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// contender runs one instance's lease until stop, recording its tenures.
type contender struct {
	l       *lease.Lease
	done    chan error   // Run's error, once it returns
	stopped func() error // stops Run and returns its error (once)
	mu      sync.Mutex
	epochs  []uint64
}

func (c *contender) tenures() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint64(nil), c.epochs...)
}

func (c *contender) leads() bool { held, _ := c.l.Held(); return held }

// start opens the lease for role as id over js and runs it; lead, if
// given, is what the instance does while it holds the lease (default:
// wait for the tenure to end).
func start(t *testing.T, js jetstream.JetStream, id string, lead func(context.Context, uint64) error) *contender {
	t.Helper()
	l, err := lease.Open(t.Context(), js, "role", id, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	c := &contender{l: l, done: make(chan error, 1)}
	c.stopped = sync.OnceValue(func() error { cancel(); return <-c.done })
	go func() {
		c.done <- l.Run(ctx, func(ctx context.Context, epoch uint64) error {
			c.mu.Lock()
			c.epochs = append(c.epochs, epoch)
			c.mu.Unlock()
			if lead != nil {
				return lead(ctx, epoch)
			}
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() {
		// A tenure with work of its own may end Run with its error; the
		// test that gave it checks that error itself.
		if err := c.stopped(); err != nil && lead == nil {
			t.Errorf("%s: Run: %v", id, err)
		}
	})
	return c
}

func setUp(t *testing.T, ttl time.Duration) (*natsembed.Server, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv)
	if err := lease.Setup(t.Context(), js, ttl, 1); err != nil {
		t.Fatal(err)
	}
	return srv, js
}

func TestOpenWithoutSetup(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	_, err := lease.Open(t.Context(), js, "role", "a", nil)
	if !errors.Is(err, jsclient.ErrNotSetUp) {
		t.Fatalf("Open without the bucket: %v, want ErrNotSetUp", err)
	}
}

// One instance holds the lease; when it stops it releases the lease and
// the standby takes over at once: the TTL (a minute here) never runs out
// in this test.
func TestReleasedLeaseIsTakenOverAtOnce(t *testing.T) {
	_, js := setUp(t, time.Minute)
	a := start(t, js, "a", nil)
	wait.For(t, 5*time.Second, "a to hold the lease", a.leads)
	b := start(t, js, "b", nil)
	wait.For(t, 5*time.Second, "b to see who holds the lease", func() bool {
		s, err := b.l.Status()
		return err == nil && s == "standby: the role lease is held by a"
	})
	if b.leads() {
		t.Fatal("both hold the lease")
	}
	if s, err := a.l.Status(); err != nil || !strings.HasPrefix(s, "holds the role lease") {
		t.Fatalf("a's status: %q, %v", s, err)
	}
	if err := a.stopped(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "b to take over from a released lease", b.leads)
	ea, eb := a.tenures(), b.tenures()
	if len(ea) != 1 || len(eb) != 1 || eb[0] <= ea[0] {
		t.Fatalf("epochs a %v, b %v: want one tenure each, b's epoch above a's", ea, eb)
	}
}

// An instance cut off from NATS (nothing released) stops leading, and the
// standby takes over once the TTL has run out, never while the first
// still leads.
func TestCutOffHolderLosesTheLease(t *testing.T) {
	srv, js := setUp(t, time.Second)
	nc, ajs := natstest.Connect(t, srv)
	a := start(t, ajs, "a", nil)
	wait.For(t, 5*time.Second, "a to hold the lease", a.leads)
	b := start(t, js, "b", nil)
	wait.Holds(t, 1500*time.Millisecond, "a to keep the lease while it renews", func() bool { return a.leads() && !b.leads() })

	nc.Close()
	both := false
	wait.For(t, 5*time.Second, "b to take over", func() bool {
		both = both || a.leads() && b.leads()
		return b.leads()
	})
	if both || a.leads() {
		t.Fatal("a still led when b took over")
	}
	if _, err := a.l.Status(); err == nil {
		t.Fatal("a's status has no error while it cannot reach NATS")
	}
}

// A tenure whose work fails ends Run with the error, and the lease is
// released for a standby.
func TestLeadErrorEndsRunAndReleases(t *testing.T) {
	_, js := setUp(t, time.Minute)
	boom := errors.New("boom")
	a := start(t, js, "a", func(context.Context, uint64) error { return boom })
	wait.For(t, 5*time.Second, "a's Run to end", func() bool { return len(a.done) == 1 })
	if err := a.stopped(); !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want the tenure's error", err)
	}
	b := start(t, js, "b", nil)
	wait.For(t, 5*time.Second, "b to take the released lease", b.leads)
}

// A lost lease ends the tenure's context; a lease taken over is not ours
// to release, so the new holder keeps it.
func TestOverwrittenKeyEndsTheTenure(t *testing.T) {
	_, js := setUp(t, 3*time.Second) // renewed every second
	a := start(t, js, "a", nil)
	wait.For(t, 5*time.Second, "a to hold the lease", a.leads)
	kv, err := js.KeyValue(t.Context(), lease.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "role", []byte("intruder")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a to lose the lease", func() bool { return !a.leads() })
	if err := a.stopped(); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), "role")
	if err != nil || string(e.Value()) != "intruder" {
		t.Fatalf("the key after a stopped: %v, %v; want the intruder's", e, err)
	}
}
