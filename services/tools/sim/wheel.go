package sim

import (
	"context"
	"sync"
	"time"
)

// stepKind is what a simulated process does when its step comes due.
type stepKind uint8

const (
	stepBeat  stepKind = iota + 1 // an SDK heartbeat, then the next one is scheduled
	stepReady                     // Ready, once its start-up time has passed
)

// step is one timed step of one process.
type step struct {
	p    *process
	kind stepKind
	at   time.Time // due
}

// wheel times the steps of one simulated host's processes (their
// heartbeats and the Ready at the end of start-up) on one goroutine and
// one timer, where each process had two timers of its own: at 100,000
// servers, 200,000 timers, on the same two cores as the control plane they
// are meant to load. When a step is due the wheel tells its process, which
// makes the call itself (so that a call the agent holds up holds up that
// process only).
//
// It is a hashed timing wheel: a ring of slots a tick apart, a step kept
// in the slot of its due time. The goroutine sleeps until the next slot
// that holds a step and runs every step due by then, so steps due within
// a tick of each other share one wake-up. A step runs at most a tick late
// (the wheel's resolution). Slots are slices reused from turn to turn: in
// a steady state (processes beating) the wheel allocates nothing.
type wheel struct {
	tick time.Duration
	fire func(step) // runs a due step, on the wheel's goroutine

	mu     sync.Mutex
	slots  [][]step
	cursor int       // the slot of base
	base   time.Time // the start of the cursor's slot; steps before it are due
	count  int       // steps held
	kick   chan struct{}
	due    []step // the steps of the current wake-up; reused
}

// newWheel returns a wheel of n slots a tick apart that runs due steps
// with fire. Steps further ahead than n ticks stay in their slot for the
// turns in between.
func newWheel(tick time.Duration, n int, fire func(step)) *wheel {
	return &wheel{tick: tick, fire: fire, slots: make([][]step, n), kick: make(chan struct{}, 1)}
}

// add schedules s.
func (w *wheel) add(s step) {
	w.mu.Lock()
	switch {
	case w.count == 0:
		w.base = s.at.Truncate(w.tick) // an empty wheel starts over at its first step
	case s.at.Before(w.base):
		// Turn the wheel back to the step's slot: the cursor and base move
		// together, so every held step keeps its slot.
		k := int((w.base.Sub(s.at) + w.tick - 1) / w.tick)
		w.base = w.base.Add(-time.Duration(k) * w.tick)
		w.cursor = ((w.cursor-k)%len(w.slots) + len(w.slots)) % len(w.slots)
	}
	i := (w.cursor + int(s.at.Sub(w.base)/w.tick)) % len(w.slots)
	w.slots[i] = append(w.slots[i], s)
	w.count++
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}: // the wheel may be asleep past this step
	default:
	}
}

// advance takes out every step due at now and returns them with when the
// next held step is due (zero if the wheel is empty). The returned slice is
// valid until the next advance.
func (w *wheel) advance(now time.Time) ([]step, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.due = w.due[:0]
	for w.count > 0 && !w.base.After(now) {
		slot := w.slots[w.cursor]
		kept := slot[:0]
		for _, s := range slot {
			if s.at.After(now) {
				kept = append(kept, s) // later in this slot, or a later turn
				continue
			}
			w.due = append(w.due, s)
			w.count--
		}
		clear(slot[len(kept):]) // drop the pointers to processes that ran
		w.slots[w.cursor] = kept
		if w.base.Add(w.tick).After(now) {
			break // now is within this slot: stay on it
		}
		w.cursor = (w.cursor + 1) % len(w.slots)
		w.base = w.base.Add(w.tick)
	}
	return w.due, w.next()
}

// next is when the earliest held step is due: the first slot from the
// cursor with a step due in this turn of the wheel, or else (every step a
// turn or more away) the earliest of all. Zero if the wheel is empty.
func (w *wheel) next() time.Time {
	if w.count == 0 {
		return time.Time{}
	}
	var earliest time.Time
	for k := range len(w.slots) {
		start := w.base.Add(time.Duration(k) * w.tick)
		end := start.Add(w.tick)
		var first time.Time
		for _, s := range w.slots[(w.cursor+k)%len(w.slots)] {
			if s.at.Before(end) && (first.IsZero() || s.at.Before(first)) {
				first = s.at
			}
			if earliest.IsZero() || s.at.Before(earliest) {
				earliest = s.at
			}
		}
		if !first.IsZero() {
			return first
		}
	}
	return earliest
}

// run runs due steps until ctx ends.
func (w *wheel) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := w.advance(time.Now())
		for _, s := range due {
			w.fire(s)
		}
		wait := time.Hour // idle: a kick wakes it
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-w.kick: // a step was added; Reset above discards a stale fire
		}
	}
}
