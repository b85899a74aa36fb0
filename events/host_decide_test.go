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

// A host's cordon, drain and uncordon, as an operator and the controller
// decide them: each is recorded once, a drain cordons, a drained host
// stays drained across an agent restart and an outage, and an uncordon
// ends all of it.
func TestDecideHostCordonAndDrain(t *testing.T) {
	const name = "hosts/h1"
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s, err := events.ApplyHost(nil, events.New(name, at, &eventsv1.HostRegistered{Capacity: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if !events.Schedulable(s) {
		t.Fatal("a new ONLINE host is not schedulable")
	}
	for i, step := range []struct {
		cmd         events.HostCommand
		event       string // event type, "" for none
		status      eventsv1.HostStatus
		schedulable bool
		by          string
	}{
		{events.MarkHostDrained{}, "", eventsv1.HostStatus_HOST_STATUS_ONLINE, true, ""},
		{events.CordonHost{By: "ann"}, "HostCordoned", eventsv1.HostStatus_HOST_STATUS_ONLINE, false, "ann"},
		{events.CordonHost{By: "bob"}, "", eventsv1.HostStatus_HOST_STATUS_ONLINE, false, "ann"},
		{events.DrainHost{By: "bob"}, "HostDrainRequested", eventsv1.HostStatus_HOST_STATUS_DRAINING, false, "bob"},
		{events.DrainHost{By: "ann"}, "", eventsv1.HostStatus_HOST_STATUS_DRAINING, false, "bob"},
		{events.MarkHostUnreachable{LastHeartbeat: at}, "HostUnreachable", eventsv1.HostStatus_HOST_STATUS_UNREACHABLE, false, "bob"},
		{events.MarkHostOnline{LastHeartbeat: at}, "HostOnline", eventsv1.HostStatus_HOST_STATUS_DRAINING, false, "bob"},
		{events.MarkHostDrained{}, "HostDrained", eventsv1.HostStatus_HOST_STATUS_DRAINED, false, "bob"},
		{events.MarkHostDrained{}, "", eventsv1.HostStatus_HOST_STATUS_DRAINED, false, "bob"},
		{events.DrainHost{By: "ann"}, "", eventsv1.HostStatus_HOST_STATUS_DRAINED, false, "bob"},
		{events.UncordonHost{By: "ann"}, "HostUncordoned", eventsv1.HostStatus_HOST_STATUS_ONLINE, true, ""},
		{events.UncordonHost{By: "ann"}, "", eventsv1.HostStatus_HOST_STATUS_ONLINE, true, ""},
	} {
		msgs, err := events.DecideHost(name, s, step.cmd)
		if err != nil {
			t.Fatalf("step %d %T: %v", i, step.cmd, err)
		}
		got := ""
		if len(msgs) > 0 {
			got = events.TypeOf(msgs[0])
			if s, err = events.ApplyHost(s, events.New(name, at, msgs[0])); err != nil {
				t.Fatal(err)
			}
		}
		if got != step.event || s.GetStatus() != step.status || events.Schedulable(s) != step.schedulable || s.GetCordonedBy() != step.by {
			t.Fatalf("step %d %T: event %q, %v, schedulable %v, by %q; want %q, %v, %v, %q", i, step.cmd,
				got, s.GetStatus(), events.Schedulable(s), s.GetCordonedBy(), step.event, step.status, step.schedulable, step.by)
		}
	}
	// A drained host whose agent restarts stays drained.
	s, err = events.ApplyHost(s, events.New(name, at, &eventsv1.HostDrainRequested{RequestedBy: "ann"}))
	if err != nil {
		t.Fatal(err)
	}
	if s, err = events.ApplyHost(s, events.New(name, at, &eventsv1.HostDrained{})); err != nil {
		t.Fatal(err)
	}
	if s, err = events.ApplyHost(s, events.New(name, at, &eventsv1.HostRegistered{Capacity: 2})); err != nil {
		t.Fatal(err)
	}
	if s.GetStatus() != eventsv1.HostStatus_HOST_STATUS_DRAINED {
		t.Fatalf("a drained host registered again: %v, want DRAINED", s.GetStatus())
	}
	// Nothing to cordon on a host that never registered.
	var te *events.TransitionError
	if _, err := events.DecideHost(name, nil, events.CordonHost{By: "ann"}); !errors.As(err, &te) {
		t.Fatalf("cordon an unknown host: %v, want a TransitionError", err)
	}
}
