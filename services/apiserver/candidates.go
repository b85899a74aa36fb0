package apiserver

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Candidate pool tuning.
const (
	// candidateFetch is how many READY servers one view query returns.
	candidateFetch = 512
	// candidateTTL is how long a fetched list serves before it is read
	// again (servers readied since then are seen after at most this long).
	candidateTTL = 250 * time.Millisecond
	// candidateSpread picks at random among the best few, so that
	// concurrent allocations (and replicas, which read the same views)
	// rarely race for the same server.
	candidateSpread = 16
	// claimTTL keeps a server this replica tried out of its lists until the
	// views show what became of it.
	claimTTL = 5 * time.Second
)

// candidatePool hands out READY game servers to allocations. Reading and
// ranking the views for every allocation would cost more than the
// allocation itself, so each replica keeps short-lived lists per query
// (fleet, selector, scheduling) and takes servers off them. The lists may
// be stale: that is safe, because every allocation is an append guarded by
// the server's sequence, and a stale entry only costs a conflict.
type candidatePool struct {
	views interface {
		AllocationCandidates(ctx context.Context, q postgres.AllocationQuery) ([]postgres.Row[*eventsv1.GameServerState], error)
	}
	now func() time.Time

	mu      sync.Mutex
	lists   map[string]*candidateList
	claimed map[string]time.Time // game server → until when it is not handed out
}

// candidateList is one query's READY servers, best first.
type candidateList struct {
	rows    []postgres.Row[*eventsv1.GameServerState]
	fetched time.Time
}

func newCandidatePool(views interface {
	AllocationCandidates(ctx context.Context, q postgres.AllocationQuery) ([]postgres.Row[*eventsv1.GameServerState], error)
}, now func() time.Time) *candidatePool {
	return &candidatePool{views: views, now: now, lists: map[string]*candidateList{}, claimed: map[string]time.Time{}}
}

// take returns a READY server for q and claims it, or ok=false when the
// views (read afresh) hold none that this replica has not claimed.
func (p *candidatePool) take(ctx context.Context, q postgres.AllocationQuery) (row postgres.Row[*eventsv1.GameServerState], ok bool, err error) {
	key, err := json.Marshal(q)
	if err != nil {
		return row, false, err
	}
	for fresh := false; ; fresh = true {
		p.mu.Lock()
		now := p.now()
		l := p.lists[string(key)]
		if l != nil && now.Sub(l.fetched) < candidateTTL || fresh {
			if row, ok = p.pickLocked(l, now); ok || fresh {
				p.mu.Unlock()
				return row, ok, nil
			}
		}
		exclude := p.claimedLocked(now)
		p.mu.Unlock()

		q.Exclude, q.Limit = exclude, candidateFetch
		rows, err := p.views.AllocationCandidates(ctx, q)
		if err != nil {
			return row, false, err
		}
		p.mu.Lock()
		for k, old := range p.lists {
			if now.Sub(old.fetched) > claimTTL {
				delete(p.lists, k) // a selector nobody asked for lately
			}
		}
		p.lists[string(key)] = &candidateList{rows: rows, fetched: now}
		p.mu.Unlock()
	}
}

// pickLocked takes a random one of the best unclaimed servers of l.
func (p *candidatePool) pickLocked(l *candidateList, now time.Time) (postgres.Row[*eventsv1.GameServerState], bool) {
	if l == nil {
		return postgres.Row[*eventsv1.GameServerState]{}, false
	}
	l.rows = slices.DeleteFunc(l.rows, func(r postgres.Row[*eventsv1.GameServerState]) bool {
		return now.Before(p.claimed[r.State.GetName()])
	})
	if len(l.rows) == 0 {
		return postgres.Row[*eventsv1.GameServerState]{}, false
	}
	i := rand.IntN(min(candidateSpread, len(l.rows)))
	row := l.rows[i]
	l.rows = slices.Delete(l.rows, i, i+1)
	p.claimed[row.State.GetName()] = now.Add(claimTTL)
	return row, true
}

// claimedLocked lists the servers claimed now, forgetting expired claims.
func (p *candidatePool) claimedLocked(now time.Time) []string {
	out := make([]string, 0, len(p.claimed))
	for name, until := range p.claimed {
		if now.Before(until) {
			out = append(out, name)
		} else {
			delete(p.claimed, name)
		}
	}
	return out
}

// release hands a claimed server back at once: the allocation did not take
// it for a reason that says nothing about the server.
func (p *candidatePool) release(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.claimed, name)
}
