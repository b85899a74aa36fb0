package apiserver_test

import (
	"context"
	"slices"
	"testing"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// A watch filtered by fleet keeps the fleet's game sessions' and player
// sessions' events too (their names carry no fleet): those of sessions
// created while it watches, and, from the views, of sessions created
// before it started. Another fleet's sessions stay out.
func TestWatchByFleetKeepsItsSessions(t *testing.T) {
	s := newStack(t, stackOptions{})
	hc := historyClient(t, s.grpcAddrs[0])
	arena, duel := events.FleetName("arena"), events.FleetName("duel")
	gsA, gsD := events.GameServerName("arena", "gs-1"), events.GameServerName("duel", "gs-2")
	s.appendAs(arena, "apiservers/x", &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 1}})
	s.appendAs(duel, "apiservers/x", &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 1}})
	s.appendAs(gsA, "controllers/c1", &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	s.appendAs(gsD, "controllers/c1", &eventsv1.GameServerScheduled{Host: "hosts/h2"})
	// A session of each fleet before the watch starts: the views tell
	// whose they are.
	early, earlyD := "gameSessions/early", "gameSessions/early-duel"
	s.appendAs(early, "apiservers/x", &eventsv1.GameSessionCreated{GameServer: gsA, Host: "hosts/h1"})
	start := s.appendAs(earlyD, "apiservers/x", &eventsv1.GameSessionCreated{GameServer: gsD, Host: "hosts/h2"})
	s.waitApplied(start)

	late, lateD := "gameSessions/late", "gameSessions/late-duel"
	want := []uint64{
		s.appendAs("gameSessions/early/playerSessions/p1", "hosts/h1", &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "p1", PlayerId: "p1"}}),
	}
	s.appendAs("gameSessions/early-duel/playerSessions/p2", "hosts/h2", &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "p2", PlayerId: "p2"}})
	want = append(want, s.appendAs(late, "apiservers/x", &eventsv1.GameSessionCreated{GameServer: gsA, Host: "hosts/h1"}))
	s.appendAs(lateD, "apiservers/x", &eventsv1.GameSessionCreated{GameServer: gsD, Host: "hosts/h2"})
	want = append(want,
		s.appendAs("gameSessions/late/playerSessions/p3", "hosts/h1", &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "p3", PlayerId: "p3"}}),
		s.appendAs(gsA, "hosts/h1", &eventsv1.GameServerReady{}),
	)
	s.appendAs("gameSessions/late-duel/playerSessions/p4", "hosts/h2", &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "p4", PlayerId: "p4"}})
	want = append(want, s.appendAs(late, "controllers/c1", &eventsv1.GameSessionEnded{}))
	s.waitApplied(want[len(want)-1])

	stream, err := hc.WatchEvents(context.Background(), &tetherv1.WatchEventsRequest{Fleet: arena, AfterSequence: int64(start), EndTime: farFuture()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvSequences(stream)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v (%v), want %v: the arena fleet's server, sessions and player sessions only", got, err, want)
	}
}

// A watch filtered by fleet, resumed after a game session's creation while
// the views do not show the session yet (the projector is behind: here,
// stopped), keeps the session's later events: its fleet is read from its
// GameSessionCreated in the stream. Before, they were dropped, a gap in a
// watch that promises none.
func TestWatchByFleetResumedBeforeTheViewsKeepsItsSessions(t *testing.T) {
	s := newStack(t, stackOptions{lateProjector: true})
	hc := historyClient(t, s.grpcAddrs[0])
	gsA := events.GameServerName("arena", "gs-1")
	s.appendAs(events.FleetName("arena"), "apiservers/x", &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 1}})
	s.appendAs(gsA, "controllers/c1", &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	created := s.appendAs("gameSessions/g1", "apiservers/x", &eventsv1.GameSessionCreated{GameServer: gsA, Host: "hosts/h1"})
	want := []uint64{
		s.appendAs("gameSessions/g1/playerSessions/p1", "hosts/h1", &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "p1", PlayerId: "p1"}}),
		s.appendAs("gameSessions/g1", "controllers/c1", &eventsv1.GameSessionEnded{}),
	}
	stream, err := hc.WatchEvents(context.Background(), &tetherv1.WatchEventsRequest{Fleet: events.FleetName("arena"), AfterSequence: int64(created), EndTime: farFuture()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvSequences(stream)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v (%v), want %v: the session's events after the watch resumed", got, err, want)
	}
}
