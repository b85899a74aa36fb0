package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// fullReadEvery is how often kept rows are read whole instead of as
// changes: a safety net (e.g. after a projection rebuild swapped the
// tables), not something correctness depends on.
const fullReadEvery = time.Minute

// named is a view's state with a resource name.
type named interface {
	proto.Message
	GetName() string
}

// keptRows keeps a view's rows between passes and reads only the rows the
// projector changed since the last read: each row carries the sequence of
// its aggregate's last event (docs/architecture.md, "Views (PostgreSQL)").
// At 100,000 servers a full read and decode of the live servers each pass
// took 2.5 s; at 10,000 hosts the hosts' read with their servers counted,
// 18 ms of PostgreSQL a pass (docs/scaling.md).
type keptRows[S named] struct {
	// all reads every row; changed, the rows whose last event is after a
	// sequence, in sequence order; gone tells a row to drop (a TERMINATED
	// server), nil if rows stay.
	all     func(ctx context.Context) ([]projections.Row[S], error)
	changed func(ctx context.Context, after uint64) ([]projections.Row[S], error)
	gone    func(S) bool

	sorted   []projections.Row[S] // by name, kept in order as they change; nil: never read
	after    uint64               // the largest sequence read
	fullRead time.Time            // when they were last read whole
}

// liveServers keeps the game servers not yet TERMINATED.
func liveServers(views viewReader) keptRows[*eventsv1.GameServerState] {
	return keptRows[*eventsv1.GameServerState]{
		all: views.LiveGameServers, changed: views.GameServersChangedSince,
		gone: func(s *eventsv1.GameServerState) bool {
			return s.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED
		},
	}
}

// knownHosts keeps every host the views know (hosts are never removed).
func knownHosts(views viewReader) keptRows[*eventsv1.HostState] {
	return keptRows[*eventsv1.HostState]{
		all: func(ctx context.Context) ([]projections.Row[*eventsv1.HostState], error) {
			return views.HostsChangedSince(ctx, 0)
		},
		changed: views.HostsChangedSince,
	}
}

// read returns the rows, ordered by name. The slice is the caller's.
func (k *keptRows[S]) read(ctx context.Context) ([]projections.Row[S], error) {
	if k.sorted == nil || time.Since(k.fullRead) >= fullReadEvery {
		all, err := k.all(ctx)
		if err != nil {
			return nil, err
		}
		k.sorted, k.after, k.fullRead = make([]projections.Row[S], 0, len(all)), 0, time.Now()
		for _, r := range all {
			if k.gone == nil || !k.gone(r.State) {
				k.sorted = append(k.sorted, r)
			}
			k.after = max(k.after, r.Sequence)
		}
		slices.SortFunc(k.sorted, byName) // the views' order is theirs; the pass's is by name
		return slices.Clone(k.sorted), nil
	}
	changed, err := k.changed(ctx, k.after)
	if err != nil {
		return nil, err
	}
	// A pass sees a handful of changes among 100,000 rows: each is placed
	// in the sorted list by a binary search, rather than the whole list
	// sorted again each pass.
	for _, r := range changed {
		i, found := searchByName(k.sorted, r.State.GetName())
		switch {
		case k.gone != nil && k.gone(r.State):
			if found {
				k.sorted = slices.Delete(k.sorted, i, i+1)
			}
		case found:
			k.sorted[i] = r
		default:
			k.sorted = slices.Insert(k.sorted, i, r)
		}
		k.after = max(k.after, r.Sequence)
	}
	return slices.Clone(k.sorted), nil // the pass may keep or reorder its copy
}

// searchByName finds a row by its resource's name in rows ordered by
// name: its index, or where it would be inserted.
func searchByName[S named](rows []projections.Row[S], name string) (int, bool) {
	return slices.BinarySearchFunc(rows, name, func(row projections.Row[S], name string) int {
		return strings.Compare(row.State.GetName(), name)
	})
}

// byName orders rows by their resource's name.
func byName[S named](a, b projections.Row[S]) int {
	return strings.Compare(a.State.GetName(), b.State.GetName())
}

// reset forgets the rows: the next read is whole (a new leadership).
func (k *keptRows[S]) reset() { k.sorted = nil }

// withUse pairs each host with its servers not yet TERMINATED, counted from
// the live servers of the same pass.
func withUse(hosts []projections.Row[*eventsv1.HostState], servers []projections.Row[*eventsv1.GameServerState]) []projections.HostRow {
	used := make(map[string]int32, len(hosts))
	for _, r := range servers {
		used[r.State.GetHost()]++
	}
	out := make([]projections.HostRow, len(hosts))
	for i, h := range hosts {
		out[i] = projections.HostRow{Row: h, Used: used[h.State.GetName()]}
	}
	return out
}
