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
	sorted   []projections.Row[*eventsv1.GameServerState] // by name, kept in order as they change; nil: never read
	after    uint64                                       // the largest sequence read
	fullRead time.Time                                    // when they were last read whole
}

// read returns the live servers, ordered by name.
func (l *liveServers) read(ctx context.Context, views viewReader) ([]projections.Row[*eventsv1.GameServerState], error) {
	if l.sorted == nil || time.Since(l.fullRead) >= fullReadEvery {
		all, err := views.LiveGameServers(ctx)
		if err != nil {
			return nil, err
		}
		l.sorted, l.after, l.fullRead = append(make([]projections.Row[*eventsv1.GameServerState], 0, len(all)), all...), 0, time.Now()
		for _, r := range all {
			l.after = max(l.after, r.Sequence)
		}
		slices.SortFunc(l.sorted, byName) // the views' order is theirs; the pass's is by name
		return slices.Clone(l.sorted), nil
	}
	changed, err := views.GameServersChangedSince(ctx, l.after)
	if err != nil {
		return nil, err
	}
	// A pass sees a handful of changes among 100,000 servers: each is
	// placed in the sorted list by a binary search, rather than the whole
	// list sorted again each pass.
	for _, r := range changed {
		name := r.State.GetName()
		i, found := slices.BinarySearchFunc(l.sorted, name, func(row projections.Row[*eventsv1.GameServerState], name string) int {
			return strings.Compare(row.State.GetName(), name)
		})
		switch {
		case r.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED:
			if found {
				l.sorted = slices.Delete(l.sorted, i, i+1)
			}
		case found:
			l.sorted[i] = r
		default:
			l.sorted = slices.Insert(l.sorted, i, r)
		}
		l.after = max(l.after, r.Sequence)
	}
	return slices.Clone(l.sorted), nil // the pass may keep or reorder its copy
}

// byName orders rows by their server's name.
func byName(a, b projections.Row[*eventsv1.GameServerState]) int {
	return strings.Compare(a.State.GetName(), b.State.GetName())
}

// reset forgets the servers: the next read is whole (a new leadership).
func (l *liveServers) reset() { l.sorted = nil }
