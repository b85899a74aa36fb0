package apiserver

import (
	"context"
	"encoding/json"
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
	// A clock that stands still: no list goes stale and is read again in
	// the background, however slowly the takes run.
	still := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	p := newCandidatePool(views, func() time.Time { return still }, slog.New(slog.DiscardHandler))
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
		t.Fatalf("%d reads for 100 allocations: at most one per %d (the slice's servers in the first read; later reads are larger) was expected", views.reads, ahead)
	}
	// With none of the slice left in the views (the list read last may
	// still show some: more as its reads grew), it takes from the other
	// slice, without a read per allocation.
	views.mu.Lock()
	views.rows = slices.DeleteFunc(views.rows, func(r projections.Row[*eventsv1.GameServerState]) bool { return sl.Holds(r.State.GetName()) })
	views.mu.Unlock()
	inList := 0
	p.mu.Lock()
	for _, l := range p.lists {
		for _, r := range l.rows {
			if sl.Holds(r.State.GetName()) {
				inList++
			}
		}
	}
	p.mu.Unlock()
	reads, fromList, stolen := views.reads, 0, 0
	for i := range inList + 40 {
		row, ok, err := p.take(context.Background(), projections.AllocationQuery{})
		switch {
		case err != nil || !ok:
			t.Fatalf("take %d with the slice gone: ok=%v err=%v", i, ok, err)
		case !sl.Holds(row.State.GetName()):
			stolen++
		case stolen > 0 || fromList == inList:
			t.Fatalf("take %d handed out %s of the slice the views no longer hold", i, row.State.GetName())
		default:
			fromList++
		}
	}
	if stolen != 40 || views.reads > reads+2 {
		t.Fatalf("with the slice gone: %d of the last 40 from the other slice (%d from the list read before), %d reads", stolen, fromList, views.reads-reads)
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

// gatedViews is lagViews whose first read costs cost on the pool's clock
// and whose later reads wait for the test to release them: a read the
// pool starts in the background stays in flight.
type gatedViews struct {
	lagViews
	spend   func(time.Duration)
	cost    time.Duration
	release chan struct{}
	reads   int
}

// must returns v, panicking on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func (v *gatedViews) AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	v.mu.Lock()
	v.reads++
	first := v.reads == 1
	v.mu.Unlock()
	if !first {
		select {
		case <-v.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	v.spend(v.cost)
	return v.lagViews.AllocationCandidates(ctx, q)
}

// A list whose read takes long is read again in the background before it
// runs out, when what is left would last less than two of its reads at
// the rate it is being taken: its callers do not all wait for the read
// at once (the p99 of BenchmarkAllocate). A list read quickly is read
// when it is empty, or stale, as before.
func TestACandidateListRunningOutIsReadAhead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cost      time.Duration
		sliced    bool // the replica's slice is half the servers
		readAhead bool
	}{
		{"a read of 20 ms", 20 * time.Millisecond, false, true},
		{"a read under readAheadBelow", readAheadBelow / 2, false, false},
		{"a replica's slice of a read of 20 ms", 20 * time.Millisecond, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
			var mu sync.Mutex
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
			views := &gatedViews{lagViews: lagViews{rows: readyRows(2 * candidateFetch)}, spend: advance, cost: tc.cost,
				release: make(chan struct{})}
			defer close(views.release)
			p := newCandidatePool(views, clock, slog.New(slog.DiscardHandler))
			q := projections.AllocationQuery{Fleet: "fleets/f"}
			supply := candidateFetch // servers of the list's first read this replica takes
			if tc.sliced {
				sl := replicas.Slice{Index: 0, Count: 2}
				p.sliceOf(func() replicas.Slice { return sl })
				supply = 0
				for _, r := range views.rows[:candidateFetch] {
					if sl.Holds(r.State.GetName()) {
						supply++
					}
				}
			}
			// 5 takes a millisecond: the 512 servers read last 102 ms, well
			// inside the list's ttl (20 × 20 ms); two reads are 40 ms.
			readAt := 0
			for i := range supply - 1 {
				if _, ok, err := p.take(context.Background(), q); !ok || err != nil {
					t.Fatalf("take %d: ok=%v err=%v", i, ok, err)
				}
				p.mu.Lock() // the take that starts a read, whenever its goroutine runs
				reading := p.lists[string(must(json.Marshal(q)))].refreshing != nil
				p.mu.Unlock()
				if reading && readAt == 0 {
					readAt = i + 1
				}
				advance(200 * time.Microsecond)
			}
			switch {
			case tc.readAhead && readAt == 0:
				t.Fatalf("%d of %d servers taken at 5 a millisecond, and the list was not read again", supply-1, supply)
			case tc.readAhead && tc.sliced:
				// Left: supply - n, under 40 ms at once; the read waits a
				// read's length (20 ms, 100 takes) after the first.
				t.Logf("read again in the background after %d of the slice's %d takes", readAt, supply)
				if readAt < 100 || readAt > 110 {
					t.Errorf("read again after %d takes; about 100 wanted (a read's length after the first)", readAt)
				}
			case tc.readAhead:
				// Left: 512 - n servers, lasting (512 - n) / 5 ms: under
				// 40 ms once n > 312.
				t.Logf("read again in the background after %d takes", readAt)
				if readAt < 300 || readAt > 330 {
					t.Errorf("read again after %d takes; about 313 wanted (what is left lasts two reads)", readAt)
				}
			case readAt != 0:
				t.Errorf("a list read in %s was read again after %d takes, before it ran out or went stale", tc.cost, readAt)
			}
		})
	}
}

