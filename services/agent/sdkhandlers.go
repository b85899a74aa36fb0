package agent

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// maxReserveSeconds bounds an SDK Reserve.
const maxReserveSeconds = 3600

// Ready marks the server ready (agentSDK.Ready: again while READY, a
// no-op).
func (s *sdkServer) Ready(ctx context.Context, _ *sdkv1.ReadyRequest) (*sdkv1.ReadyResponse, error) {
	if err := s.ops.Ready(ctx, callerOf(ctx)); err != nil {
		return nil, sdkError(err)
	}
	return &sdkv1.ReadyResponse{}, nil
}

// Health notes one health ping.
func (s *sdkServer) Health(ctx context.Context, _ *sdkv1.HealthRequest) (*sdkv1.HealthResponse, error) {
	// Over REST too: a unary health ping holds no connection open, and counts.
	s.ops.HealthPing(ctx, callerOf(ctx), transportOf(ctx))
	return &sdkv1.HealthResponse{}, nil
}

// HealthStream notes a health ping per message until the client closes.
func (s *sdkServer) HealthStream(stream grpc.ClientStreamingServer[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse]) error {
	c := callerOf(stream.Context())
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&sdkv1.HealthStreamResponse{})
			}
			return err
		}
		s.ops.HealthPing(stream.Context(), c, "") // the open stream noted the connection
	}
}

// Shutdown: the game asks to stop.
func (s *sdkServer) Shutdown(ctx context.Context, _ *sdkv1.ShutdownRequest) (*sdkv1.ShutdownResponse, error) {
	if err := s.ops.Shutdown(ctx, callerOf(ctx)); err != nil {
		return nil, sdkError(err)
	}
	return &sdkv1.ShutdownResponse{}, nil
}

// GetGameServer returns the server as the agent knows it.
func (s *sdkServer) GetGameServer(ctx context.Context, _ *sdkv1.GetGameServerRequest) (*sdkv1.GameServer, error) {
	return s.ops.GameServer(callerOf(ctx)), nil
}

// WatchGameServer streams the server on every change until the client
// leaves or the server is finished.
func (s *sdkServer) WatchGameServer(_ *sdkv1.WatchGameServerRequest, stream grpc.ServerStreamingServer[sdkv1.GameServer]) error {
	return s.ops.WatchGameServer(stream.Context(), callerOf(stream.Context()), stream.Send)
}

// SetLabel sets one label.
func (s *sdkServer) SetLabel(ctx context.Context, req *sdkv1.SetLabelRequest) (*sdkv1.SetLabelResponse, error) {
	if err := s.ops.SetLabel(ctx, callerOf(ctx), req.GetKey(), req.GetValue()); err != nil {
		return nil, sdkError(err)
	}
	return &sdkv1.SetLabelResponse{}, nil
}

// Reserve holds the server back from allocation for a while: 1 to
// maxReserveSeconds.
func (s *sdkServer) Reserve(ctx context.Context, req *sdkv1.ReserveRequest) (*sdkv1.ReserveResponse, error) {
	if n := req.GetSeconds(); n < 1 || n > maxReserveSeconds {
		return nil, status.Errorf(codes.InvalidArgument, "seconds must be 1 to %d, not %d", maxReserveSeconds, n)
	}
	if err := s.ops.Reserve(ctx, callerOf(ctx), time.Duration(req.GetSeconds())*time.Second); err != nil {
		return nil, sdkError(err)
	}
	return &sdkv1.ReserveResponse{}, nil
}

// Allocate allocates the server to a game session of its own making.
func (s *sdkServer) Allocate(ctx context.Context, req *sdkv1.AllocateRequest) (*sdkv1.AllocateResponse, error) {
	name, err := s.ops.Allocate(ctx, callerOf(ctx), req.GetProperties())
	if err != nil {
		return nil, sdkError(err)
	}
	return &sdkv1.AllocateResponse{GameSession: name}, nil
}

