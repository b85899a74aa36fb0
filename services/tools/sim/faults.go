package sim

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// ledger remembers what the simulation did to each game server, to judge
// afterwards whether each server that ended had a reason to.
type ledger struct {
	mu       sync.Mutex
	injected map[string]injection // crash or hang, at most one per server
	flapped  map[string]int       // SDK connection resets per server
	ended    map[string]time.Time // servers whose match ended: they shut themselves down
	hostsCut map[string]int       // partitions per host
}

// injection is a fault and when it was injected.
type injection struct {
	kind fault
	at   time.Time
}

func newLedger() *ledger {
	return &ledger{injected: map[string]injection{}, flapped: map[string]int{}, ended: map[string]time.Time{}, hostsCut: map[string]int{}}
}

// claim reserves a server for a crash or hang; false if it has one already
// or its match is ending.
func (l *ledger) claim(name string, kind fault, at time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.injected[name]; ok {
		return false
	}
	if _, ok := l.ended[name]; ok {
		return false
	}
	l.injected[name] = injection{kind: kind, at: at}
	return true
}

// struck records when a crash or hang took effect in its process (a busy
// process takes a moment to act on a fault; detection counts from here).
func (l *ledger) struck(name string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inj, ok := l.injected[name]; ok {
		inj.at = at
		l.injected[name] = inj
	}
}

// faulted reports whether a server was given a crash or hang.
func (l *ledger) faulted(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.injected[name]
	return ok
}

// release forgets a claim whose fault could not be delivered.
func (l *ledger) release(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.injected, name)
}

// matchEnding records that a server's game asks to stop; false if the
// server was given a crash or hang (its end is that fault's).
func (l *ledger) matchEnding(name string, at time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.injected[name]; ok {
		return false
	}
	l.ended[name] = at
	return true
}

func (l *ledger) flap(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flapped[name]++
}

func (l *ledger) cut(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hostsCut[host]++
}

// snapshot copies the ledger for the audit.
func (l *ledger) snapshot() (injected map[string]injection, flapped map[string]int, ended map[string]time.Time, cuts int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	injected, flapped, ended = map[string]injection{}, map[string]int{}, map[string]time.Time{}
	for k, v := range l.injected {
		injected[k] = v
	}
	for k, v := range l.flapped {
		flapped[k] = v
	}
	for k, v := range l.ended {
		ended[k] = v
	}
	for _, n := range l.hostsCut {
		cuts += n
	}
	return injected, flapped, ended, cuts
}

// every calls f at a mean rate of rate per second (exponential gaps, as
// independent failures arrive) until ctx ends; a zero rate never calls it.
// The arrival times are drawn from the start, not from each call's return,
// so a busy machine's late timers (or a slow f) delay calls without
// lowering their rate: the calls due meanwhile follow at once.
func every(ctx context.Context, rate float64, f func()) {
	if rate <= 0 {
		return
	}
	next := time.Now()
	for {
		next = next.Add(time.Duration(rand.ExpFloat64() / rate * float64(time.Second)))
		if !sleepCtx(ctx, time.Until(next)) {
			return
		}
		f()
	}
}

// pickProcess returns a random running process that has said Ready, or nil
// after a bounded number of tries.
func (w *world) pickProcess() *process {
	for range 8 {
		h := w.hosts[rand.IntN(len(w.hosts))]
		list := h.running()
		if len(list) == 0 {
			continue
		}
		if p := list[rand.IntN(len(list))]; p.ready.Load() {
			return p
		}
	}
	return nil
}

// injectFaults runs the fault injectors until ctx ends.
func (w *world) injectFaults(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { every(ctx, w.opts.CrashRate, func() { w.injectOne(faultCrash) }) })
	wg.Go(func() { every(ctx, w.opts.HangRate, func() { w.injectOne(faultHang) }) })
	wg.Go(func() { every(ctx, w.opts.FlapRate, func() { w.injectOne(faultFlap) }) })
	wg.Go(func() { every(ctx, w.opts.PartitionRate, w.partitionOne) })
	wg.Wait()
}

// injectOne gives a fault to a random READY or ALLOCATED server.
func (w *world) injectOne(kind fault) {
	p := w.pickProcess()
	if p == nil {
		return
	}
	if kind == faultFlap {
		if p.inject(kind) {
			w.faults.flap(p.name)
		}
		return
	}
	if !w.faults.claim(p.name, kind, time.Now()) {
		return
	}
	if !p.inject(kind) {
		w.faults.release(p.name)
	}
}

// partitionOne pauses a random host's heartbeat for PartitionLength: the
// control plane loses sight of it (UNREACHABLE) but not for long enough to
// judge it lost, so none of its servers may be terminated.
func (w *world) partitionOne() {
	i := rand.IntN(len(w.hosts))
	if !w.paused[i].CompareAndSwap(false, true) {
		return
	}
	w.faults.cut(w.hosts[i].id)
	w.partitions.Add(1)
	time.AfterFunc(w.opts.PartitionLength, func() {
		w.paused[i].Store(false)
		w.partitions.Done()
	})
}
