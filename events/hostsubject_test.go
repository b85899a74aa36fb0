package events_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// TestAServerFoldsOnlyItsOwnSubject: a server placed on a host subject
// takes the events read from that subject and refuses, with
// ErrForeignSubject, those read from another host's subject of the same
// name (which that host may publish on) or from the subject of servers
// before host subjects; a server placed before them takes only its own
// subject. Events not read from the stream (no Subject) pass.
func TestAServerFoldsOnlyItsOwnSubject(t *testing.T) {
	name := events.GameServerName("arena", "gs-1")
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	own, _ := events.GameServerSubject(name, "hosts/h1")
	other, _ := events.GameServerSubject(name, "hosts/h2")
	legacy := events.MustSubject(name)
	on := func(subject string, data *eventsv1.GameServerScheduled) events.Envelope {
		e := events.New(name, at, data)
		e.Subject = subject
		return e
	}
	ready := func(subject string) events.Envelope {
		e := events.New(name, at, &eventsv1.ProcessStarted{Pid: 1})
		e.Subject = subject
		return e
	}
	tests := []struct {
		name        string
		hostSubject bool
		scheduledOn string
		nextOn      string
		wantFirst   error
		wantNext    error
	}{
		{"host subject, own", true, own, own, nil, nil},
		{"host subject, next on another host's", true, own, other, nil, events.ErrForeignSubject},
		{"host subject, next on the old subject", true, own, legacy, nil, events.ErrForeignSubject},
		{"host subject, scheduled on another host's", true, other, other, events.ErrForeignSubject, nil},
		{"old subject, own", false, legacy, legacy, nil, nil},
		{"old subject, next on a host subject", false, legacy, own, nil, events.ErrForeignSubject},
		{"not read from the stream", true, "", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, err := events.ApplyGameServer(nil, on(tt.scheduledOn, &eventsv1.GameServerScheduled{Host: "hosts/h1", HostSubject: tt.hostSubject}))
			if !errors.Is(err, tt.wantFirst) || (tt.wantFirst == nil && err != nil) {
				t.Fatalf("scheduled: %v, want %v", err, tt.wantFirst)
			}
			if err != nil {
				return
			}
			if got, err := events.SubjectOf(state); err != nil || (tt.hostSubject && got != own) || (!tt.hostSubject && got != legacy) {
				t.Fatalf("SubjectOf = %q, %v", got, err)
			}
			_, err = events.ApplyGameServer(state, ready(tt.nextOn))
			if !errors.Is(err, tt.wantNext) || (tt.wantNext == nil && err != nil) {
				t.Fatalf("next: %v, want %v", err, tt.wantNext)
			}
			if events.Skipped(err) {
				t.Fatalf("a foreign event is Skipped (it would take a place in the server's row): %v", err)
			}
		})
	}
}