// limitViews serves READY rows, best first, but those allocated, and
// records how many rows each read asks for.
type limitViews struct {
	lagViews
	gone   map[string]bool // allocated: no longer READY in the views
	limits []int
}

func (v *limitViews) AllocationCandidates(_ context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.limits = append(v.limits, q.Limit)
	var out []projections.Row[*eventsv1.GameServerState]
	for _, r := range v.rows {
		if len(out) == q.Limit {
			break
		}
		if !v.gone[r.State.GetName()] {
			out = append(out, r)
		}
	}
	return out, nil
}

func (v *limitViews) asked() []int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.limits)
}

// A list taken up before it goes stale asks for twice as many rows at its
// next read, up to candidateFetchMax: fewer reads, each of which ranks
// every READY server of the fleet, at thousands of allocations a second.
// One read again at its ttl mostly untaken asks for half as many, down
// to candidateFetch: a quiet fleet's list holds little.
func TestACandidateListTakenFastReadsMore(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	views := &limitViews{lagViews: lagViews{rows: readyRows(4*candidateFetchMax + candidateFetch)}, gone: map[string]bool{}}
	p := newCandidatePool(views, clock, slog.New(slog.DiscardHandler))
	q := projections.AllocationQuery{Fleet: "fleets/f"}
	take := func(n int) {
		t.Helper()
		for i := range n {
			row, ok, err := p.take(context.Background(), q)
			if !ok || err != nil {
				t.Fatalf("take %d: ok=%v err=%v", i, ok, err)
			}
			views.mu.Lock() // the allocation reaches the views
			views.gone[row.State.GetName()] = true
			views.mu.Unlock()
			advance(10 * time.Microsecond) // the reads take no time: no read ahead
		}
	}
	// Each list taken whole within its ttl: the next read asks for twice
	// as many, then stays at the most.
	take(candidateFetch + 2*candidateFetch + candidateFetchMax + 1)
	want := []int{candidateFetch, 2 * candidateFetch, candidateFetchMax, candidateFetchMax}
	if got := views.asked(); !slices.Equal(got, want) {
		t.Fatalf("reads asked for %v rows, want %v", got, want)
	}
	// Stale with one taken: half as many, down to the least.
	for range 3 {
		advance(candidateMaxTTL)
		n := len(views.asked())
		take(1) // stale: read again in the background
		wait.For(t, 10*time.Second, "the stale list read again", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.lists[string(must(json.Marshal(q)))].refreshing == nil
		})
		if got := views.asked(); len(got) != n+1 {
			t.Fatalf("reads asked for %v rows: one read wanted", got)
		}
	}
	want = append(want, candidateFetchMax/2, candidateFetch, candidateFetch)
	if got := views.asked(); !slices.Equal(got, want) {
		t.Fatalf("reads asked for %v rows, want %v", got, want)
	}
}

// countedViews counts the reads of the views it wraps.
type countedViews struct {
	*lagViews
	mu    sync.Mutex
	reads int
}

func (v *countedViews) AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	v.mu.Lock()
	v.reads++
	v.mu.Unlock()
	return v.lagViews.AllocationCandidates(ctx, q)
}

func (v *countedViews) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reads
}

// A list whose servers keep turning out taken by another writer (another
// replica allocating them since the list was read) is dropped after
// staleRunLimit of them in a row, and read again, within its ttl: the
// allocation does not spend its attempts on a list gone stale. A server
// allocated from the list in between starts the count again.
func TestAStaleCandidateListIsReadAgain(t *testing.T) {
	views := &countedViews{lagViews: &lagViews{rows: readyRows(200)}}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := newCandidatePool(views, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	q := projections.AllocationQuery{Fleet: "fleets/f"}
	key := must(listKey(q))
	take := func() projections.Row[*eventsv1.GameServerState] {
		t.Helper()
		row, ok, err := p.take(context.Background(), q)
		if err != nil || !ok {
			t.Fatalf("take: ok=%v err=%v", ok, err)
		}
		return row
	}
	take()
	if views.count() != 1 {
		t.Fatalf("%d reads for the first take, want 1", views.count())
	}
	// Another replica allocates every server listed; the views move on.
	fresh := readyRows(400)[200:]
	views.set(fresh, 9)
	for range staleRunLimit - 1 {
		take()
		p.missed(key)
	}
	take()
	p.hit(key) // one allocated: the count starts again
	for range staleRunLimit - 1 {
		take()
		p.missed(key)
	}
	if views.count() != 1 {
		t.Fatalf("%d reads before %d misses in a row, want 1", views.count(), staleRunLimit)
	}
	take()
	p.missed(key)
	row := take()
	if views.count() != 2 || row.Sequence != 9 {
		t.Fatalf("after %d misses in a row: %d reads, took %s at %d; want the views read again",
			staleRunLimit, views.count(), row.State.GetName(), row.Sequence)
	}
}
