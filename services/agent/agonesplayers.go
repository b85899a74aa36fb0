package agent

import (
	"context"
	"slices"

	agonessdkalpha "github.com/tetherhq/tether/proto/agones/dev/sdk/alpha"
)

// agonesPlayers serves the player tracking of Agones' SDK
// (agones.dev.sdk.alpha.SDK) on a game server's Agones endpoint, beside
// agonesServer, whose interceptors identify the caller. A connect or a
// disconnect is the server's TrackPlayerConnect or TrackPlayerDisconnect,
// an event of its history; a connect past the capacity is OUT_OF_RANGE.
// The capacity is the fleet's max_players until the game sets one.
type agonesPlayers struct {
	agonessdkalpha.UnimplementedSDKServer
	ops sdkOps
}

// PlayerConnect records a player connected: false when it was already.
func (s *agonesPlayers) PlayerConnect(ctx context.Context, p *agonessdkalpha.PlayerID) (*agonessdkalpha.Bool, error) {
	changed, err := s.ops.TrackPlayer(ctx, callerIn(ctx), p.GetPlayerID(), true)
	if err != nil {
		return nil, counterError(err)
	}
	return &agonessdkalpha.Bool{Bool: changed}, nil
}

// PlayerDisconnect records a player gone: false when it was not there.
func (s *agonesPlayers) PlayerDisconnect(ctx context.Context, p *agonessdkalpha.PlayerID) (*agonessdkalpha.Bool, error) {
	changed, err := s.ops.TrackPlayer(ctx, callerIn(ctx), p.GetPlayerID(), false)
	if err != nil {
		return nil, counterError(err)
	}
	return &agonessdkalpha.Bool{Bool: changed}, nil
}

// SetPlayerCapacity sets the players the server takes.
func (s *agonesPlayers) SetPlayerCapacity(ctx context.Context, c *agonessdkalpha.Count) (*agonessdkalpha.Empty, error) {
	if err := s.ops.SetPlayerCapacity(ctx, callerIn(ctx), c.GetCount()); err != nil {
		return nil, counterError(err)
	}
	return &agonessdkalpha.Empty{}, nil
}

// GetPlayerCapacity is the players the server takes.
func (s *agonesPlayers) GetPlayerCapacity(ctx context.Context, _ *agonessdkalpha.Empty) (*agonessdkalpha.Count, error) {
	return &agonessdkalpha.Count{Count: s.ops.GameServer(callerIn(ctx)).GetPlayerCapacity()}, nil
}

// GetPlayerCount is the players connected now.
func (s *agonesPlayers) GetPlayerCount(ctx context.Context, _ *agonessdkalpha.Empty) (*agonessdkalpha.Count, error) {
	return &agonessdkalpha.Count{Count: int64(len(s.ops.GameServer(callerIn(ctx)).GetPlayers()))}, nil
}

// IsPlayerConnected says whether a player is connected.
func (s *agonesPlayers) IsPlayerConnected(ctx context.Context, p *agonessdkalpha.PlayerID) (*agonessdkalpha.Bool, error) {
	return &agonessdkalpha.Bool{Bool: slices.Contains(s.ops.GameServer(callerIn(ctx)).GetPlayers(), p.GetPlayerID())}, nil
}

// GetConnectedPlayers is the ids of the players connected now.
func (s *agonesPlayers) GetConnectedPlayers(ctx context.Context, _ *agonessdkalpha.Empty) (*agonessdkalpha.PlayerIDList, error) {
	return &agonessdkalpha.PlayerIDList{List: s.ops.GameServer(callerIn(ctx)).GetPlayers()}, nil
}
