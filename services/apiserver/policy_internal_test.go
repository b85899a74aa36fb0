package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// heldFleetViews answers FleetState only when the test lets a read go (a
// token on release), with the fleet as it is then; it counts the reads
// begun.
type heldFleetViews struct {
	viewReader // anything else: not called here
	began      chan struct{}
	release    chan struct{}
	reads      atomic.Int32
	mu         sync.Mutex
	state      *eventsv1.FleetState // nil: no such fleet
}

func (v *heldFleetViews) FleetState(ctx context.Context, name string) (projections.Row[*eventsv1.FleetState], error) {
	v.reads.Add(1)
	v.began <- struct{}{}
	select {
	case <-v.release:
	case <-ctx.Done():
		return projections.Row[*eventsv1.FleetState]{}, ctx.Err()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.state == nil {
		return projections.Row[*eventsv1.FleetState]{}, projections.ErrNotFound
	}
	return projections.Row[*eventsv1.FleetState]{State: v.state, Sequence: 1}, nil
}

func (v *heldFleetViews) set(maxPlayers int32, deleted bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.state = &eventsv1.FleetState{Deleted: deleted, Spec: &eventsv1.FleetSpec{PlayerSessions: &eventsv1.PlayerSessionPolicy{MaxPlayers: maxPlayers}}}
}

// policyService is an allocation service over views, on a clock the test
// moves.
func policyService(t *testing.T, views viewReader, now *atomic.Int64) *allocationService {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &Server{
		opts: Options{Views: views, Now: func() time.Time { return time.Unix(0, now.Load()) }},
		log:  slog.New(slog.DiscardHandler), tracer: tracenoop.NewTracerProvider().Tracer(""),
		policies: map[string]cachedPolicy{}, noticeCtx: ctx,
	}
	return &allocationService{s: s}
}

// A fleet's policy is read once for every caller waiting for it; once
// cached, an older one is served while it is read again (the calls do not
// wait for the views), up to policyMaxStale, past which a call waits for
// the read; a fleet found deleted is NOT_FOUND from then on.
func TestAPolicyReadHoldsNoAllocationThatHasOne(t *testing.T) {
	views := &heldFleetViews{began: make(chan struct{}, 16), release: make(chan struct{}, 16)}
	views.set(8, false)
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC).UnixNano())
	a := policyService(t, views, &now)
	ctx := t.Context()
	const fleet = "fleets/arena"

	type result struct {
		p   *eventsv1.PlayerSessionPolicy
		err error
	}
	call := func() chan result {
		ch := make(chan result, 1)
		go func() {
			p, err := a.policy(ctx, fleet)
			ch <- result{p, err}
		}()
		return ch
	}
	mustGet := func(ch chan result, want int32) {
		t.Helper()
		select {
		case r := <-ch:
			if r.err != nil || r.p.GetMaxPlayers() != want {
				t.Fatalf("policy %v, %v; want max players %d", r.p, r.err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not return")
		}
	}

	// Nothing cached: every caller waits for one read.
	first := []chan result{call(), call(), call()}
	<-views.began
	views.release <- struct{}{}
	for _, ch := range first {
		mustGet(ch, 8)
	}
	if n := views.reads.Load(); n != 1 {
		t.Fatalf("%d reads for three concurrent callers, want 1", n)
	}

	// Past policyTTL: served at once while a read is held.
	views.set(12, false)
	now.Add(int64(2 * policyTTL))
	for range 5 {
		mustGet(call(), 8)
	}
	<-views.began
	if n := views.reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2: one in the background", n)
	}
	views.release <- struct{}{}
	wait.For(t, 10*time.Second, "the background read to reach the cache", func() bool {
		p, err := a.policy(ctx, fleet)
		return err == nil && p.GetMaxPlayers() == 12
	})

	// Past policyMaxStale: the call waits for the read.
	views.set(16, true)
	now.Add(int64(2 * policyMaxStale))
	waiting := call()
	<-views.began
	select {
	case r := <-waiting:
		t.Fatalf("a policy older than policyMaxStale was served without a read: %v, %v", r.p, r.err)
	default:
	}
	views.release <- struct{}{}
	r := <-waiting
	var apiErr *apiError
	if !errors.As(r.err, &apiErr) || apiErr.reason != ReasonNotFound {
		t.Fatalf("deleted fleet: %v, %v; want NOT_FOUND", r.p, r.err)
	}
	s := a.s
	s.policyMu.Lock()
	_, cached := s.policies[fleet]
	s.policyMu.Unlock()
	if cached {
		t.Fatal("a deleted fleet's policy stayed in the cache")
	}
}
