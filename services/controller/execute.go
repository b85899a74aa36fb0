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
)

// noRoomLogEvery is how often "no host with room" is repeated for a fleet
// that stays short.
const noRoomLogEvery = time.Minute

// execute carries out a plan in order (plan.go): it appends each decision
// guarded by the sequence it was decided on and then sends its command; a
// decision's follow-ups only if it was appended. A conflict (the aggregate
// changed since the views were read) skips the decision: the next pass
// decides again. Any other append error ends the pass, since the stream
// is unavailable; the rest of the plan is decided again next pass. A
// command that cannot be sent is logged: a start is re-sent after
// StartTimeout, and a stopped server's agent reads its servers again.
//
// It reports whether anything was appended.
func (c *Controller) execute(ctx context.Context, p Plan) (wrote bool, err error) {
	for _, e := range p.refused {
		c.log.Error("decision refused", "err", e)
	}
	now := c.opts.Clock.Now()
	for _, n := range p.noRoom {
		if last, ok := c.noRoomLogged[n.fleet]; !ok || now.Sub(last) > noRoomLogEvery {
			c.log.Warn("no host with room for the fleet", "fleet", n.fleet, "missing", n.missing)
			c.noRoomLogged[n.fleet] = now
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
	for _, d := range p.decisions {
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
func touched(d decision, into []string) []string {
	into = append(into, d.name)
	for _, t := range d.then {
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
func (c *Controller) carryOut(ctx context.Context, d decision) (wrote bool, err error) {
	if len(d.events) > 0 {
		res, err := write.Do(ctx, c.opts.Store, write.Op{
			Name:    d.name,
			Subject: d.subject,
			Read:    func(context.Context) (uint64, error) { return d.guard, nil },
			Decide:  func(context.Context) ([]proto.Message, error) { return d.events, nil },
			Stamp:   func(context.Context) events.Stamp { return c.stamp() },
		}, write.Policy{Attempts: 1}) // decided on the views: a conflict is decided again next pass
		if errors.Is(err, events.ErrConflict) {
			c.log.Debug("aggregate changed under the decision; next pass", "action", d.action, "aggregate", d.name)
			c.execMu.Lock()
			c.keepNews(d)
			c.execMu.Unlock()
			return false, nil
		}
		if err != nil {
			c.execMu.Lock()
			c.keepNews(d)
			c.execMu.Unlock()
			return false, fmt.Errorf("%s %s: %w", d.action, d.name, err)
		}
		c.execMu.Lock()
		c.written = max(c.written, res.Sequence)
		c.execMu.Unlock()
		wrote = true
		c.count(ctx, d)
		c.report(d)
	}
	if d.command != nil {
		if err := c.opts.Commands.Send(ctx, d.host, c.producer, d.command); err != nil {
			c.log.Error("send command", "action", d.action, "game_server", d.name, "host", d.host, "err", err)
		} else if d.action == actResend {
			c.execMu.Lock()
			c.startResent[d.name] = c.opts.Clock.Now()
			c.execMu.Unlock()
			c.report(d)
		}
	}
	for _, t := range d.then {
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
func (c *Controller) keepNews(d decision) {
	if d.action == actStarts && d.news != nil && c.starts.pending != nil {
		c.starts.pending[d.name] = d.news.merge(c.starts.pending[d.name])
	}
}

// count adds an appended decision to the metrics.
func (c *Controller) count(ctx context.Context, d decision) {
	switch d.action {
	case actSchedule:
		c.scheduled.Add(ctx, 1)
	case actShutdown, actTerminate:
		c.shutdowns.Add(ctx, 1)
	}
}

// report logs a decision carried out.
func (c *Controller) report(d decision) {
	level := slog.LevelInfo
	switch d.action {
	case actHost, actTerminate, actResend:
		level = slog.LevelWarn
	}
	types := make([]string, len(d.events))
	for i, m := range d.events {
		types[i] = events.TypeOf(m)
	}
	attrs := append([]any{"action", string(d.action), "events", types}, d.attrs...)
	c.log.Log(context.Background(), level, d.say, attrs...)
}
