package write_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// store is a one-subject event store with guarded appends: a fake of
// events/natsjs's contract (which natsjs's own tests hold it to).
type store struct {
	seq      uint64
	appended []events.Envelope
	// conflicts makes the next appends fail as if someone wrote first.
	conflicts int
}

func (s *store) Append(_ context.Context, _ string, expected uint64, evs ...events.Envelope) (uint64, error) {
	if s.conflicts > 0 {
		s.conflicts--
		s.seq++ // the other writer's event
		return 0, events.ErrConflict
	}
	if expected != s.seq {
		return 0, events.ErrConflict
	}
	s.seq += uint64(len(evs))
	s.appended = append(s.appended, evs...)
	return s.seq, nil
}

func op(s *store, decided *int) write.Op {
	return write.Op{
		Name: "fleets/arena",
		Read: func(context.Context) (uint64, error) { return s.seq, nil },
		Decide: func(context.Context) ([]proto.Message, error) {
			*decided++
			return []proto.Message{&eventsv1.FleetDeleted{}}, nil
		},
		Stamp: func(context.Context) events.Stamp {
			return events.Stamp{Producer: "apiservers/r1", Actor: "alice", Time: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}
		},
	}
}

func TestConflictsAreDecidedAgainWithinThePolicy(t *testing.T) {
	s := &store{seq: 4, conflicts: 2}
	decided := 0
	res, err := write.Do(context.Background(), s, op(s, &decided), write.Policy{Attempts: 3})
	if err != nil || decided != 3 || res.Sequence != 7 || len(res.Events) != 1 {
		t.Fatalf("result %+v, err %v, decided %d times", res, err, decided)
	}
	if e := s.appended[0]; e.Actor != "alice" || e.Producer != "apiservers/r1" || e.Aggregate != "fleets/arena" {
		t.Fatalf("appended %+v", e)
	}

	s = &store{seq: 4, conflicts: 2}
	decided = 0
	_, err = write.Do(context.Background(), s, op(s, &decided), write.Policy{Attempts: 2})
	if !errors.Is(err, events.ErrConflict) || decided != 2 || len(s.appended) != 0 {
		t.Fatalf("err %v after %d decisions, %d appended", err, decided, len(s.appended))
	}
}

func TestNothingDecidedWritesNothing(t *testing.T) {
	s := &store{seq: 9}
	o := op(s, new(int))
	o.Decide = func(context.Context) ([]proto.Message, error) { return nil, nil }
	res, err := write.Do(context.Background(), s, o, write.Policy{})
	if err != nil || res.Sequence != 9 || len(res.Events) != 0 || len(s.appended) != 0 {
		t.Fatalf("result %+v, err %v", res, err)
	}
}

func TestRefusalsAndReadErrorsStopTheWrite(t *testing.T) {
	refused := errors.New("refused")
	s := &store{}
	o := op(s, new(int))
	o.Decide = func(context.Context) ([]proto.Message, error) { return nil, refused }
	if _, err := write.Do(context.Background(), s, o, write.Policy{Attempts: 5}); !errors.Is(err, refused) {
		t.Fatalf("err %v", err)
	}
	o = op(s, new(int))
	o.Read = func(context.Context) (uint64, error) { return 0, refused }
	if _, err := write.Do(context.Background(), s, o, write.Policy{Attempts: 5}); !errors.Is(err, refused) {
		t.Fatalf("err %v", err)
	}
	o = op(s, new(int))
	o.Name = "not a name"
	if _, err := write.Do(context.Background(), s, o, write.Policy{}); err == nil {
		t.Fatal("a write to a name without a subject was carried out")
	}
}
