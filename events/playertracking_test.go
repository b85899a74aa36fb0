package events_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/tetherhq/tether/events"
)

// Player tracking as Agones' SDK has it: a player connected once (a
// second connect is no event), gone once, up to the capacity, which is
// the fleet's max_players until the game sets one.
func TestPlayerTracking(t *testing.T) {
	g := newServer(t, READY)
	g.state.PlayerSessionPolicy.MaxPlayers = 2
	if c := events.PlayerCapacity(g.state); c != 2 {
		t.Fatalf("capacity before the game sets one: %d, want the fleet's 2", c)
	}
	for _, id := range []string{"alice", "bob"} {
		if out := g.decide(events.TrackPlayerConnect{PlayerID: id}); !slices.Equal(types(out), []string{"TrackedPlayerConnected"}) {
			t.Fatalf("connect %s: %v", id, types(out))
		}
	}
	if out := g.decide(events.TrackPlayerConnect{PlayerID: "alice"}); len(out) != 0 {
		t.Errorf("alice again: %v, want no event", types(out))
	}
	_, err := g.try(events.TrackPlayerConnect{PlayerID: "carol"})
	var ce *events.CounterError
	if !errors.As(err, &ce) || ce.Reason != events.RefusedPlayerCapacityReached || !errors.Is(err, events.ErrOutOfRange) {
		t.Fatalf("carol past the capacity: %v, want PLAYER_CAPACITY_REACHED", err)
	}
	g.decide(events.SetPlayerCapacity{Capacity: 10})
	if c := events.PlayerCapacity(g.state); c != 10 {
		t.Fatalf("capacity after SetPlayerCapacity(10): %d", c)
	}
	g.decide(events.TrackPlayerConnect{PlayerID: "carol"})
	if out := g.decide(events.TrackPlayerDisconnect{PlayerID: "alice"}); !slices.Equal(types(out), []string{"TrackedPlayerDisconnected"}) {
		t.Fatalf("disconnect alice: %v", types(out))
	}
	if out := g.decide(events.TrackPlayerDisconnect{PlayerID: "alice"}); len(out) != 0 {
		t.Errorf("alice gone twice: %v, want no event", types(out))
	}
	if !slices.Equal(g.state.GetPlayers(), []string{"bob", "carol"}) {
		t.Errorf("players %v, want bob carol", g.state.GetPlayers())
	}
	for _, bad := range []events.GameServerCommand{
		events.TrackPlayerConnect{PlayerID: ""},
		events.SetPlayerCapacity{Capacity: -1},
		events.SetPlayerCapacity{Capacity: events.MaxTrackedPlayers + 1},
	} {
		if _, err := g.try(bad); err == nil {
			t.Errorf("%#v: accepted", bad)
		}
	}
	g.state.PlayerSessionPolicy.MaxPlayers = 0
	g.state.PlayerCapacity = nil
	if c := events.PlayerCapacity(g.state); c != events.MaxTrackedPlayers {
		t.Errorf("a fleet without a player limit: capacity %d, want %d", c, events.MaxTrackedPlayers)
	}
}
