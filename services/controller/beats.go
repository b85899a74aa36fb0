package controller

import (
	"context"
	"errors"
	"time"

	"github.com/tetherhq/tether/services/controller/plan"
	"github.com/tetherhq/tether/services/nats/hostbeat"
)

// beatsWait bounds a pass's wait for the heartbeat tracker to hold every
// beat in the bucket (on a new tracker, its initial values).
const beatsWait = 5 * time.Second

// beatsBehindPasses is how many passes in a row a heartbeat tracker may
// fail to catch up with the bucket before it is replaced. Its watcher is
// served by one NATS server, which may stay behind the bucket's leader (a
// replica catching up, or cut off from the others); a new watcher is
// placed afresh, preferably on a server that is caught up.
const beatsBehindPasses = 2

// readBeats returns every host's last beat. It reads them from a tracker of
// the bucket (one round trip instead of one per host), started on first use
// with the pass's context, so it lives as long as the leadership: lead
// stops it. A pass never reads a map the tracker cannot vouch for, nor one
// still filling: a tracker that has not caught up with the bucket within
// beatsWait fails the pass, as a failed Read did. It is kept for the next
// pass (its watcher may resume on its own), and replaced once it has
// failed beatsBehindPasses passes in a row. One that has ended (its
// watcher failed or stalled, or a previous leadership's context ended) is
// replaced at once, and a tracker that ends during the pass is replaced
// within it, once: after a NATS restart took its watcher's consumer, the
// pass decides on a new watcher instead of failing.
func (c *Controller) readBeats(ctx context.Context) (map[string]hostbeat.Beat, error) {
	wctx, cancel := context.WithTimeout(ctx, c.beatsWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		if c.beats != nil {
			if err := c.beats.Err(); err != nil {
				if !errors.Is(err, hostbeat.ErrStopped) {
					c.log.Warn("host heartbeat tracker ended; starting another", "err", err)
				}
				c.stopBeats()
			}
		}
		if c.beats == nil {
			t, err := hostbeat.Track(ctx, c.opts.JetStream)
			if err != nil {
				return nil, err
			}
			c.beats = t
		}
		beats, err := c.beats.Beats(wctx)
		switch {
		case err == nil:
			c.beatsBehind = 0
		case attempt == 1 && ctx.Err() == nil && wctx.Err() == nil && errors.Is(err, hostbeat.ErrWatchEnded):
			continue // replaced above, in what is left of the wait
		case ctx.Err() == nil && errors.Is(err, hostbeat.ErrBehind):
			if c.beatsBehind++; c.beatsBehind >= beatsBehindPasses {
				c.log.Warn("host heartbeat tracker stayed behind the bucket; starting another", "passes", c.beatsBehind, "err", err)
				c.stopBeats()
			}
		}
		return beats, err
	}
}

// stopBeats stops the heartbeat tracker, if any.
func (c *Controller) stopBeats() {
	if c.beats == nil {
		return
	}
	if err := c.beats.Stop(); err != nil {
		c.log.Warn("stop the host heartbeat tracker", "err", err)
	}
	c.beats, c.beatsBehind = nil, 0
}

// plannedBeats are the hosts' beats as the planner reads them. A beat's
// value is decoded only if a rule asks for what its agent wrote, once
// (hostbeat.Beat decodes on first use): most passes read no inventory.
func plannedBeats(beats map[string]hostbeat.Beat) map[string]plan.Beat {
	out := make(map[string]plan.Beat, len(beats))
	for id, b := range beats {
		out[id] = plan.Beat{Stored: b.Stored, Report: func() plan.Report { return reportOf(b) }}
	}
	return out
}

// reportOf is what an agent wrote in a beat.
func reportOf(b hostbeat.Beat) plan.Report {
	r := plan.Report{Written: b.WrittenAt()}
	if inv := b.Inv(); inv != nil {
		r.Inventory = &plan.Inventory{Servers: make([]string, len(inv.Servers)), Queued: inv.Queued}
		for i, s := range inv.Servers {
			r.Inventory.Servers[i] = s.Name
		}
	}
	return r
}
