package projector_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/projector"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// instance is a running projector service.
type instance struct {
	*projector.Service
	stop func() error // cancels its Run and returns Run's error
}

func start(t *testing.T, s *kit.Stack, id string) *instance {
	t.Helper()
	svc, err := projector.New(projector.Options{ID: id, Logger: s.Logger,
		Projector: postgres.ProjectorOptions{Pool: s.Pool, JetStream: s.JS, BatchSize: 5}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.Ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("projector %s: %v", id, err)
		}
	})
	return &instance{Service: svc, stop: stop}
}

// appendFleets appends n fleet creations.
func appendFleets(t *testing.T, s *kit.Stack, prefix string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := range n {
		name := fmt.Sprintf("fleets/%s-%d", prefix, i)
		seq, err := s.Store.Append(s.Ctx, events.MustSubject(name), 0, events.New(name, time.Now(), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	return last
}

// checkpoint reads the views' checkpoint and its fence.
func checkpoint(t *testing.T, s *kit.Stack) (seq, fence uint64) {
	t.Helper()
	if err := s.Pool.QueryRow(s.Ctx, `SELECT coalesce(max(sequence), 0), coalesce(max(fence), 0) FROM projector_checkpoints`).Scan(&seq, &fence); err != nil {
		t.Fatal(err)
	}
	return seq, fence
}

// active waits until exactly one of is holds the lease and returns it.
func active(t *testing.T, is ...*instance) (*instance, *instance) {
	t.Helper()
	wait.For(t, 10*time.Second, "one active projector", func() bool { return is[0].IsActive() != is[1].IsActive() })
	if is[0].IsActive() {
		return is[0], is[1]
	}
	return is[1], is[0]
}

// Two instances: one projects, the other stands by and writes nothing; when
// the active one stops it releases the lease, and the standby resumes from
// the checkpoint at once (the lease TTL, a minute, never runs out here).
// Every event is applied once: the views equal a replay.
func TestStandbyResumesFromTheCheckpoint(t *testing.T) {
	s := kit.New(t, kit.WithPostgres(), kit.WithLeaseTTL(time.Minute))
	a, b := start(t, s, "proj-a"), start(t, s, "proj-b")
	first, standby := active(t, a, b)
	// The standby may still be opening the lease when the other holds it
	// (readiness says "starting" until then): it becomes ready, standing by.
	wait.Until(t, 10*time.Second, "the standby to be ready", standby.Ready)
	last := appendFleets(t, s, "one", 20)
	wait.For(t, 10*time.Second, "the views to catch up", func() bool { seq, _ := checkpoint(t, s); return seq == last })
	_, fenceOne := checkpoint(t, s)
	if fenceOne == 0 {
		t.Fatal("the active projector wrote no lease epoch with its checkpoint")
	}
	if standby.Projector().Checkpoint() != 0 {
		t.Fatalf("the standby applied events up to %d", standby.Projector().Checkpoint())
	}

	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "the standby to take over", standby.IsActive)
	last = appendFleets(t, s, "two", 20)
	wait.For(t, 10*time.Second, "the new active projector to catch up", func() bool { seq, _ := checkpoint(t, s); return seq == last })
	if _, fenceTwo := checkpoint(t, s); fenceTwo <= fenceOne {
		t.Fatalf("fence %d after the takeover, %d before: want it to grow", fenceTwo, fenceOne)
	}
	rep, err := postgres.Check(s.Ctx, postgres.ReplayOptions{Pool: s.Pool, JetStream: s.JS})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 || rep.Sequence != last {
		t.Fatalf("views differ from a replay at %d: %+v", rep.Sequence, rep.Differences)
	}
}

// A projector whose lease epoch is older than the checkpoint's (it lost the
// lease during a long pause and does not know it yet) cannot commit: its
// batch is refused and it stops, leaving the views as its successor left
// them.
func TestAnOlderEpochIsFencedOut(t *testing.T) {
	s := kit.New(t, kit.WithPostgres(), kit.WithLeaseTTL(time.Minute))
	a := start(t, s, "proj-a")
	wait.For(t, 10*time.Second, "a to be active", a.IsActive)
	last := appendFleets(t, s, "one", 3)
	wait.For(t, 10*time.Second, "a to catch up", func() bool { seq, _ := checkpoint(t, s); return seq == last })
	_, old := checkpoint(t, s)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	b := start(t, s, "proj-b")
	wait.For(t, 10*time.Second, "b to be active", b.IsActive)
	last = appendFleets(t, s, "two", 3)
	wait.For(t, 10*time.Second, "b to catch up", func() bool { seq, _ := checkpoint(t, s); return seq == last })
	_, epoch := checkpoint(t, s)
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	if epoch <= old {
		t.Fatalf("b's epoch %d is not above a's %d", epoch, old)
	}

	stale, err := postgres.NewProjector(postgres.ProjectorOptions{Pool: s.Pool, JetStream: s.JS, Logger: s.Logger})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- stale.RunFenced(s.Ctx, old) }()
	appendFleets(t, s, "three", 1)
	select {
	case err := <-done:
		if !errors.Is(err, postgres.ErrFenced) {
			t.Fatalf("RunFenced with an older epoch: %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a projector with an older epoch kept running")
	}
	if seq, fence := checkpoint(t, s); seq != last || fence != epoch {
		t.Fatalf("checkpoint %d fence %d after the fenced batch, want %d and %d", seq, fence, last, epoch)
	}
}

// A projector whose consumer is deleted under it (by credentials that may
// delete it: an admin's, or before issue 39 the API's) makes it anew from
// its checkpoint and goes on applying the events stored after, within
// seconds, ready again. Before, it waited for deliveries that never came,
// for over a minute, and said it was ready.
func TestAProjectorWhoseConsumerIsDeletedMakesItAnew(t *testing.T) {
	s := kit.New(t, kit.WithPostgres(), kit.WithLeaseTTL(time.Minute))
	a := start(t, s, "proj-a")
	wait.For(t, 10*time.Second, "a to be active", a.IsActive)
	last := appendFleets(t, s, "one", 5)
	wait.For(t, 10*time.Second, "a to catch up", func() bool { seq, _ := checkpoint(t, s); return seq == last })
	stream, err := s.JS.Stream(s.Ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if err := stream.DeleteConsumer(s.Ctx, "tether-projector"); err != nil {
			t.Fatalf("round %d: delete the projector's consumer: %v", round, err)
		}
		last = appendFleets(t, s, fmt.Sprintf("after-delete-%d", round), 5)
		wait.For(t, 15*time.Second, "the projector to apply the events stored after its consumer was deleted", func() bool {
			seq, _ := checkpoint(t, s)
			return seq == last
		})
		wait.Until(t, 5*time.Second, "the projector to be ready", a.Ready)
	}
}
