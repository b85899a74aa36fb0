package apiserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/nats/replicas"
)

// Candidate pool tuning.
const (
	// candidateFetch is how many READY servers a list's first view query
	// returns; a list taken fast reads more next time, up to
	// candidateFetchMax, and one that goes stale mostly untaken reads fewer
	// again (candidateList.nextLimit). A list holds at most the larger,
	// but for a read that looks past this replica's claims (takeFresh).
	candidateFetch    = 512
	candidateFetchMax = 2048
	// candidateTTL is how long a fetched list serves before it is read
	// again (servers readied since then are seen after at most this long),
	// or candidateTTLPerRead times as long as its last read took if that is
	// longer, at most candidateMaxTTL: at 100,000 servers one read ranks
	// thousands of hosts (100 ms or more), and reading every 250 ms for
	// each fleet allocated from would take the database's every core. A
	// list read in the background a twentieth of the time at most, and
	// seeing new READY servers a few seconds late, is the trade.
	candidateTTL        = 250 * time.Millisecond
	candidateTTLPerRead = 20
	candidateMaxTTL     = 4 * time.Second
	// readAheadBelow: a list whose read takes at least this long is read
	// again in the background before it runs out, when what is left of
	// this replica's slice would last less than readAheadReads of its
	// reads at the rate it is being taken; a shorter read is waited for
	// when the list is empty. Without it every caller of the replica
	// waited for the read at once when its slice ran out: with 10,000
	// READY servers, 16 calls every 50-100 ms for a 20-30 ms read, the
	// whole of the allocation p99 (docs/benchmarks.md).
	readAheadBelow = time.Millisecond
	readAheadReads = 2
	// candidateSpread picks at random among the best few, so that
	// concurrent allocations (and replicas, which read the same views)
	// rarely race for the same server.
	candidateSpread = 64
	// claimTTL bounds how long a claim holds a server out of this
	// replica's lists when the views never show it past the claimed
	// sequence (a server deleted meanwhile): the claim is then forgotten.
	claimTTL = 5 * time.Second
	// staleRunLimit: a list that handed out this many servers in a row
	// that another writer had taken since it was read is dropped, and the
	// next take reads the views afresh. A replica that ran out of its own
	// slice takes from another's list, read up to a few seconds before,
	// whose servers that replica is allocating meanwhile: one call lost
	// all its 256 attempts to them, at the end of 10,000 allocations
	// over 2 replicas (1 bench run in 10), answered ABORTED.
	staleRunLimit = 16
)

// candidatePool hands out READY game servers to allocations. Reading and
// ranking the views for every allocation would cost more than the
// allocation itself, so each replica keeps short-lived lists per query
// (fleet, selector, scheduling) and takes servers off them. The lists may
// be stale: that is safe, because every allocation is an append guarded by
// the server's sequence, and a stale entry only costs a conflict.
type candidatePool struct {
	views interface {
		AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error)
	}
	now func() time.Time
	log *slog.Logger
	// slice is this replica's share of the candidates among the live
	// replicas (services/nats/replicas); nil: the whole.
	slice atomic.Pointer[func() replicas.Slice]

	mu      sync.Mutex
	lists   map[string]*candidateList
	claimed map[string]claim // game server → what keeps it from being handed out
}

// claim keeps a server this replica tried out of its lists until the views
// show it past seq: the sequence it was tried at, or the sequence of this
// replica's allocation once that is stored. A row at seq or before is what
// this replica has already acted on; a later one shows what became of the
// server (ALLOCATED, so no longer a candidate, or READY again after its
// match). A 5-second hold regardless of the views capped how often a
// replica could reuse a server: 120 allocations/s from a 600-server pool.
type claim struct {
	seq   uint64
	until time.Time // claimTTL after the claim: forgotten then, whatever the views show
	// known is the server as this replica's allocation into it left it,
	// room to spare (put), until the views show it: the lists whose query
	// it matches keep it although the views they read do not show it yet.
	known *projections.Row[*eventsv1.GameServerState]
}

