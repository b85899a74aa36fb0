package agent

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// localTransport names calls made through LocalSDK in connection events.
const localTransport = "local"

// LocalSDK is the agent's SDK for game server processes that live in the
// agent's own OS process (the fleet simulator's): the very handlers the
// gRPC and REST SDK serve, called directly with the process token instead
// of over a loopback connection. A call with the token proves the SDK
// connected, as any SDK call does; Health is a health ping; Connect holds a
// connection open the way a HealthStream or WatchGameServer stream does, so
// its end is recorded as an SDK disconnect of the kind the caller gives.
type LocalSDK struct{ s *sdkServer }

// server finds the game server a process token belongs to.
func (l *LocalSDK) server(token string) (sdkCaller, error) {
	c, ok := l.s.ops.ByToken(token)
	if token == "" || !ok {
		return sdkCaller{}, status.Error(codes.Unauthenticated, "missing or unknown game server token")
	}
	return c, nil
}

// call authenticates a token, notes the call as any SDK call is noted, and
// returns the context the handlers expect.
func (l *LocalSDK) call(ctx context.Context, token string) (context.Context, sdkCaller, error) {
	c, err := l.server(token)
	if err != nil {
		return nil, sdkCaller{}, err
	}
	l.s.ops.NoteCall(ctx, c, localTransport)
	return context.WithValue(ctx, callerKey{}, c), c, nil
}

// Ready marks the server READY.
func (l *LocalSDK) Ready(ctx context.Context, token string) error {
	c, err := l.server(token)
	if err != nil {
		return err
	}
	defer l.s.ops.ReadyCall(c)() // before the lock, as the gRPC path
	ctx, _, err = l.call(ctx, token)
	if err != nil {
		return err
	}
	_, err = l.s.Ready(ctx, &sdkv1.ReadyRequest{})
	return err
}

// Health notes one health ping, as the gRPC Health handler does. It is
// the call a fleet makes most (every server, every few seconds), so it
// allocates nothing.
func (l *LocalSDK) Health(ctx context.Context, token string) error {
	c, err := l.server(token)
	if err != nil {
		return err
	}
	l.s.ops.HealthPing(ctx, c, localTransport)
	return nil
}

// Shutdown asks for the server to be stopped (the game has ended).
func (l *LocalSDK) Shutdown(ctx context.Context, token string) error {
	ctx, _, err := l.call(ctx, token)
	if err != nil {
		return err
	}
	_, err = l.s.Shutdown(ctx, &sdkv1.ShutdownRequest{})
	return err
}

// GetGameServer returns the server as the agent knows it.
func (l *LocalSDK) GetGameServer(ctx context.Context, token string) (*sdkv1.GameServer, error) {
	ctx, _, err := l.call(ctx, token)
	if err != nil {
		return nil, err
	}
	return l.s.GetGameServer(ctx, &sdkv1.GetGameServerRequest{})
}

// AcceptPlayer admits a player presenting their player session's token.
func (l *LocalSDK) AcceptPlayer(ctx context.Context, token string, req *sdkv1.AcceptPlayerRequest) (*sdkv1.AcceptPlayerResponse, error) {
	ctx, _, err := l.call(ctx, token)
	if err != nil {
		return nil, err
	}
	return l.s.AcceptPlayer(ctx, req)
}

// DisconnectPlayer reports a player's connection lost.
func (l *LocalSDK) DisconnectPlayer(ctx context.Context, token string, req *sdkv1.DisconnectPlayerRequest) (*sdkv1.DisconnectPlayerResponse, error) {
	ctx, _, err := l.call(ctx, token)
	if err != nil {
		return nil, err
	}
	return l.s.DisconnectPlayer(ctx, req)
}

// RemovePlayer ends a player's session for good.
func (l *LocalSDK) RemovePlayer(ctx context.Context, token string, req *sdkv1.RemovePlayerRequest) (*sdkv1.RemovePlayerResponse, error) {
	ctx, _, err := l.call(ctx, token)
	if err != nil {
		return nil, err
	}
	return l.s.RemovePlayer(ctx, req)
}

// Allocate allocates the server to a game session of its own making.
func (l *LocalSDK) Allocate(ctx context.Context, token string, req *sdkv1.AllocateRequest) (*sdkv1.AllocateResponse, error) {
	ctx, _, err := l.call(ctx, token)
	if err != nil {
		return nil, err
	}
	return l.s.Allocate(ctx, req)
}

// LocalConn is an SDK connection held open through LocalSDK.Connect.
type LocalConn struct {
	ops    sdkOps
	c      sdkCaller
	closed bool
}

// Connect opens a held SDK connection for the process with token, as a
// HealthStream does over gRPC.
func (l *LocalSDK) Connect(ctx context.Context, token string) (*LocalConn, error) {
	c, err := l.server(token)
	if err != nil {
		return nil, err
	}
	l.s.ops.StreamOpened(ctx, c)
	return &LocalConn{ops: l.s.ops, c: c}, nil
}

// Close ends the connection the way kind says (a clean close, a reset, a
// keepalive timeout); the agent records the disconnect when no other SDK
// connection of the process remains. Closing twice does nothing.
func (c *LocalConn) Close(kind eventsv1.DisconnectKind, detail string) {
	if c.closed {
		return
	}
	c.closed = true
	c.ops.StreamClosed(c.c, kind, detail)
}
