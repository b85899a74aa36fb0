package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// fullReadEvery is how often the live servers are read whole instead of as
// changes: a safety net (e.g. after a projection rebuild swapped the
// tables), not something correctness depends on.
const fullReadEvery = time.Minute

// liveServers keeps the live game servers between passes and reads only
// the rows the projector changed since the last read (DESIGN.md §5): at
// 100,000 servers a full read and decode each pass took 2.5 s
// (docs/scaling.md).
type liveServers struct {
	rows     map[string]projections.Row[*eventsv1.GameServerState]
	after    uint64    // the largest sequence read
	fullRead time.Time // when they were last read whole
}

// read returns the live servers, ordered by name.
func (l *liveServers) read(ctx context.Context, views viewReader) ([]projections.Row[*eventsv1.GameServerState], error) {
	if l.rows == nil || time.Since(l.fullRead) >= fullReadEvery {
		all, err := views.LiveGameServers(ctx)
		if err != nil {
			return nil, err
		}
		l.rows, l.after, l.fullRead = make(map[string]projections.Row[*eventsv1.GameServerState], len(all)), 0, time.Now()
		for _, r := range all {
			l.rows[r.State.GetName()] = r
			l.after = max(l.after, r.Sequence)
		}
		return all, nil
	}
	changed, err := views.GameServersChangedSince(ctx, l.after)
	if err != nil {
		return nil, err
	}
	for _, r := range changed {
		if r.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
			delete(l.rows, r.State.GetName())
		} else {
			l.rows[r.State.GetName()] = r
		}
		l.after = max(l.after, r.Sequence)
	}
	out := make([]projections.Row[*eventsv1.GameServerState], 0, len(l.rows))
	for _, r := range l.rows {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b projections.Row[*eventsv1.GameServerState]) int {
		return strings.Compare(a.State.GetName(), b.State.GetName())
	})
	return out, nil
}

// reset forgets the servers: the next read is whole (a new leadership).
func (l *liveServers) reset() { l.rows = nil }
