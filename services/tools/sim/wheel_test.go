package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
)

// TestWheelRunsEveryStepOnTimeAndInOrder schedules steps at random times
// (some many turns ahead) and advances the wheel by random amounts with a
// clock of its own: each step comes out at the first advance at or after
// its time, never before, and the wheel's next wake-up is never later than
// the earliest step it holds.
func TestWheelRunsEveryStepOnTimeAndInOrder(t *testing.T) {
	const tick = 100 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		w := newWheel(tick, 8, nil)
		start := time.Date(2026, 11, 26, 0, 0, 0, int(rng.Int64N(int64(time.Second))), time.UTC)
		procs := make([]*process, 200)
		due := map[*process]time.Time{}
		for i := range procs {
			procs[i] = &process{}
			at := start.Add(time.Duration(rng.Int64N(int64(5 * time.Second)))) // up to 6 turns ahead
			due[procs[i]] = at
			w.add(step{p: procs[i], kind: stepBeat, at: at})
		}
		now := start
		got := map[*process]time.Time{}
		for i := 0; len(got) < len(procs) && i < 10_000; i++ {
			prev := now
			now = now.Add(time.Duration(rng.Int64N(int64(3 * tick))))
			out, next := w.advance(now)
			for _, s := range out {
				if _, twice := got[s.p]; twice {
					t.Fatalf("round %d: a step came out twice", round)
				}
				if s.at.After(now) {
					t.Fatalf("round %d: a step due at %s came out at %s", round, s.at, now)
				}
				got[s.p] = now
				if !s.at.After(prev) {
					t.Fatalf("round %d: a step due at %s came out at %s, not at the advance to %s", round, s.at, now, prev)
				}
			}
			if len(got) < len(procs) {
				earliest := time.Time{}
				for p, at := range due {
					if _, ran := got[p]; !ran && (earliest.IsZero() || at.Before(earliest)) {
						earliest = at
					}
				}
				if next.IsZero() || next.After(earliest) {
					t.Fatalf("round %d: next wake-up %s, but a step is due at %s", round, next, earliest)
				}
			} else if !next.IsZero() {
				t.Fatalf("round %d: an empty wheel wakes at %s", round, next)
			}
		}
		if len(got) != len(procs) {
			t.Fatalf("round %d: %d of %d steps came out", round, len(got), len(procs))
		}
	}
}

// TestWheelStepsAddedWhileIdle: an empty wheel restarts from the time of
// the step added to it, and a step added for the past is due at once.
func TestWheelStepsAddedWhileIdle(t *testing.T) {
	w := newWheel(100*time.Millisecond, 4, nil)
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	p, q := &process{}, &process{}
	w.add(step{p: p, at: t0.Add(250 * time.Millisecond)})
	if out, next := w.advance(t0); len(out) != 0 || !next.Equal(t0.Add(250*time.Millisecond)) {
		t.Fatalf("advance(t0) = %d steps, next %s", len(out), next)
	}
	out, next := w.advance(t0.Add(time.Hour)) // long after: it comes out, the wheel is empty
	if len(out) != 1 || out[0].p != p || !next.IsZero() {
		t.Fatalf("advance(+1h) = %v, next %s", out, next)
	}
	w.add(step{p: q, at: t0.Add(time.Hour + 10*time.Millisecond)})
	w.add(step{p: p, at: t0}) // in the past: due now
	out, _ = w.advance(t0.Add(time.Hour))
	if len(out) != 1 || out[0].p != p {
		t.Fatalf("the step added for the past did not come out first: %v", out)
	}
	out, _ = w.advance(t0.Add(time.Hour + 10*time.Millisecond))
	if len(out) != 1 || out[0].p != q {
		t.Fatalf("the step added to an idle wheel did not come out: %v", out)
	}
}

// TestWheelBeatsAllocateNothing: in a steady state (every process beating
// and rescheduled) an advance allocates nothing.
func TestWheelBeatsAllocateNothing(t *testing.T) {
	w := newWheel(100*time.Millisecond, 32, nil)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	procs := make([]*process, 10)
	for i := range procs {
		procs[i] = &process{}
		w.add(step{p: procs[i], kind: stepBeat, at: now.Add(time.Duration(i) * 250 * time.Millisecond)})
	}
	beat := func() {
		now = now.Add(100 * time.Millisecond)
		out, _ := w.advance(now)
		for _, s := range out {
			w.add(step{p: s.p, kind: stepBeat, at: now.Add(2500 * time.Millisecond)})
		}
	}
	for range 100 { // slots grow to their working size first
		beat()
	}
	if n := testing.AllocsPerRun(1000, beat); n != 0 {
		t.Fatalf("a steady advance allocates %.1f times", n)
	}
}

// TestWheelRunFiresDueSteps runs the wheel's goroutine on the real clock:
// steps fire, including one added while the wheel sleeps idle.
func TestWheelRunFiresDueSteps(t *testing.T) {
	fired := make(chan *process, 4)
	w := newWheel(10*time.Millisecond, 16, func(s step) { fired <- s.p })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	p, q := &process{}, &process{}
	w.add(step{p: p, at: time.Now().Add(20 * time.Millisecond)})
	select {
	case got := <-fired:
		if got != p {
			t.Fatal("another step fired")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the step did not fire")
	}
	w.add(step{p: q, at: time.Now()}) // the wheel is idle: the add wakes it
	select {
	case got := <-fired:
		if got != q {
			t.Fatal("another step fired")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the step added to an idle wheel did not fire")
	}
	cancel()
	<-done
}

// partialStore stores the first event of each append and fails on the rest.
type partialStore struct{}

func (partialStore) Append(context.Context, string, uint64, ...events.Envelope) (uint64, error) {
	return 0, &events.PartialAppendError{Stored: 1, Err: errors.New("stream unavailable")}
}
func (partialStore) History(context.Context, string, uint64) ([]events.Envelope, error) {
	return nil, nil
}
func (partialStore) CurrentHistory(context.Context, string, uint64) ([]events.Envelope, error) {
	return nil, nil
}

// TestCountingStoreCountsAPartialAppend: the audit compares what the
// agents appended with what the stream holds, so the events of an append
// that failed part way are counted (the agent re-sends only the rest).
func TestCountingStoreCountsAPartialAppend(t *testing.T) {
	var n atomic.Int64
	c := countingStore{inner: partialStore{}, n: &n}
	if _, err := c.Append(t.Context(), "s", 0, events.Envelope{}, events.Envelope{}); err == nil {
		t.Fatal("the failed append reported no error")
	}
	if n.Load() != 1 {
		t.Fatalf("counted %d events, the stream stored 1", n.Load())
	}
}
