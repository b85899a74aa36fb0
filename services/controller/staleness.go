package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The controller decides from the views, and the views are only as fresh
// as the projector. When the projector stops (killed, wedged on its
// database), the views stop moving while the stream goes on: a crashed
// server is not seen, a scale-up not applied, and nothing says why. So each
// pass compares the views' checkpoint with the stream's last sequence. When
// the stream is ahead and the checkpoint has not moved for StaleViewsAfter,
// the views are stale: the controller says so (a log line, the
// tether_controller_views_stale and _lag gauges, and Ready), and until they
// move again it only judges host liveness, from heartbeats, with guarded
// appends. Fleets, replacements and game-session deadlines wait: decided on
// a world that stopped, they would be decided on what it was, not what it is.

// staleLogEvery is how often a stale-views warning is repeated while they stay stale.
const staleLogEvery = 30 * time.Second

// viewsWatch follows the views' checkpoint from pass to pass.
type viewsWatch struct {
	mu         sync.Mutex
	checkpoint uint64    // last checkpoint read
	movedAt    time.Time // when it last moved, or the views were caught up
	lag        uint64    // stream last sequence − checkpoint, at the last read
	stale      bool
	loggedAt   time.Time // last stale-views warning
}

// reset forgets what a previous leadership saw: the views get a full
// StaleViewsAfter from a new leader before they count as stale.
func (w *viewsWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checkpoint, w.movedAt, w.lag, w.stale, w.loggedAt = 0, time.Time{}, 0, false, time.Time{}
}

// observe records a reading and reports whether the views are stale now,
// and whether that changed.
func (w *viewsWatch) observe(checkpoint, streamLast uint64, now time.Time, staleAfter time.Duration) (stale, changed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.movedAt.IsZero() || checkpoint != w.checkpoint || checkpoint >= streamLast {
		w.checkpoint, w.movedAt = checkpoint, now
	}
	w.lag = 0
	if streamLast > checkpoint {
		w.lag = streamLast - checkpoint
	}
	was := w.stale
	w.stale = w.lag > 0 && now.Sub(w.movedAt) > staleAfter
	return w.stale, w.stale != was
}

// state returns the last reading.
func (w *viewsWatch) state() (stale bool, lag, checkpoint uint64, since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stale, w.lag, w.checkpoint, w.movedAt
}

// dueLog reports whether a stale-views warning is due now.
func (w *viewsWatch) dueLog(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.loggedAt) < staleLogEvery {
		return false
	}
	w.loggedAt = now
	return true
}

// checkViews reads the views' checkpoint and the stream's last sequence,
// and reports whether the views are stale, logging when they become stale,
// every staleLogEvery while they stay so, and when they move again.
func (c *Controller) checkViews(ctx context.Context) (bool, error) {
	checkpoint, err := c.opts.Views.Checkpoint(ctx)
	if err != nil {
		return false, fmt.Errorf("read the views' checkpoint: %w", err)
	}
	last, err := c.opts.Store.StreamLastSequence(ctx)
	if err != nil {
		return false, fmt.Errorf("read the stream's position: %w", err)
	}
	now := c.opts.Clock.Now()
	stale, changed := c.views.observe(checkpoint, last, now, c.opts.StaleViewsAfter)
	_, lag, _, since := c.views.state()
	switch {
	case stale && (changed || c.views.dueLog(now)):
		c.log.Warn("views are not moving: the projector is behind and stopped; acting on host liveness only until they move",
			"checkpoint", checkpoint, "stream_last_sequence", last, "lag", lag, "unchanged_for", now.Sub(since).Round(time.Millisecond))
	case !stale && changed:
		c.log.Info("views are moving again; acting on them", "checkpoint", checkpoint, "stream_last_sequence", last, "lag", lag)
	}
	return stale, nil
}

// Status says in words whether this instance leads or stands by, and for
// a standby who leads.
func (c *Controller) Status() string {
	l := c.lease.Load()
	if l == nil {
		return "starting"
	}
	status, _ := l.Status() // Ready reports the error
	return status
}

// Ready reports why this instance should not be counted on now: before it
// has opened the lease, while the lease bucket cannot be reached, and while
// it leads on views that have stopped moving (the projector is down). A
// standby that can reach the lease is ready: it can take over.
func (c *Controller) Ready() error {
	l := c.lease.Load()
	if l == nil {
		return errors.New("starting: the lease is not open yet")
	}
	if status, err := l.Status(); err != nil {
		return fmt.Errorf("%s: %w", status, err)
	}
	if !c.leader.Load() {
		return nil
	}
	if stale, lag, checkpoint, since := c.views.state(); stale {
		return fmt.Errorf("views stale: checkpoint %d unchanged since %s with %d events behind the stream",
			checkpoint, since.Format(time.RFC3339), lag)
	}
	return nil
}
