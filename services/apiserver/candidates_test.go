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
