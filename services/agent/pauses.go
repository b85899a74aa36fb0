package agent

import (
	"context"
	"slices"
	"sync"
	"time"
)

// pause is a span of the agent's clock in which the agent did not run: its
// process was stopped (SIGSTOP, a suspended VM or container) or not
// scheduled. A game server's health pings sent meanwhile wait in the socket
// and are noted only after it, so the span is the agent's silence, not the
// server's.
type pause struct{ from, to time.Time }

// pausedIn returns how much of from..to the agent spent in pauses.
func pausedIn(pauses []pause, from, to time.Time) time.Duration {
	var d time.Duration
	for _, p := range pauses {
		start, end := p.from, p.to
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		if end.After(start) {
			d += end.Sub(start)
		}
	}
	return d
}

// ranFor returns how long the agent ran from from to to: the span less
// its pauses.
func ranFor(pauses []pause, from, to time.Time) time.Duration {
	if !to.After(from) {
		return 0
	}
	return to.Sub(from) - pausedIn(pauses, from, to)
}

// resumedAfter returns when the agent resumed from its last pause if that
// ended after t, else zero. Pauses are in the order they happened.
func resumedAfter(pauses []pause, t time.Time) time.Time {
	if n := len(pauses); n > 0 && pauses[n-1].to.After(t) {
		return pauses[n-1].to
	}
	return time.Time{}
}

// minPause is the shortest time without running that the agent takes for a
// pause of its own, beyond its watch's interval: a shorter one cannot cost
// a server a whole period of the shortest (1 s) it would not have missed
// anyway, and the runtime's own hiccups are left alone.
const minPause = time.Second

// maxPauses is how many of its latest pauses the agent remembers; an older
// one counts as time it ran again, which can only judge sooner.
const maxPauses = 16

// runWatch tells when the agent has not run. Its loop (Agent.watchRuns)
// waits on nothing but its ticker, unlike the health evaluation, which can
// wait seconds for a server's lock behind an append, so a run that comes
// late is the agent's own pause. Runs are timed on Options.RunClock (the
// monotonic clock) and the pause is kept on Options.Clock, where health is
// judged.
type runWatch struct {
	late time.Duration // a run later than this after the last is a pause

	mu     sync.Mutex
	last   time.Time // RunClock at the last run; zero before the first
	lastAt time.Time // Clock at the last run
	pauses []pause   // the latest, oldest first; replaced, never changed in place
}

// ran notes a run at run (RunClock) and at (Clock), and returns the pause
// that this run ends if it came late.
func (w *runWatch) ran(run, at time.Time) (pause, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, late := w.lateLocked(run, at)
	if late {
		keep := w.pauses[max(0, len(w.pauses)-(maxPauses-1)):]
		w.pauses = append(slices.Clone(keep), p)
	}
	w.last, w.lastAt = run, at
	return p, late
}

// pausesAt returns the agent's pauses as of run (RunClock) and at (Clock):
// those the watch noted, and the one under way if the watch is late now
// (the agent has just resumed and its watch has not run yet). The caller
// must not change the slice.
func (w *runWatch) pausesAt(run, at time.Time) []pause {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, late := w.lateLocked(run, at); late {
		return append(slices.Clone(w.pauses), p)
	}
	return w.pauses
}

// lateLocked returns the pause from the last run to one at run and at, if
// run is late.
func (w *runWatch) lateLocked(run, at time.Time) (pause, bool) {
	if w.last.IsZero() || run.Sub(w.last) <= w.late {
		return pause{}, false
	}
	return pause{from: w.lastAt, to: at}, true
}

// watchRuns notes every HealthEvalInterval that the agent runs, and warns
// of each pause it finds: a tick later than the interval and minPause.
func (a *Agent) watchRuns(ctx context.Context) error {
	t := a.opts.RunClock.NewTicker(a.opts.HealthEvalInterval)
	defer t.Stop()
	a.watch.ran(a.opts.RunClock.Now(), a.opts.Clock.Now())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
		}
		if p, late := a.watch.ran(a.opts.RunClock.Now(), a.opts.Clock.Now()); late {
			a.log.Warn("agent did not run for a while; the pause counts toward no game server's health",
				"paused", p.to.Sub(p.from).Round(time.Millisecond), "since", p.from)
			a.paused.Add(ctx, 1)
		}
	}
}
