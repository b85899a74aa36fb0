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

// Player is what AcceptPlayer learns of a player, with the number of the
// connection it accepted (GetConnection): pass it back to
// DisconnectPlayerConnection and RemovePlayerConnection.
type Player = sdkv1.AcceptPlayerResponse

// AcceptPlayer admits the player holding playerSession's token: their seat
// becomes theirs (again, with the same slot, after a reconnect). A wrong,
// expired, foreign or revoked token (one a reconnect has replaced) is
// refused with PermissionDenied; a second connection presenting the token
// of the connection that holds the seat with AlreadyExists; a seat whose
// reconnect window ended with FailedPrecondition. A player who reconnected
// from elsewhere with a fresh token takes the seat over from a connection
// the game still holds (GetTakenOver): drop that one without reporting it,
// or report it with its own connection number, which changes nothing.
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

// DisconnectPlayer reports that the player's connection was lost, whichever
// holds the seat; their seat is kept until the returned reconnect deadline.
// Prefer DisconnectPlayerConnection, which cannot mistake an old
// connection's close for the current one's.
func (c *Client) DisconnectPlayer(ctx context.Context, playerSession string) (time.Time, error) {
	deadline, _, err := c.DisconnectPlayerConnection(ctx, playerSession, 0)
	return deadline, err
}

// DisconnectPlayerConnection reports that one accepted connection of a
// player (Player.GetConnection) was lost. When a newer connection has taken
// the seat over, nothing changes and stale is true; otherwise the seat is
// kept until the returned reconnect deadline.
func (c *Client) DisconnectPlayerConnection(ctx context.Context, playerSession string, connection int64) (deadline time.Time, stale bool, err error) {
	api, err := c.client()
	if err != nil {
		return time.Time{}, false, wrap("disconnect player", err)
	}
	resp, err := api.DisconnectPlayer(ctx, &sdkv1.DisconnectPlayerRequest{PlayerSession: playerSession, Connection: connection}, grpc.WaitForReady(true))
	if err != nil {
		return time.Time{}, false, wrap("disconnect player", err)
	}
	if resp.GetStale() {
		return time.Time{}, true, nil
	}
	return resp.GetReconnectDeadline().AsTime(), false, nil
}

// RemovePlayer ends a player's session for good (they left), whichever
// connection holds the seat. Prefer RemovePlayerConnection.
func (c *Client) RemovePlayer(ctx context.Context, playerSession string) error {
	_, err := c.RemovePlayerConnection(ctx, playerSession, 0)
	return err
}

// RemovePlayerConnection ends a player's session for good when the
// connection that left (Player.GetConnection) still holds the seat;
// otherwise nothing changes and stale is true.
func (c *Client) RemovePlayerConnection(ctx context.Context, playerSession string, connection int64) (stale bool, err error) {
	api, err := c.client()
	if err != nil {
		return false, wrap("remove player", err)
	}
	resp, err := api.RemovePlayer(ctx, &sdkv1.RemovePlayerRequest{PlayerSession: playerSession, Connection: connection}, grpc.WaitForReady(true))
	if err != nil {
		return false, wrap("remove player", err)
	}
	return resp.GetStale(), nil
}