// holds reports whether c keeps row r from being handed out at now.
func (c claim) holds(r projections.Row[*eventsv1.GameServerState], now time.Time) bool {
	return now.Before(c.until) && r.Sequence <= c.seq
}

// candidateList is one query's READY servers, best first.
type candidateList struct {
	rows    []projections.Row[*eventsv1.GameServerState]
	fetched time.Time
	took    time.Duration // how long the last read took
	used    time.Time     // when an allocation last asked for it
	// partial says the read returned as many rows as it asked for: the
	// views may hold READY servers of this replica's slice that the list
	// does not.
	partial bool
	// stealing says a pick since the last read found none of the slice
	// in the list just read, and took from another's: the next picks do
	// too, rather than read again for each.
	stealing   bool
	refreshing chan struct{} // closed when the read in flight ends; nil if none
	// sliceRead and sliceLeft are the rows of this replica's slice the
	// last read brought, unclaimed, and how many of them are not taken yet.
	sliceRead, sliceLeft int
	// limit is how many rows the next read asks for; 0: candidateFetch.
	limit int
	// staleRun counts the servers handed out in a row since the last
	// allocation from the list that another writer had taken (missed).
	staleRun int
	// q is the list's query. One that ranks servers by their room
	// (priorities) has its best taken, not one of the best few at random,
	// so that a packed fleet fills one server's rooms before the next
	// one's.
	q projections.AllocationQuery
}

// nextLimit is how many rows the list's next read, started at now, asks
// for; ranOut says the list's slice is used up or running out. A partial
// list that ran out before it went stale doubles it, up to
// candidateFetchMax: at thousands of allocations a second, 512 servers
// last a replica a fifth of a second, and the reads that replace them
// (each ranks every READY server of the fleet) cost more than the rows.
// One read again at its ttl with less than a quarter of its slice taken
// halves it, down to candidateFetch. The read stores it in l.limit if it
// succeeds.
func (l *candidateList) nextLimit(now time.Time, ranOut bool) int {
	limit := max(l.limit, candidateFetch)
	switch {
	case l.fetched.IsZero():
	case l.partial && ranOut && now.Sub(l.fetched) < l.ttl():
		limit = min(2*limit, candidateFetchMax)
	case 4*(l.sliceRead-l.sliceLeft) < l.sliceRead:
		limit = max(limit/2, candidateFetch)
	}
	return limit
}

// ttl is how long the list serves from its read.
func (l *candidateList) ttl() time.Duration {
	return min(max(candidateTTL, candidateTTLPerRead*l.took), candidateMaxTTL)
}

// runningOut reports whether, at now, a partial list's slice would run
// out before readAheadReads reads could replace it, at the rate it has
// been taken since its read ended (and at least one read's length after
// it, so a burst of takes just after a read does not start the next).
func (l *candidateList) runningOut(now time.Time) bool {
	if !l.partial || l.took < readAheadBelow {
		return false
	}
	taken, since := l.sliceRead-l.sliceLeft, now.Sub(l.fetched.Add(l.took))
	if taken <= 0 || since < l.took {
		return false
	}
	// left / (taken / since) < readAheadReads × took
	return float64(l.sliceLeft)*float64(since) < float64(readAheadReads)*float64(l.took)*float64(taken)
}

func newCandidatePool(views interface {
	AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error)
}, now func() time.Time, log *slog.Logger) *candidatePool {
	return &candidatePool{views: views, now: now, log: log, lists: map[string]*candidateList{}, claimed: map[string]claim{}}
}

// take returns a READY server for q and claims it, or ok=false when the
// views (read afresh) hold none that this replica has not claimed. One
// caller at a time reads the views for a query; the others take from the
// list they have, stale or not, and wait only when it is empty.
func (p *candidatePool) take(ctx context.Context, q projections.AllocationQuery) (row projections.Row[*eventsv1.GameServerState], ok bool, err error) {
	key, err := listKey(q)
	if err != nil {
		return row, false, err
	}
	return p.takeListed(ctx, key, q)
}

