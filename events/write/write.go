// Package write is Tether's write path for one aggregate, shared by every
// writer: decide on the state read, stamp the events (events.Stamp), append
// them guarded by the sequence read, and on a conflict (someone wrote
// first) read again and decide again, as many times as the policy allows.
//
// What "read" means is the writer's: the API waits for the views, an agent
// folds the stream into the state it keeps, the controller's executor
// carries a decision made in its plan (one attempt: a conflict waits for
// the next pass). The allocator alone writes otherwise, for the reasons
// its doc gives (services/apiserver, allocationService).
package write

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
)

// Store is the event store's guarded append (events/natsjs).
type Store interface {
	Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error)
}

// Policy is how a write treats conflicts.
type Policy struct {
	// Attempts is how many times the command is decided; 1 returns the
	// first conflict. Default 1.
	Attempts int
}

// Op is one command on one aggregate.
type Op struct {
	// Name is the aggregate's resource name.
	Name string
	// Subject is the aggregate's stream subject; default events.Subject of
	// Name. A game server's is its own (events.SubjectOf its state).
	Subject string
	// Read reads the aggregate (or brings the caller's copy up to date) and
	// returns the sequence of its last event: the guard of the append. It
	// runs before each decision.
	Read func(ctx context.Context) (uint64, error)
	// Decide decides the command on what Read read; no events means
	// there is nothing to write.
	Decide func(ctx context.Context) ([]proto.Message, error)
	// Stamp is the writer's stamp (events.Stamp).
	Stamp func(ctx context.Context) events.Stamp
}

// Result is what a write did.
type Result struct {
	// Sequence is the stream sequence of the last event appended, or the
	// sequence read if there was nothing to write.
	Sequence uint64
	// Events are the envelopes appended; none if there was nothing to write.
	Events []events.Envelope
}

// Do runs op: read, decide, stamp, append guarded; on events.ErrConflict
// again, up to p.Attempts times. The error after the last conflict wraps
// events.ErrConflict; the others are Read's, Decide's or the store's.
func Do(ctx context.Context, store Store, op Op, p Policy) (Result, error) {
	subject := op.Subject
	if subject == "" {
		var err error
		if subject, err = events.Subject(op.Name); err != nil {
			return Result{}, err
		}
	}
	attempts := max(p.Attempts, 1)
	for range attempts {
		seq, err := op.Read(ctx)
		if err != nil {
			return Result{}, err
		}
		msgs, err := op.Decide(ctx)
		if err != nil {
			return Result{}, err
		}
		if len(msgs) == 0 {
			return Result{Sequence: seq}, nil
		}
		envs := op.Stamp(ctx).Envelopes(op.Name, msgs)
		last, err := store.Append(ctx, subject, seq, envs...)
		if errors.Is(err, events.ErrConflict) {
			continue
		}
		if err != nil {
			return Result{}, err
		}
		return Result{Sequence: last, Events: envs}, nil
	}
	return Result{}, fmt.Errorf("%s: %w (decided %d times)", op.Name, events.ErrConflict, attempts)
}
