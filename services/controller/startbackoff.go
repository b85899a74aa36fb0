package controller

import (
	"context"
	"fmt"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller/plan"
)

// The start backoff (plan/startbackoff.go, docs/crash-loops.md) decides
// from the game servers changed since the last pass: the controller reads
// them here, and keeps what it could not record yet for the next pass.

// startWatch follows the game servers that end before READY, between passes.
type startWatch struct {
	read  bool   // after is set: this leadership has read once
	after uint64 // the largest game server sequence read
	// pending are failures not recorded yet (an append conflicted), by fleet.
	pending map[string]*plan.StartNews
	// counted are servers counted while UNHEALTHY: their termination is
	// the same failure.
	counted map[string]bool
}

// firstRead is where a new leader starts reading changed game servers:
// from the views' checkpoint, or earlier, from the last failure counted of
// a fleet that is failing (its later failures may not be counted yet).
func firstRead(fleets []projections.FleetRow, checkpoint uint64) uint64 {
	from := checkpoint
	for _, f := range fleets {
		if sf := f.State.GetStartFailing(); sf != nil {
			from = min(from, sf.GetFailureSequence())
		}
	}
	return from
}

// readStarts reads the game servers changed since the last pass and
// returns, per fleet, what they say about starts, with what earlier passes
// could not record yet (pending); the executor puts back what it cannot
// record this pass.
func (c *Controller) readStarts(ctx context.Context, fleets []projections.FleetRow) (map[string]*plan.StartNews, error) {
	w := &c.starts
	if !w.read {
		cp, err := c.opts.Views.Checkpoint(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the views' checkpoint: %w", err)
		}
		w.after, w.read, w.pending, w.counted = firstRead(fleets, cp), true, map[string]*plan.StartNews{}, map[string]bool{}
	}
	rows, err := c.opts.Views.GameServersChangedSince(ctx, w.after)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*eventsv1.FleetState, len(fleets))
	for _, f := range fleets {
		byName[f.State.GetName()] = f.State
	}
	for _, r := range rows {
		w.after = max(w.after, r.Sequence)
	}
	news := plan.ClassifyStarts(rows, byName, w.counted)
	for name, n := range w.pending {
		if _, ok := byName[name]; ok {
			news[name] = n.Merge(news[name])
		}
	}
	w.pending = map[string]*plan.StartNews{} // the fleet is gone, or its news are in this pass's snapshot
	return news, nil
}
