package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// changingViews is a view of game servers that changes between reads: it
// answers the two reads liveServers makes (every other view method is
// not meant to be called: the embedded nil interface panics).
type changingViews struct {
	viewReader
	seq  uint64
	rows map[string]projections.Row[*eventsv1.GameServerState] // every server ever, terminated ones too
}

func (v *changingViews) LiveGameServers(context.Context) ([]projections.Row[*eventsv1.GameServerState], error) {
	var out []projections.Row[*eventsv1.GameServerState]
	for _, r := range v.rows {
		if r.State.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
			out = append(out, r)
		}
	}
	return out, nil // in no particular order, as a view may answer
}

func (v *changingViews) GameServersChangedSince(_ context.Context, after uint64) ([]projections.Row[*eventsv1.GameServerState], error) {
	var out []projections.Row[*eventsv1.GameServerState]
	for _, r := range v.rows {
		if r.Sequence > after {
			out = append(out, r)
		}
	}
	return out, nil
}

// set writes a server's new state at the next sequence.
func (v *changingViews) set(name string, lc eventsv1.Lifecycle) {
	v.seq++
	v.rows[name] = projections.Row[*eventsv1.GameServerState]{State: &eventsv1.GameServerState{Name: name, Lifecycle: lc}, Sequence: v.seq}
}

// TestLiveServersFollowChanges: after any run of creations, changes and
// terminations, the kept list is what a whole read sorted by name gives.
func TestLiveServersFollowChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	v := &changingViews{rows: map[string]projections.Row[*eventsv1.GameServerState]{}}
	l := liveServers(v)
	name := func() string { return fmt.Sprintf("fleets/f/gameServers/gs-%d", rng.IntN(300)) }
	for pass := range 200 {
		for range rng.IntN(20) {
			switch rng.IntN(3) {
			case 0:
				v.set(name(), eventsv1.Lifecycle_LIFECYCLE_READY)
			case 1:
				v.set(name(), eventsv1.Lifecycle_LIFECYCLE_ALLOCATED)
			default:
				v.set(name(), eventsv1.Lifecycle_LIFECYCLE_TERMINATED)
			}
		}
		got, err := l.read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want, _ := v.LiveGameServers(t.Context())
		slices.SortFunc(want, byName)
		if !slices.EqualFunc(got, want, func(a, b projections.Row[*eventsv1.GameServerState]) bool {
			return a.State.GetName() == b.State.GetName() && a.Sequence == b.Sequence
		}) {
			t.Fatalf("pass %d: kept %d servers, the views hold %d live ones (or they differ)", pass, len(got), len(want))
		}
		if len(got) > 0 {
			got[0] = projections.Row[*eventsv1.GameServerState]{} // the caller's copy: the kept list must not change
		}
	}
}
