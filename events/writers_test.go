package events_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// TestWritersAreCheckedByTheirHost walks who may write what, once readers
// verify signatures: a host agent only on its own host's aggregates, the
// control plane anywhere, an unsigned event nowhere.
func TestWritersAreCheckedByTheirHost(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	const gs, gsess = "fleets/f/gameServers/gs-1", "gameSessions/gsess-1"
	at := func(name string, writer string, data proto.Message) events.Envelope {
		e := events.New(name, t0, data)
		e.Writer = writer
		return e
	}
	// A server scheduled on h1 by the controller, and its session.
	scheduled := at(gs, "controller", &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: &eventsv1.GameServerTemplate{Command: "/bin/true",
		Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 4}}, Lists: map[string]*eventsv1.List{"players": {Capacity: 4}}}})
	server, err := events.ApplyGameServer(nil, scheduled)
	if err != nil {
		t.Fatal(err)
	}
	created := func(writer, host string) events.Envelope {
		return at(gsess, writer, &eventsv1.GameSessionCreated{GameServer: gs, Host: host,
			Players: []*eventsv1.PlayerSeat{{PlayerSession: "ps-1", PlayerId: "p1"}}})
	}
	session, err := events.ApplyGameSession(nil, created("apiserver", "hosts/h1"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		apply func() error
		ok    bool
	}{
		{"its host's agent starts the server", func() error {
			_, err := events.ApplyGameServer(server, at(gs, "hosts/h1", &eventsv1.ProcessStarted{Pid: 7}))
			return err
		}, true},
		{"another host's agent ends the server", func() error {
			_, err := events.ApplyGameServer(server, at(gs, "hosts/h2", &eventsv1.ProcessStarted{Pid: 7}))
			return err
		}, false},
		{"an unsigned event on the server", func() error {
			_, err := events.ApplyGameServer(server, at(gs, events.UnverifiedWriter, &eventsv1.ProcessStarted{Pid: 7}))
			return err
		}, false},
		{"the controller on the server", func() error {
			_, err := events.ApplyGameServer(server, at(gs, "controller", &eventsv1.ProcessStarted{Pid: 7}))
			return err
		}, true},
		{"a reader that verifies nothing", func() error {
			_, err := events.ApplyGameServer(server, at(gs, "", &eventsv1.ProcessStarted{Pid: 7}))
			return err
		}, true},
		{"its host's agent changes the server's counter (the SDK)", func() error {
			_, err := events.ApplyGameServer(server, at(gs, "hosts/h1", &eventsv1.CounterChanged{Name: "rooms", Count: 2, Capacity: 4, CountDiff: 1}))
			return err
		}, true},
		{"the API changes the server's list (an operator or matchmaker)", func() error {
			_, err := events.ApplyGameServer(server, at(gs, "apiserver", &eventsv1.ListChanged{Name: "players", Capacity: 4, Values: []string{"p1"}, Added: []string{"p1"}}))
			return err
		}, true},
		{"another host's agent changes the server's counter", func() error {
			_, err := events.ApplyGameServer(server, at(gs, "hosts/h2", &eventsv1.CounterChanged{Name: "rooms", Count: 0, Capacity: 4, CountDiff: -1}))
			return err
		}, false},
		{"another host's agent changes the server's list", func() error {
			_, err := events.ApplyGameServer(server, at(gs, "hosts/h2", &eventsv1.ListChanged{Name: "players", Capacity: 4}))
			return err
		}, false},
		{"a host agent schedules a server", func() error {
			e := scheduled
			e.Writer = "hosts/h1"
			_, err := events.ApplyGameServer(nil, e)
			return err
		}, false},
		{"a host agent registers its own host", func() error {
			_, err := events.ApplyHost(nil, at("hosts/h1", "hosts/h1", &eventsv1.HostRegistered{Capacity: 1}))
			return err
		}, true},
		{"a host agent drains its own host (--drain-on-stop)", func() error {
			h, _ := events.ApplyHost(nil, at("hosts/h1", "hosts/h1", &eventsv1.HostRegistered{Capacity: 1}))
			_, err := events.ApplyHost(h, at("hosts/h1", "hosts/h1", &eventsv1.HostDrainRequested{RequestedBy: "hosts/h1"}))
			return err
		}, true},
		{"a host agent uncordons its own host", func() error {
			h, _ := events.ApplyHost(nil, at("hosts/h1", "hosts/h1", &eventsv1.HostRegistered{Capacity: 1}))
			h, _ = events.ApplyHost(h, at("hosts/h1", "apiserver", &eventsv1.HostCordoned{RequestedBy: "ops"}))
			_, err := events.ApplyHost(h, at("hosts/h1", "hosts/h1", &eventsv1.HostUncordoned{RequestedBy: "hosts/h1"}))
			return err
		}, false},
		{"a host agent marks its own host drained", func() error {
			h, _ := events.ApplyHost(nil, at("hosts/h1", "hosts/h1", &eventsv1.HostRegistered{Capacity: 1}))
			h, _ = events.ApplyHost(h, at("hosts/h1", "apiserver", &eventsv1.HostDrainRequested{RequestedBy: "ops"}))
			_, err := events.ApplyHost(h, at("hosts/h1", "hosts/h1", &eventsv1.HostDrained{}))
			return err
		}, false},
		{"a host agent registers another host", func() error {
			_, err := events.ApplyHost(nil, at("hosts/h1", "hosts/h2", &eventsv1.HostRegistered{Capacity: 1}))
			return err
		}, false},
		{"a host agent creates a fleet", func() error {
			_, err := events.ApplyFleet(nil, at("fleets/f", "hosts/h1", &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{}}))
			return err
		}, false},
		{"a host agent creates its server's session", func() error {
			_, err := events.ApplyGameSession(nil, created("hosts/h1", "hosts/h1"))
			return err
		}, true},
		{"a host agent creates a session on another host", func() error {
			_, err := events.ApplyGameSession(nil, created("hosts/h2", "hosts/h1"))
			return err
		}, false},
		{"its host's agent accepts a player", func() error {
			_, err := events.ApplyGameSession(session, at(gsess, "hosts/h1", &eventsv1.PlayerAccepted{PlayerSession: "ps-1"}))
			return err
		}, true},
		{"another host's agent accepts a player", func() error {
			_, err := events.ApplyGameSession(session, at(gsess, "hosts/h2", &eventsv1.PlayerAccepted{PlayerSession: "ps-1"}))
			return err
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.apply()
			switch {
			case tt.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tt.ok && !errors.Is(err, events.ErrUnauthorizedWriter):
				t.Fatalf("got %v, want ErrUnauthorizedWriter", err)
			}
		})
	}
}

// TestFoldLeavesOutAForeignWritersEvent: history readers fold a server as
// the projector does, without the event its writer may not write.
func TestFoldLeavesOutAForeignWritersEvent(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	const gs = "fleets/f/gameServers/gs-1"
	sched := events.New(gs, t0, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: &eventsv1.GameServerTemplate{Command: "/bin/true"}})
	sched.Writer = "controller"
	forged := events.New(gs, t0, &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_EXITED})
	forged.Writer = "hosts/h2"
	a, ok := events.AggregateOf(events.KindGameServer)
	if !ok {
		t.Fatal("no game server aggregate")
	}
	state, err := a.Fold([]events.Envelope{sched, forged})
	if err != nil {
		t.Fatal(err)
	}
	if got := state.(*eventsv1.GameServerState).GetLifecycle(); got == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
		t.Fatal("the forged termination was folded")
	}
}
