package events_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
)

// t0 is the fixed start of every test clock; no test reads the wall clock.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 plus n seconds.
func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

// asTransitionError returns err as a *TransitionError, failing the test if it
// is not one.
func asTransitionError(t *testing.T, err error) *events.TransitionError {
	t.Helper()
	var te *events.TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v (%T), want a *events.TransitionError", err, err)
	}
	return te
}

// asValidationError returns err as a *ValidationError, failing the test if it
// is not one.
func asValidationError(t *testing.T, err error) *events.ValidationError {
	t.Helper()
	var ve *events.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v (%T), want a *events.ValidationError", err, err)
	}
	return ve
}

// applyChecked calls apply and fails the test if apply modified its input.
func applyChecked[S proto.Message](t *testing.T, apply func(S, events.Envelope) (S, error), state S, e events.Envelope) (S, error) {
	t.Helper()
	before := proto.Clone(state)
	next, err := apply(state, e)
	if !proto.Equal(before, state) {
		t.Fatalf("applying %s modified its input state:\nbefore %v\nafter  %v", e.Type, before, state)
	}
	return next, err
}

// types returns the event type names of msgs.
func types(msgs []proto.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = events.TypeOf(m)
	}
	return out
}

// tsAt is at(n) as a protobuf timestamp.
func tsAt(n int) *timestamppb.Timestamp { return timestamppb.New(at(n)) }
