package events

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Player tracking, as Agones' SDK has it (its alpha PlayerConnect,
// PlayerDisconnect and SetPlayerCapacity): the ids of the players a game
// server's game reports connected, at most its player capacity. The
// capacity is its fleet's max_players until the game sets one; a fleet
// with no limit (0) takes up to MaxTrackedPlayers. Each change is an
// event of the server (TrackedPlayerConnected, TrackedPlayerDisconnected,
// PlayerCapacitySet).

// MaxTrackedPlayers bounds the players a server tracks, and the capacity
// it can set: the ids it can hold (at most 1000 × MaxListValueBytes)
// keep its view row within what a read can carry.
const MaxTrackedPlayers = 1000

// RefusedPlayerCapacityReached is the CounterError reason of a player
// connected past the server's player capacity (ErrOutOfRange).
const RefusedPlayerCapacityReached = "PLAYER_CAPACITY_REACHED"

// TrackPlayerConnect records a player connected; a no-op for one connected
// already.
type TrackPlayerConnect struct {
	// PlayerID is the player's id, as the game knows it.
	PlayerID string
}

// TrackPlayerDisconnect records a player gone; a no-op for one not connected.
type TrackPlayerDisconnect struct {
	// PlayerID is the player's id.
	PlayerID string
}

// SetPlayerCapacity sets the players the server takes, 0 to
// MaxTrackedPlayers. Players connected beyond it stay; no more connect
// until they are fewer.
type SetPlayerCapacity struct {
	// Capacity is the new capacity.
	Capacity int64
}

func (TrackPlayerConnect) gameServerCommand()    {}
func (TrackPlayerDisconnect) gameServerCommand() {}
func (SetPlayerCapacity) gameServerCommand()     {}

// PlayerCapacity is the players a server takes: the capacity its game
// set, else its fleet's max_players, else (no limit) MaxTrackedPlayers.
func PlayerCapacity(state *eventsv1.GameServerState) int64 {
	if state.PlayerCapacity != nil {
		return state.GetPlayerCapacity()
	}
	if n := state.GetPlayerSessionPolicy().GetMaxPlayers(); n > 0 {
		return int64(min(n, MaxTrackedPlayers))
	}
	return MaxTrackedPlayers
}

// decidePlayerTracking decides the player-tracking commands.
func decidePlayerTracking(state *eventsv1.GameServerState, cmd GameServerCommand) ([]proto.Message, error) {
	players := state.GetPlayers()
	switch c := cmd.(type) {
	case TrackPlayerConnect:
		if err := checkListValue("player_id", c.PlayerID); err != nil {
			return nil, err
		}
		if slices.Contains(players, c.PlayerID) {
			return nil, nil
		}
		if capacity := PlayerCapacity(state); int64(len(players)) >= capacity {
			return nil, counterRefused(RefusedPlayerCapacityReached, "player_id", "the server has %d players, its capacity", capacity)
		}
		return []proto.Message{&eventsv1.TrackedPlayerConnected{PlayerId: c.PlayerID, Count: int64(len(players)) + 1}}, nil
	case TrackPlayerDisconnect:
		if !slices.Contains(players, c.PlayerID) {
			return nil, nil
		}
		return []proto.Message{&eventsv1.TrackedPlayerDisconnected{PlayerId: c.PlayerID, Count: int64(len(players)) - 1}}, nil
	case SetPlayerCapacity:
		if c.Capacity < 0 || c.Capacity > MaxTrackedPlayers {
			return nil, counterRefused(RefusedCapacityOutOfRange, "capacity", "a player capacity is 0 to %d, not %d", MaxTrackedPlayers, c.Capacity)
		}
		if state.PlayerCapacity != nil && state.GetPlayerCapacity() == c.Capacity {
			return nil, nil
		}
		return []proto.Message{&eventsv1.PlayerCapacitySet{Capacity: c.Capacity}}, nil
	}
	return nil, fmt.Errorf("events: %T is not a player-tracking command", cmd)
}

// applyPlayerTracking folds a player-tracking event into next; an event
// of another kind changes nothing.
func applyPlayerTracking(next *eventsv1.GameServerState, m proto.Message) {
	switch d := m.(type) {
	case *eventsv1.TrackedPlayerConnected:
		if !slices.Contains(next.Players, d.GetPlayerId()) {
			next.Players = append(next.Players, d.GetPlayerId())
		}
	case *eventsv1.TrackedPlayerDisconnected:
		next.Players = slices.DeleteFunc(next.Players, func(id string) bool { return id == d.GetPlayerId() })
	case *eventsv1.PlayerCapacitySet:
		next.PlayerCapacity = proto.Int64(d.GetCapacity())
	}
}
