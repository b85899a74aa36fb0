package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
	"github.com/tetherhq/tether/services/controller/plan"
)

// noRoomLogEvery is how often "no host with room" is repeated for a fleet
// that stays short.
const noRoomLogEvery = time.Minute

// execute carries out a plan in order (plan.Plan): it appends each decision
// guarded by the sequence it was decided on and then sends its command; a
// decision's follow-ups only if it was appended. A conflict (the aggregate
// changed since the views were read) skips the decision: the next pass
// decides again. Any other append error ends the pass, since the stream
// is unavailable; the rest of the plan is decided again next pass. A
// command that cannot be sent is logged: a start is re-sent after
// StartTimeout, and a stopped server's agent reads its servers again.
//
// It reports whether anything was appended.
func (c *Controller) execute(ctx context.Context, p plan.Plan) (wrote bool, err error) {
	for _, e := range p.Refused {
		c.log.Error("decision refused", "err", e)
	}
	now := c.opts.Clock.Now()
	for _, n := range p.NoRoom {
		if last, ok := c.noRoomLogged[n.Fleet]; !ok || now.Sub(last) > noRoomLogEvery {
			c.log.Warn("no host with room for the fleet", "fleet", n.Fleet, "missing", n.Missing)
			c.noRoomLogged[n.Fleet] = now
		}
	}
	// Up to executeParallel decisions at once, each an append guarded by
	// its own aggregate's sequence and a command to one host. Decisions
	// that touch a common aggregate (their follow-ups included) keep the
	// plan's order: where two decide on one server, the first planned wins
	// and the other conflicts, as one after another (a lost host's
	// terminations are decided only once, as the host's follow-ups, and
	// must not lose to a later decision on the same server). On the first
	// error no more are started; those left keep their news.
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	slots := make(chan struct{}, executeParallel)
	last := map[string]chan struct{}{} // aggregate → done of the last decision touching it
	for _, d := range p.Decisions {
		names := touched(d, nil)
		var after []chan struct{}
		for _, n := range names {
			if ch, ok := last[n]; ok {
				after = append(after, ch)
			}
		}
		done := make(chan struct{})
		for _, n := range names {
			last[n] = done
		}
		wg.Go(func() {
			defer close(done)
			for _, ch := range after {
				<-ch // no slot held while waiting: the slots' holders can always finish
			}
			if failed() {
				c.execMu.Lock()
				c.keepNews(d)
				c.execMu.Unlock()
				return
			}
			slots <- struct{}{}
			defer func() { <-slots }()
			ok, err := c.carryOut(ctx, d)
			mu.Lock()
			defer mu.Unlock()
			wrote = wrote || ok
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	return wrote, firstErr
}

// touched appends the aggregates a decision and its follow-ups append to.
func touched(d plan.Decision, into []string) []string {
	into = append(into, d.Name)
	for _, t := range d.Then {
		into = touched(t, into)
	}
	return into
}

// executeParallel is how many decisions a pass carries out at once. One
// after another, a pass that replaced hundreds of servers on a loaded
// machine spent seconds in round trips (11.8 s a pass at 100,000 servers
// and 50 matches a second, docs/scaling.md), and replacements fell behind.
const executeParallel = 16

// carryOut appends one decision and sends its command, then its
// follow-ups. It reports whether anything was appended.
func (c *Controller) carryOut(ctx context.Context, d plan.Decision) (wrote bool, err error) {
	if len(d.Events) > 0 {
		res, err := write.Do(ctx, c.opts.Store, write.Op{
			Name:    d.Name,
			Subject: d.Subject,
			Read:    func(context.Context) (uint64, error) { return d.Guard, nil },
			Decide:  func(context.Context) ([]proto.Message, error) { return d.Events, nil },
			Stamp:   func(context.Context) events.Stamp { return c.stamp() },
		}, write.Policy{Attempts: 1}) // decided on the views: a conflict is decided again next pass
		if errors.Is(err, events.ErrConflict) {
			c.log.Debug("aggregate changed under the decision; next pass", "action", d.Action, "aggregate", d.Name)
			c.execMu.Lock()
			c.keepNews(d)
			c.execMu.Unlock()
			return false, nil
		}
		if err != nil {
			c.execMu.Lock()
			c.keepNews(d)
			c.execMu.Unlock()
			return false, fmt.Errorf("%s %s: %w", d.Action, d.Name, err)
		}
		c.execMu.Lock()
		c.written = max(c.written, res.Sequence)
		c.execMu.Unlock()
		wrote = true
		c.count(ctx, d)
		c.report(d)
	}
	if d.Command != nil {
		if err := c.opts.Commands.Send(ctx, d.Host, c.producer, d.Command); err != nil {
			c.log.Error("send command", "action", d.Action, "game_server", d.Name, "host", d.Host, "err", err)
		} else if d.Action == plan.ActResend {
			c.execMu.Lock()
			c.startResent[d.Name] = c.opts.Clock.Now()
			c.execMu.Unlock()
			c.report(d)
		}
	}
	for _, t := range d.Then {
		ok, err := c.carryOut(ctx, t)
		wrote = wrote || ok
		if err != nil {
			return wrote, err
		}
	}
	return wrote, nil
}

// keepNews keeps the start news of a starts decision that was not
// appended for the next pass. The caller holds execMu.
func (c *Controller) keepNews(d plan.Decision) {
	if d.Action == plan.ActStarts && d.News != nil && c.starts.pending != nil {
		c.starts.pending[d.Name] = d.News.Merge(c.starts.pending[d.Name])
	}
}

// count adds an appended decision to the metrics.
func (c *Controller) count(ctx context.Context, d plan.Decision) {
	switch d.Action {
	case plan.ActSchedule:
		c.scheduled.Add(ctx, 1)
	case plan.ActShutdown, plan.ActTerminate:
		c.shutdowns.Add(ctx, 1)
	}
}

// report logs a decision carried out.
func (c *Controller) report(d plan.Decision) {
	level := slog.LevelInfo
	switch d.Action {
	case plan.ActHost, plan.ActTerminate, plan.ActResend:
		level = slog.LevelWarn
	}
	types := make([]string, len(d.Events))
	for i, m := range d.Events {
		types[i] = events.TypeOf(m)
	}
	attrs := append([]any{"action", string(d.Action), "events", types}, d.Attrs...)
	c.log.Log(context.Background(), level, d.Say, attrs...)
}
