package sdk

import (
	"context"
	"time"

	"google.golang.org/grpc"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// Reserve holds the server back from allocation for d (1 s to 1 h); it
// returns to READY when d has passed without an allocation.
func (c *Client) Reserve(ctx context.Context, d time.Duration) error {
	api, err := c.client()
	if err == nil {
		_, err = api.Reserve(ctx, &sdkv1.ReserveRequest{Seconds: int32(d / time.Second)}, grpc.WaitForReady(true))
	}
	return wrap("reserve", err)
}

// Allocate allocates the server to a new game session of its own
// (self-allocation) and returns the session's resource name.
func (c *Client) Allocate(ctx context.Context, properties map[string]string) (string, error) {
	api, err := c.client()
	if err != nil {
		return "", wrap("allocate", err)
	}
	resp, err := api.Allocate(ctx, &sdkv1.AllocateRequest{Properties: properties}, grpc.WaitForReady(true))
	if err != nil {
		return "", wrap("allocate", err)
	}
	return resp.GetGameSession(), nil
}

// Player is what AcceptPlayer learns of a player.
type Player = sdkv1.AcceptPlayerResponse

// AcceptPlayer admits the player holding playerSession's token: their seat
// becomes theirs (again, with the same slot, after a reconnect). A wrong,
// expired or foreign token is refused with PermissionDenied; a seat whose
// reconnect window ended with FailedPrecondition.
func (c *Client) AcceptPlayer(ctx context.Context, playerSession, token string) (*Player, error) {
	api, err := c.client()
	if err != nil {
		return nil, wrap("accept player", err)
	}
	p, err := api.AcceptPlayer(ctx, &sdkv1.AcceptPlayerRequest{PlayerSessionId: playerSession, Token: token}, grpc.WaitForReady(true))
	if err != nil {
		return nil, wrap("accept player", err)
	}
	return p, nil
}

// DisconnectPlayer reports that a player's connection was lost; their seat
// is kept until the returned reconnect deadline.
func (c *Client) DisconnectPlayer(ctx context.Context, playerSession string) (time.Time, error) {
	api, err := c.client()
	if err != nil {
		return time.Time{}, wrap("disconnect player", err)
	}
	resp, err := api.DisconnectPlayer(ctx, &sdkv1.DisconnectPlayerRequest{PlayerSession: playerSession}, grpc.WaitForReady(true))
	if err != nil {
		return time.Time{}, wrap("disconnect player", err)
	}
	return resp.GetReconnectDeadline().AsTime(), nil
}

// RemovePlayer ends a player's session for good (they left).
func (c *Client) RemovePlayer(ctx context.Context, playerSession string) error {
	api, err := c.client()
	if err == nil {
		_, err = api.RemovePlayer(ctx, &sdkv1.RemovePlayerRequest{PlayerSession: playerSession}, grpc.WaitForReady(true))
	}
	return wrap("remove player", err)
}
