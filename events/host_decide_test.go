package events_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestDecideHostLiveness(t *testing.T) {
	const name = "hosts/h1"
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	fold := func(s *eventsv1.HostState, cmd events.HostCommand) (*eventsv1.HostState, string) {
		t.Helper()
		msgs, err := events.DecideHost(name, s, cmd)
		if err != nil {
			t.Fatalf("%T: %v", cmd, err)
		}
		if len(msgs) == 0 {
			return s, ""
		}
		next, err := events.ApplyHost(s, events.New(name, at, msgs[0]))
		if err != nil {
			t.Fatal(err)
		}
		return next, events.TypeOf(msgs[0])
	}
	s, err := events.ApplyHost(nil, events.New(name, at, &eventsv1.HostRegistered{Capacity: 2}))
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		cmd  events.HostCommand
		want string // event type, "" for none
	}{
		{events.MarkHostOnline{LastHeartbeat: at}, ""},
		{events.MarkHostUnreachable{LastHeartbeat: at}, "HostUnreachable"},
		{events.MarkHostUnreachable{LastHeartbeat: at}, ""},
		{events.MarkHostOnline{LastHeartbeat: at}, "HostOnline"},
		{events.MarkHostUnreachable{LastHeartbeat: at}, "HostUnreachable"},
		{events.MarkHostLost{LastHeartbeat: at}, "HostLost"},
		{events.MarkHostLost{LastHeartbeat: at}, ""},
		{events.MarkHostOnline{LastHeartbeat: at}, "HostOnline"},
	} {
		var got string
		s, got = fold(s, step.cmd)
		if got != step.want {
			t.Fatalf("step %d %T: event %q, want %q", i, step.cmd, got, step.want)
		}
	}
	// Lost straight from online skips the unreachable stage: refused.
	_, err = events.DecideHost(name, s, events.MarkHostLost{LastHeartbeat: at})
	var te *events.TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("lost from online: %v, want a TransitionError", err)
	}
}
