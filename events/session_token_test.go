package events_test

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestReissueToken(t *testing.T) {
	tests := []struct {
		name    string
		p1      *eventsv1.PlayerSessionState
		ended   bool
		refused string // or a PlayerTokenReissued of generation 3
	}{
		{name: "reserved", p1: withDeadline(player("p1", 1, psRESERVED), tsAt(30))},
		{name: "active (the server may not have noticed the drop)", p1: player("p1", 1, psACTIVE)},
		{name: "disconnected within its window", p1: withDeadline(player("p1", 1, psDISCONNECTED), tsAt(200))},
		{name: "disconnected past its window", p1: withDeadline(player("p1", 1, psDISCONNECTED), tsAt(20)), refused: events.RefusedPlayerSessionExpired},
		{name: "completed", p1: player("p1", 1, psCOMPLETED), refused: events.RefusedPlayerSessionExpired},
		{name: "timed out", p1: player("p1", 1, psTIMED_OUT), refused: events.RefusedPlayerSessionExpired},
		{name: "game session ended", p1: player("p1", 1, psACTIVE), ended: true, refused: events.RefusedPlayerSessionExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.p1.TokenGeneration = 2
			g := &gameSession{t: t, state: sessionState(testPolicy(), tt.p1), clock: 100}
			if tt.ended {
				g.decide(events.EndGameSession{})
			}
			before := proto.CloneOf(g.player("p1"))
			out, err := g.try(events.ReissueToken{PlayerSession: "p1", Now: at(100)})
			if tt.refused != "" {
				wantRefused(t, err, tt.refused)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := &eventsv1.PlayerTokenReissued{PlayerSession: "p1", TokenGeneration: 3}
			if len(out) != 1 || !proto.Equal(out[0], want) {
				t.Fatalf("events %v, want [%v]", out, want)
			}
			// Only the generation and the update time change.
			before.TokenGeneration, before.UpdateTime = 3, g.player("p1").GetUpdateTime()
			if p := g.player("p1"); !proto.Equal(p, before) {
				t.Fatalf("p1 = %v, want %v", p, before)
			}
		})
	}
	if _, err := events.DecideGameSession(gsessName, sessionState(testPolicy()), events.ReissueToken{PlayerSession: "p9"}); err == nil {
		t.Fatal("reissue for an unknown player session accepted")
	} else {
		wantRefused(t, err, events.RefusedPlayerSessionUnknown)
	}
}

// A player whose client dropped without the server noticing reconnects
// from another client: :reconnect reissues the token, the new connection
// takes the seat over, the old token is refused, and the old connection's
// close (or leave) no longer changes the seat.
func TestTakeoverIgnoresTheOldConnection(t *testing.T) {
	g := newSession(t, testPolicy(), &eventsv1.PlayerSeat{PlayerSession: "p1", PlayerId: "u1", Slot: 0, ReservationDeadline: tsAt(1000)})
	g.decide(events.AcceptPlayer{PlayerSession: "p1", Now: at(2)})
	first := g.player("p1").GetConnection()
	if first != 1 {
		t.Fatalf("first connection = %d, want 1", first)
	}
	_, err := g.try(events.AcceptPlayer{PlayerSession: "p1", Now: at(3)})
	wantRefused(t, err, events.RefusedPlayerAlreadyConnected)

	g.decide(events.ReissueToken{PlayerSession: "p1", Now: at(4)})
	_, err = g.try(events.AcceptPlayer{PlayerSession: "p1", TokenGeneration: 0, Now: at(5)})
	wantRefused(t, err, events.RefusedTokenRevoked)
	out := g.decide(events.AcceptPlayer{PlayerSession: "p1", TokenGeneration: 1, Now: at(6)})
	if got := types(out); !slices.Equal(got, []string{"PlayerTakenOver"}) {
		t.Fatalf("takeover events %v", got)
	}
	second := g.player("p1").GetConnection()
	if second != 2 || g.player("p1").GetReconnectCount() != 1 {
		t.Fatalf("after the takeover: %v, want connection 2, 1 reconnect", g.player("p1"))
	}
	_, err = g.try(events.AcceptPlayer{PlayerSession: "p1", TokenGeneration: 1, Now: at(7)})
	wantRefused(t, err, events.RefusedPlayerAlreadyConnected)

	// The old connection closes, then says it left: nothing changes.
	for _, cmd := range []events.GameSessionCommand{
		events.DisconnectPlayer{PlayerSession: "p1", Connection: first, Now: at(8)},
		events.RemovePlayer{PlayerSession: "p1", Connection: first},
	} {
		if out := g.decide(cmd); len(out) != 0 {
			t.Fatalf("%T of the old connection: events %v, want none", cmd, types(out))
		}
		if !events.StaleConnection(g.player("p1"), first) || g.player("p1").GetStatus() != psACTIVE {
			t.Fatalf("%T of the old connection: p1 = %v", cmd, g.player("p1"))
		}
	}
	// The new connection's close is recorded; so is a report that names no
	// connection (a game built before connection numbers).
	if got := types(g.decide(events.DisconnectPlayer{PlayerSession: "p1", Connection: second, Now: at(9)})); !slices.Equal(got, []string{"PlayerDisconnected"}) {
		t.Fatalf("the current connection's disconnect: %v", got)
	}
	g.decide(events.AcceptPlayer{PlayerSession: "p1", TokenGeneration: 1, Now: at(10)})
	if got := types(g.decide(events.RemovePlayer{PlayerSession: "p1"})); !slices.Equal(got, []string{"PlayerSessionCompleted"}) {
		t.Fatalf("a remove naming no connection: %v", got)
	}
}
