package controller

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller/plan"
)

// orderStore records appends in order and guards each subject by its last
// sequence. Appends to slowSubject wait until another subject's append
// arrives or hold elapses: a decision that ran ahead of it while it
// waited is then in the record before it.
type orderStore struct {
	slowSubject string
	hold        time.Duration

	mu       sync.Mutex
	order    []string
	seqs     map[string]uint64
	arrived  chan struct{} // an append to another subject arrived
	signaled bool
}

func (s *orderStore) Append(_ context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	if subject == s.slowSubject {
		select {
		case <-s.arrived:
		case <-time.After(s.hold):
		}
	} else {
		s.mu.Lock()
		if !s.signaled {
			s.signaled = true
			close(s.arrived)
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if expected != events.AnySequence && s.seqs[subject] != expected {
		s.order = append(s.order, subject+" conflict")
		return 0, events.ErrConflict
	}
	s.seqs[subject] += uint64(len(evs))
	s.order = append(s.order, subject)
	return s.seqs[subject], nil
}

func (s *orderStore) StreamLastSequence(context.Context) (uint64, error) { return 0, nil }

// TestExecuteKeepsThePlansOrderOnAnAggregate: a pass carries out its
// decisions concurrently, but two that decide on the same game server run
// in the plan's order. A lost host's termination of a server (a follow-up
// of the host's verdict, decided only then) is planned before a later
// decision on that server, and must win it even when the host's own append
// is slow; decisions on other aggregates go ahead meanwhile.
func TestExecuteKeepsThePlansOrderOnAnAggregate(t *testing.T) {
	const server, other = "fleets/arena/gameServers/gs-1", "fleets/arena/gameServers/gs-2"
	hostSubject := events.MustSubject("hosts/h1")
	store := &orderStore{slowSubject: hostSubject, hold: 2 * time.Second, seqs: map[string]uint64{}, arrived: make(chan struct{})}
	c := &Controller{opts: Options{Store: store, Clock: clockwork.NewFakeClock()}, log: slog.New(slog.DiscardHandler), producer: "controllers/test"}
	ended := func(name string) plan.Decision {
		return plan.Decision{Action: plan.ActSession, Name: name, Events: []proto.Message{&eventsv1.GameSessionEnded{}}}
	}
	hostLost := ended("hosts/h1")
	hostLost.Then = []plan.Decision{ended(server)}
	p := plan.Plan{Decisions: []plan.Decision{hostLost, ended(other), ended(server)}}
	if _, err := c.execute(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	// The other server's decision has no order to keep with these.
	mine := slices.DeleteFunc(slices.Clone(store.order), func(s string) bool { return s == events.MustSubject(other) })
	want := []string{hostSubject, events.MustSubject(server), events.MustSubject(server) + " conflict"}
	if !slices.Equal(mine, want) || len(store.order) != 4 {
		t.Fatalf("appends in the order %v, want %v and the other server's (the server's later decision ran ahead of the host's follow-up)", store.order, want)
	}
}