// takeListed is take from the list of key, q's listKey.
func (p *candidatePool) takeListed(ctx context.Context, key string, q projections.AllocationQuery) (row projections.Row[*eventsv1.GameServerState], ok bool, err error) {
	for {
		p.mu.Lock()
		now := p.now()
		l := p.lists[key]
		if l == nil {
			l = &candidateList{q: q}
			p.lists[key] = l
		}
		l.used = now
		// From a partial list, a replica whose slice it has run out of reads
		// the views again before it takes from another replica's slice.
		if row, ok = p.pickLocked(l, now, !l.partial || l.stealing); ok {
			if out := l.runningOut(now); (out || now.Sub(l.fetched) >= l.ttl()) && l.refreshing == nil {
				l.refreshing = make(chan struct{})
				q.Limit = l.nextLimit(now, out)
				go func() { // stale or running out: read again meanwhile
					if _, err := p.refresh(context.WithoutCancel(ctx), key, q, q.Limit, l); err != nil {
						// The old list serves on; the next take reads again.
						p.log.Warn("allocation candidates: read views", "err", err)
					}
				}()
			}
			p.mu.Unlock()
			return row, true, nil
		}
		// Empty: wait for a read that started after we looked, or start one.
		wait := l.refreshing
		if wait == nil && l.q.RoomQuery() && now.Sub(l.fetched) < l.ttl() {
			// A list of servers with room, read within its ttl, whose
			// servers are all being allocated into: the next selector is
			// tried rather than read the views for each call meanwhile
			// (every call did, for the half of a fleet's allocations that
			// found its ALLOCATED servers in flight). Before the allocator
			// answers that none has room it reads the views itself
			// (allocationService.viewsCandidates).
			p.mu.Unlock()
			return row, false, nil
		}
		if wait == nil {
			p.mu.Unlock()
			return p.takeFresh(ctx, key, q, l)
		}
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return row, false, ctx.Err()
		}
	}
}

// takeFresh reads the views and picks from what they show. If everything
// read is claimed (the views lag behind allocations this replica knows
// of), it reads once more past the claimed servers before it concludes
// there is none.
func (p *candidatePool) takeFresh(ctx context.Context, key string, q projections.AllocationQuery, l *candidateList) (projections.Row[*eventsv1.GameServerState], bool, error) {
	asked := q
	var limit int
	for i := range 2 {
		p.mu.Lock()
		if l.refreshing != nil {
			p.mu.Unlock()
			return p.take(ctx, asked) // another caller is reading; use its result
		}
		l.refreshing = make(chan struct{})
		if i == 0 {
			limit = l.nextLimit(p.now(), true) // empty
			q.Limit = limit
		}
		p.mu.Unlock()
		n, err := p.refresh(ctx, key, q, limit, l)
		if err != nil {
			return projections.Row[*eventsv1.GameServerState]{}, false, err
		}
		p.mu.Lock()
		row, ok := p.pickLocked(l, p.now(), true)
		claimed := len(p.claimed)
		p.mu.Unlock()
		if ok || n < q.Limit {
			return row, ok, nil
		}
		q.Limit += claimed
	}
	return projections.Row[*eventsv1.GameServerState]{}, false, nil
}

