package dev_test

import (
	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// eachMoment folds a fleet's game-server events in stream order and calls
// at with every server's state after each event at or past stream
// sequence from: the fleet as its history saw it at every moment, not
// samples of it.
func (s *stack) eachMoment(fleet string, from uint64, at func(states map[string]*eventsv1.GameServerState)) {
	s.t.Helper()
	hist, err := s.store.History(s.ctx, events.FleetGameServersSubject(fleet), 0)
	if err != nil {
		s.t.Fatal(err)
	}
	states := map[string]*eventsv1.GameServerState{}
	for _, e := range hist {
		st, err := events.ApplyGameServer(states[e.Aggregate], e)
		if err != nil {
			s.t.Fatalf("fold %s: %v", e.Aggregate, err)
		}
		states[e.Aggregate] = st
		if e.Sequence >= from {
			at(states)
		}
	}
}

// countIn counts the states whose lifecycle is one of ls.
func countIn(states map[string]*eventsv1.GameServerState, ls ...eventsv1.Lifecycle) int {
	n := 0
	for _, st := range states {
		for _, l := range ls {
			if st.GetLifecycle() == l {
				n++
				break
			}
		}
	}
	return n
}

// The lifecycles a moment counts.
var (
	servingStates = []eventsv1.Lifecycle{eventsv1.Lifecycle_LIFECYCLE_READY, eventsv1.Lifecycle_LIFECYCLE_RESERVED, eventsv1.Lifecycle_LIFECYCLE_ALLOCATED}
	endedStates   = []eventsv1.Lifecycle{eventsv1.Lifecycle_LIFECYCLE_TERMINATED}
	leavingStates = []eventsv1.Lifecycle{eventsv1.Lifecycle_LIFECYCLE_TERMINATED, eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN}
)