// AcceptPlayer admits a player who presents their player session's token
// (agentSDK.AcceptPlayer). The response numbers the connection, for
// DisconnectPlayer and RemovePlayer.
func (s *sdkServer) AcceptPlayer(ctx context.Context, req *sdkv1.AcceptPlayerRequest) (*sdkv1.AcceptPlayerResponse, error) {
	a, err := s.ops.AcceptPlayer(ctx, callerOf(ctx), req.GetPlayerSessionId(), req.GetToken())
	if err != nil {
		return nil, playerError(err)
	}
	p := a.seat
	return &sdkv1.AcceptPlayerResponse{PlayerId: p.GetPlayerId(), PlayerData: p.GetPlayerData(), Slot: p.GetSlot(),
		Reconnected: a.reconnected, ReconnectCount: p.GetReconnectCount(),
		Connection: p.GetConnection(), TakenOver: a.takenOver}, nil
}

// DisconnectPlayer reports a player's connection lost; the seat waits for
// the reconnect window. A connection that no longer holds the seat (a newer
// one took it over) changes nothing: the answer says it is stale.
func (s *sdkServer) DisconnectPlayer(ctx context.Context, req *sdkv1.DisconnectPlayerRequest) (*sdkv1.DisconnectPlayerResponse, error) {
	p, stale, err := s.ops.DisconnectPlayer(ctx, callerOf(ctx), req.GetPlayerSession(), req.GetConnection())
	if err != nil {
		return nil, sdkError(err)
	}
	if stale {
		return &sdkv1.DisconnectPlayerResponse{Stale: true}, nil
	}
	return &sdkv1.DisconnectPlayerResponse{ReconnectDeadline: p.GetReconnectDeadline()}, nil
}

// RemovePlayer ends a player's session for good, unless the connection
// named no longer holds the seat (then nothing changes: stale).
func (s *sdkServer) RemovePlayer(ctx context.Context, req *sdkv1.RemovePlayerRequest) (*sdkv1.RemovePlayerResponse, error) {
	stale, err := s.ops.RemovePlayer(ctx, callerOf(ctx), req.GetPlayerSession(), req.GetConnection())
	if err != nil {
		return nil, sdkError(err)
	}
	if stale {
		return &sdkv1.RemovePlayerResponse{Stale: true}, nil
	}
	return &sdkv1.RemovePlayerResponse{}, nil
}

// sdkError maps domain errors to SDK status codes.
func sdkError(err error) error {
	var te *events.TransitionError
	var ve *events.ValidationError
	var re *events.RefusedError
	if _, ok := status.FromError(err); ok {
		return err // decided already, e.g. UNAVAILABLE while NATS is away
	}
	switch {
	case errors.As(err, &re):
		if re.Reason == events.RefusedPlayerSessionUnknown || re.Reason == events.RefusedGameSessionUnknown {
			return status.Error(codes.NotFound, re.Reason+": "+re.Msg)
		}
		return status.Error(codes.FailedPrecondition, re.Reason+": "+re.Msg)
	case errors.As(err, &te):
		return status.Error(codes.FailedPrecondition, te.Error())
	case errors.As(err, &ve):
		return status.Error(codes.InvalidArgument, ve.Error())
	}
	return status.Error(codes.Unavailable, "the agent could not record this: "+err.Error())
}

// playerError turns a refused player command into its gRPC status: a
// revoked token is PERMISSION_DENIED like any refused token, a second
// connection ALREADY_EXISTS; the rest as sdkError says.
func playerError(err error) error {
	var re *events.RefusedError
	if errors.As(err, &re) {
		switch re.Reason {
		case events.RefusedTokenRevoked:
			return status.Error(codes.PermissionDenied, re.Reason+": "+re.Msg)
		case events.RefusedPlayerAlreadyConnected:
			return status.Error(codes.AlreadyExists, re.Reason+": "+re.Msg)
		}
	}
	return sdkError(err)
}