// refresh reads the views for q into l, wakes its waiters and returns how
// many rows it read; a read that succeeds makes limit the list's size.
// Claimed servers are filtered when picking, not in the query, which stays
// cheap.
func (p *candidatePool) refresh(ctx context.Context, key string, q projections.AllocationQuery, limit int, l *candidateList) (int, error) {
	started := p.now()
	rows, err := p.views.AllocationCandidates(ctx, q)
	p.mu.Lock()
	defer p.mu.Unlock()
	close(l.refreshing)
	l.refreshing = nil
	if err != nil {
		return 0, err
	}
	l.rows, l.fetched, l.took, l.limit = rows, started, p.now().Sub(started), limit
	l.partial, l.stealing = len(rows) >= q.Limit, false
	p.forgetClaimsLocked(started)
	p.dropClaimedLocked(l, p.now())
	p.listKnownLocked(l)
	l.sliceRead = 0
	holds := p.sliceHolder()
	for _, r := range l.rows {
		if holds(r.State.GetName()) {
			l.sliceRead++
		}
	}
	l.sliceLeft = l.sliceRead
	for k, old := range p.lists {
		if k != key && old.refreshing == nil && started.Sub(old.used) > claimTTL {
			delete(p.lists, k) // a selector nobody asked for lately
		}
	}
	return len(rows), nil
}

// sliceHolder returns whether a server is of this replica's slice (every
// one is without slices).
func (p *candidatePool) sliceHolder() func(name string) bool {
	if f := p.slice.Load(); f != nil {
		if sl := (*f)(); sl.Count > 1 {
			return sl.Holds
		}
	}
	return func(string) bool { return true }
}

// dropClaimedLocked drops from l the rows claims hold at now (claimed
// through another list of the fleet, or since its read), and counts those
// of this replica's slice as taken.
func (p *candidatePool) dropClaimedLocked(l *candidateList, now time.Time) {
	var holds func(string) bool
	l.rows = slices.DeleteFunc(l.rows, func(r projections.Row[*eventsv1.GameServerState]) bool {
		c, ok := p.claimed[r.State.GetName()]
		if !ok || !c.holds(r, now) {
			return false
		}
		if holds == nil {
			holds = p.sliceHolder()
		}
		if holds(r.State.GetName()) && l.sliceLeft > 0 {
			l.sliceLeft--
		}
		return true
	})
}

// sliceOf sets where the pool learns its replica's slice; nil: the whole.
func (p *candidatePool) sliceOf(f func() replicas.Slice) {
	if f == nil {
		p.slice.Store(nil)
		return
	}
	p.slice.Store(&f)
}

// pickLocked takes a random one of the best unclaimed servers of l, from
// this replica's slice while it has any there. Replicas that picked from
// the same best few raced for them: with two replicas 42 % of allocations
// lost a race at least once, each loss two direct gets, and two replicas
// allocated slower than one (docs/benchmarks.md). When the list has none
// of the slice, it takes another slice's server only if steal is set;
// otherwise it takes none.
func (p *candidatePool) pickLocked(l *candidateList, now time.Time, steal bool) (projections.Row[*eventsv1.GameServerState], bool) {
	p.dropClaimedLocked(l, now)
	if len(l.rows) == 0 {
		return projections.Row[*eventsv1.GameServerState]{}, false
	}
	i := rand.IntN(min(candidateSpread, len(l.rows)))
	if l.q.Ranked() {
		i = 0
	}
	fromSlice := true
	if f := p.slice.Load(); f != nil {
		if sl := (*f)(); sl.Count > 1 {
			// One of the best candidateSpread of the slice, uniformly
			// (reservoir sampling); the best of all if the slice has none
			// and steal allows it.
			n := 0
			for j, r := range l.rows {
				if !sl.Holds(r.State.GetName()) {
					continue
				}
				if n++; rand.IntN(n) == 0 || l.q.Ranked() && n == 1 {
					i = j
				}
				if n == candidateSpread || l.q.Ranked() {
					break
				}
			}
			if n == 0 {
				if !steal {
					return projections.Row[*eventsv1.GameServerState]{}, false
				}
				l.stealing, fromSlice = true, false
			}
		}
	}
	row := l.rows[i]
	l.rows = slices.Delete(l.rows, i, i+1)
	if fromSlice && l.sliceLeft > 0 {
		l.sliceLeft--
	}
	p.claimed[row.State.GetName()] = claim{seq: row.Sequence, until: now.Add(claimTTL)}
	return row, true
}

