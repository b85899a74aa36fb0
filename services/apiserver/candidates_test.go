package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/nats/replicas"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// lagViews serves a fixed READY list, best first, as views that have not
// caught up with this replica's allocations.
type lagViews struct {
	mu   sync.Mutex
	rows []projections.Row[*eventsv1.GameServerState]
}

func (v *lagViews) AllocationCandidates(_ context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.rows[:min(q.Limit, len(v.rows))]), nil // the pool edits what it gets
}

// set makes the views show rows, every one at sequence seq.
func (v *lagViews) set(rows []projections.Row[*eventsv1.GameServerState], seq uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range rows {
		rows[i].Sequence = seq
	}
	v.rows = rows
}

func readyRows(n int) []projections.Row[*eventsv1.GameServerState] {
	out := make([]projections.Row[*eventsv1.GameServerState], n)
	for i := range out {
		out[i] = projections.Row[*eventsv1.GameServerState]{State: &eventsv1.GameServerState{
			Name: fmt.Sprintf("fleets/f/gameServers/gs-%04d", i), Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY,
		}, Sequence: 1}
	}
	return out
}

// Every server is handed out once, and only when the views (read past
// everything this replica claimed) show none unclaimed does take say so,
// even though the lagging views keep listing the claimed ones first.
func TestCandidatePoolLooksPastItsClaims(t *testing.T) {
	const n = candidateFetch + 300
	views := &lagViews{rows: readyRows(n)}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := newCandidatePool(views, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	seen := map[string]bool{}
	for i := range n {
		row, ok, err := p.take(context.Background(), projections.AllocationQuery{Fleet: "fleets/f"})
		if err != nil || !ok {
			t.Fatalf("take %d: ok=%v err=%v", i, ok, err)
		}
		if seen[row.State.GetName()] {
			t.Fatalf("take %d: %s handed out twice", i, row.State.GetName())
		}
		seen[row.State.GetName()] = true
	}
	if _, ok, err := p.take(context.Background(), projections.AllocationQuery{Fleet: "fleets/f"}); ok || err != nil {
		t.Fatalf("take past the end: ok=%v err=%v, want none", ok, err)
	}
	// Claims end: the servers the views still show READY come back.
	now = now.Add(claimTTL)
	if _, ok, _ := p.take(context.Background(), projections.AllocationQuery{Fleet: "fleets/f"}); !ok {
		t.Fatal("after claimTTL a server the views show READY must be handed out again")
	}
}

// A released server is handed out again at once.
func TestCandidatePoolRelease(t *testing.T) {
	views := &lagViews{rows: readyRows(1)}
	p := newCandidatePool(views, time.Now, slog.New(slog.DiscardHandler))
	row, ok, _ := p.take(context.Background(), projections.AllocationQuery{})
	if !ok {
		t.Fatal("no server")
	}
	if _, ok, _ := p.take(context.Background(), projections.AllocationQuery{}); ok {
		t.Fatal("a claimed server was handed out twice")
	}
	p.release(row.State.GetName())
	if again, ok, _ := p.take(context.Background(), projections.AllocationQuery{}); !ok || again.State.GetName() != row.State.GetName() {
		t.Fatalf("released server not handed out again: %v %v", ok, again.State.GetName())
	}
}

// A claim holds only until the views show the server past the sequence
// this replica stored: a server READY again after its match is handed out
// at once, not claimTTL later, while the rows from before the allocation
// are not.
func TestCandidatePoolClaimEndsWhenTheViewsMoveOn(t *testing.T) {
	views := &lagViews{rows: readyRows(1)}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := newCandidatePool(views, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	q := projections.AllocationQuery{Fleet: "fleets/f"}
	row, ok, err := p.take(context.Background(), q)
	if err != nil || !ok {
		t.Fatalf("take: ok=%v err=%v", ok, err)
	}
	p.settle(row.State.GetName(), 5) // the allocation is stored at 5
	for _, seq := range []uint64{1, 5} {
		views.set(readyRows(1), seq)
		now = now.Add(candidateTTL) // the list is read again
		if got, ok, _ := p.take(context.Background(), q); ok {
			t.Fatalf("the views at sequence %d (not past the allocation) handed out %s", seq, got.State.GetName())
		}
	}
	views.set(readyRows(1), 9) // READY again after the match
	now = now.Add(candidateTTL)
	if _, ok, err := p.take(context.Background(), q); !ok || err != nil {
		t.Fatalf("a server the views show READY past its allocation was not handed out: ok=%v err=%v", ok, err)
	}
}

// With a slice of the candidates, a replica hands out every server of its
// slice before any other, then the others rather than none.
func TestCandidatePoolTakesItsSliceFirst(t *testing.T) {
	const n = 40
	views := &lagViews{rows: readyRows(n)}
	p := newCandidatePool(views, time.Now, slog.New(slog.DiscardHandler))
	sl := replicas.Slice{Index: 1, Count: 2}
	p.sliceOf(func() replicas.Slice { return sl })
	inSlice := 0
	for _, r := range views.rows {
		if sl.Holds(r.State.GetName()) {
			inSlice++
		}
	}
	if inSlice == 0 || inSlice == n {
		t.Fatalf("%d of %d servers in the slice: the test needs both kinds", inSlice, n)
	}
	for i := range n {
		row, ok, err := p.take(context.Background(), projections.AllocationQuery{})
		if err != nil || !ok {
			t.Fatalf("take %d: ok=%v err=%v", i, ok, err)
		}
		if mine := sl.Holds(row.State.GetName()); mine != (i < inSlice) {
			t.Fatalf("take %d handed out %s (in the slice: %v) with %d of the slice's %d taken", i, row.State.GetName(), mine, min(i, inSlice), inSlice)
		}
	}
}

// A list read with as many rows as asked for is partial: the views may
// hold more of this replica's slice beyond it. When the list runs out of
// the slice, the replica reads again (the allocations it made have left
// the views) rather than take a server of another replica's slice, which
// that replica is about to take too: at the end of each round of
// BenchmarkMatchmakerAllocate, two replicas raced for each other's last
// servers. The views here rank every other slice's servers first and show
// this slice's just past the first read's limit.
func TestCandidatePoolReadsAgainBeforeItTakesFromAnotherSlice(t *testing.T) {
	sl := replicas.Slice{Index: 0, Count: 2}
	var mine, others []projections.Row[*eventsv1.GameServerState]
	for _, r := range readyRows(3 * candidateFetch) {
		if sl.Holds(r.State.GetName()) {
			mine = append(mine, r)
		} else {
			others = append(others, r)
		}
	}
	const ahead = 12 // of this slice's servers within the first read
	if len(others) < candidateFetch || len(mine) < 100 {
		t.Fatalf("%d servers in the slice, %d in the other: the test needs more", len(mine), len(others))
	}
	ranked := slices.Concat(others[:candidateFetch-ahead], mine, others[candidateFetch-ahead:])
	views := &slowViews{lagViews: lagViews{rows: ranked}, spend: func(time.Duration) {}}
	p := newCandidatePool(views, time.Now, slog.New(slog.DiscardHandler))
	p.sliceOf(func() replicas.Slice { return sl })
	for i := range 100 {
		row, ok, err := p.take(context.Background(), projections.AllocationQuery{})
		if err != nil || !ok {
			t.Fatalf("take %d: ok=%v err=%v", i, ok, err)
		}
		if !sl.Holds(row.State.GetName()) {
			t.Fatalf("take %d handed out %s, of another slice, while the views held %d of this one's (after %d reads)", i, row.State.GetName(), len(mine)-i, views.reads)
		}
		views.mu.Lock() // the allocation reaches the views: the server is no longer READY there
		views.rows = slices.DeleteFunc(views.rows, func(r projections.Row[*eventsv1.GameServerState]) bool {
			return r.State.GetName() == row.State.GetName()
		})
		views.mu.Unlock()
	}
	if views.reads > 100/ahead+2 {
		t.Fatalf("%d reads for 100 allocations: about one per %d (the slice's servers in each read) was expected", views.reads, ahead)
	}
	// With none of the slice left in the views (the list read last may
	// still show a few), it takes from the other slice, without a read
	// per allocation.
	views.mu.Lock()
	views.rows = slices.DeleteFunc(views.rows, func(r projections.Row[*eventsv1.GameServerState]) bool { return sl.Holds(r.State.GetName()) })
	views.mu.Unlock()
	reads, fromList, stolen := views.reads, 0, 0
	for i := range 40 {
		row, ok, err := p.take(context.Background(), projections.AllocationQuery{})
		switch {
		case err != nil || !ok:
			t.Fatalf("take %d with the slice gone: ok=%v err=%v", i, ok, err)
		case !sl.Holds(row.State.GetName()):
			stolen++
		case stolen > 0 || fromList == ahead:
			t.Fatalf("take %d handed out %s of the slice the views no longer hold", i, row.State.GetName())
		default:
			fromList++
		}
	}
	if stolen < 40-ahead || views.reads > reads+2 {
		t.Fatalf("with the slice gone: %d of 40 from the other slice, %d reads", stolen, views.reads-reads)
	}
}

// slowViews is lagViews whose every read takes cost on the pool's clock,
// and counts the reads.
type slowViews struct {
	lagViews
	spend func(time.Duration) // moves the pool's clock
	cost  time.Duration
	reads int
}

func (v *slowViews) AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	v.spend(v.cost)
	v.mu.Lock()
	v.reads++
	v.mu.Unlock()
	return v.lagViews.AllocationCandidates(ctx, q)
}

// A list is read again after candidateTTL, or after candidateTTLPerRead
// times its last read's length when that is longer (at most
// candidateMaxTTL): a read that ranks 10,000 hosts is not repeated every
// 250 ms for each fleet.
func TestCandidateListsLiveLongerWhenTheirReadsCostMore(t *testing.T) {
	for _, tc := range []struct {
		cost time.Duration
		ttl  time.Duration
	}{
		{cost: time.Millisecond, ttl: candidateTTL},
		{cost: 100 * time.Millisecond, ttl: candidateTTLPerRead * 100 * time.Millisecond},
		{cost: time.Second, ttl: candidateMaxTTL},
	} {
		readAt := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC) // when the first read starts
		now := readAt
		var mu sync.Mutex // the background read moves the clock too
		spend := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		views := &slowViews{lagViews: lagViews{rows: readyRows(candidateFetch)}, spend: spend, cost: tc.cost}
		p := newCandidatePool(views, func() time.Time { mu.Lock(); defer mu.Unlock(); return now }, slog.New(slog.DiscardHandler))
		q := projections.AllocationQuery{Fleet: "fleets/f"}
		take := func() {
			if _, ok, err := p.take(context.Background(), q); !ok || err != nil {
				t.Fatalf("cost %s: take: ok=%v err=%v", tc.cost, ok, err)
			}
		}
		take() // the first read, on the caller's time
		advance := func(d time.Duration) {
			mu.Lock()
			now = readAt.Add(d)
			mu.Unlock()
		}
		advance(tc.ttl - time.Millisecond)
		take()
		views.mu.Lock()
		reads := views.reads
		views.mu.Unlock()
		if reads != 1 {
			t.Fatalf("cost %s: read again %s after the read, before its ttl %s", tc.cost, tc.ttl-time.Millisecond, tc.ttl)
		}
		advance(tc.ttl)
		take() // stale: read again in the background
		wait.For(t, 10*time.Second, fmt.Sprintf("cost %s: a read again at its ttl %s", tc.cost, tc.ttl), func() bool {
			views.mu.Lock()
			defer views.mu.Unlock()
			return views.reads == 2
		})
	}
}
