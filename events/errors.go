package events

import (
	"errors"
	"fmt"
)

// ErrConflict is returned by an append whose expected aggregate sequence is
// no longer the aggregate's last: someone else wrote first. Callers re-read
// and decide again.
var ErrConflict = errors.New("events: conflicting append: the aggregate changed")

// ErrUnavailable is returned by an append that the event store could not
// take for now (no stream leader during a NATS election, no connection):
// nothing was refused, and the same append may be retried.
var ErrUnavailable = errors.New("events: the event store is unavailable for now")

// PartialAppendError is an append of several events that stored the first
// Stored of them and then failed with Err (a conflict: another writer came
// between two of them; or the store went away). Those stored stay stored;
// errors.Is and errors.As see Err through it.
type PartialAppendError struct {
	Stored int
	Err    error
}

func (e *PartialAppendError) Error() string {
	return fmt.Sprintf("%v (after %d events of the append were stored)", e.Err, e.Stored)
}

// Unwrap returns Err.
func (e *PartialAppendError) Unwrap() error { return e.Err }

// AnySequence, as an expected sequence, appends without a concurrency check.
const AnySequence = ^uint64(0)

// TransitionError is an event or command that the aggregate's state does not
// allow, e.g. GameServerReady on a TERMINATED server.
type TransitionError struct {
	// Aggregate is the resource name.
	Aggregate string
	// From describes the state, e.g. "TERMINATED".
	From string
	// Event is the event type or command that was refused.
	Event string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("events: %s: %s not allowed in state %s", e.Aggregate, e.Event, e.From)
}

// ValidationError is a command with a bad field.
type ValidationError struct {
	// Field is the request field path, e.g. "fleet.replicas".
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// Invalid returns a *ValidationError.
func Invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