// forgetClaimsLocked drops expired claims.
func (p *candidatePool) forgetClaimsLocked(now time.Time) {
	for name, c := range p.claimed {
		if !now.Before(c.until) {
			delete(p.claimed, name)
		}
	}
}

// listKey is the key of q's list (its JSON: one list per distinct query).
func listKey(q projections.AllocationQuery) (string, error) {
	b, err := json.Marshal(q)
	return string(b), err
}

// missed records that a server the list of key (listKey) handed out had
// been taken by another writer since the views were read: it no longer
// matched the list's query once the allocation caught up with it. After
// staleRunLimit of those in a row, the list is dropped and the next take
// reads the views again.
func (p *candidatePool) missed(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lists[key]
	if l == nil {
		return
	}
	if l.staleRun++; l.staleRun >= staleRunLimit {
		p.log.Debug("allocation candidates: list dropped, its servers were taken by other writers", "missed", l.staleRun, "rows", len(l.rows))
		l.rows, l.fetched, l.staleRun = nil, time.Time{}, 0
	}
}

// hit records that a server the list of key handed out was allocated.
func (p *candidatePool) hit(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.lists[key]; l != nil {
		l.staleRun = 0
	}
}

// settle moves the claim on name to seq, the sequence of the allocation
// this replica stored: rows up to it show the server READY before that
// allocation, and are not handed out.
func (p *candidatePool) settle(name string, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claimed[name] = claim{seq: seq, until: p.now().Add(claimTTL)}
}

// put lists a server again after this replica allocated into it, as that
// allocation left it (row: its state and the allocation's sequence), in
// every list whose query it still matches (with room left for the next
// allocation: an ALLOCATED selector's, say, after a READY one took it),
// so that the next allocation need not wait for the views to show it. Its
// claim moves to the sequence before the allocation's, so that the views'
// older rows stay held and this one is not; until the views show it, the
// lists read again keep it (listKnownLocked).
func (p *candidatePool) put(row projections.Row[*eventsv1.GameServerState]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := row.State.GetName()
	p.claimed[name] = claim{seq: row.Sequence - 1, until: p.now().Add(claimTTL), known: &row}
	for _, l := range p.lists {
		l.rows = slices.DeleteFunc(l.rows, func(r projections.Row[*eventsv1.GameServerState]) bool { return r.State.GetName() == name })
		if l.q.Matches(row.State) {
			insertRanked(l, row)
		}
	}
}

// listKnownLocked adds to l the servers this replica allocated into with
// room left (put) that match its query, where the views l read do not
// show them as they are now.
func (p *candidatePool) listKnownLocked(l *candidateList) {
	now := p.now()
	for name, c := range p.claimed {
		if c.known == nil || !now.Before(c.until) || !l.q.Matches(c.known.State) {
			continue
		}
		if slices.ContainsFunc(l.rows, func(r projections.Row[*eventsv1.GameServerState]) bool { return r.State.GetName() == name }) {
			continue // the views show it past the claim: that row is newer
		}
		insertRanked(l, *c.known)
	}
}

// insertRanked inserts row into l after the rows its query's priorities
// rank before it or level with it.
func insertRanked(l *candidateList, row projections.Row[*eventsv1.GameServerState]) {
	at := len(l.rows)
	if l.q.Ranked() {
		at = slices.IndexFunc(l.rows, func(r projections.Row[*eventsv1.GameServerState]) bool {
			return l.q.ComparePriorities(row.State, r.State) < 0
		})
		if at < 0 {
			at = len(l.rows)
		}
	}
	l.rows = slices.Insert(l.rows, at, row)
}

// release hands a claimed server back at once: the allocation did not take
// it for a reason that says nothing about the server.
func (p *candidatePool) release(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.claimed, name)
}
