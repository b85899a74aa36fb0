package agent

import (
	"context"
	"errors"
	"io"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// maxReserveSeconds bounds an SDK Reserve.
const maxReserveSeconds = 3600

// Ready marks the server ready. Calling it again while READY is a no-op,
// decided on the agent's copy of the server, which is what the game was
// shown: an allocation the copy does not show yet is one the game has not
// heard of (it hears through the copy, and a player's call folds it into
// the copy first), so a Ready then cannot mean its match is over.
func (s *sdkServer) Ready(ctx context.Context, _ *sdkv1.ReadyRequest) (*sdkv1.ReadyResponse, error) {
	gs := serverOf(ctx)
	if gs.lifecycle() == eventsv1.Lifecycle_LIFECYCLE_READY {
		return &sdkv1.ReadyResponse{}, nil
	}
	if err := gs.record(ctx, events.MarkReady{}); err != nil {
		return nil, sdkError(err)
	}
	gs.log.Info("game server ready")
	return &sdkv1.ReadyResponse{}, nil
}

// Health records one heartbeat.
func (s *sdkServer) Health(ctx context.Context, _ *sdkv1.HealthRequest) (*sdkv1.HealthResponse, error) {
	// Over REST too: a unary heartbeat holds no connection open, and counts.
	serverOf(ctx).heartbeat(ctx, transportOf(ctx))
	return &sdkv1.HealthResponse{}, nil
}

// HealthStream records a heartbeat per message until the client closes.
func (s *sdkServer) HealthStream(stream grpc.ClientStreamingServer[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse]) error {
	gs := serverOf(stream.Context())
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&sdkv1.HealthStreamResponse{})
			}
			return err
		}
		gs.heartbeat(stream.Context(), "") // the open stream noted the connection
	}
}

// Shutdown: the game asks to stop.
func (s *sdkServer) Shutdown(ctx context.Context, _ *sdkv1.ShutdownRequest) (*sdkv1.ShutdownResponse, error) {
	gs := serverOf(ctx)
	deadline := s.a.opts.Clock.Now().Add(shutdownGrace)
	if err := gs.record(ctx, events.RequestShutdown{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, Deadline: deadline,
		Evidence: &eventsv1.Evidence{RequestedBy: gs.name}}); err != nil {
		return nil, sdkError(err)
	}
	gs.stop(eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, deadline)
	return &sdkv1.ShutdownResponse{}, nil
}

// GetGameServer returns the server as the agent knows it.
func (s *sdkServer) GetGameServer(ctx context.Context, _ *sdkv1.GetGameServerRequest) (*sdkv1.GameServer, error) {
	return serverOf(ctx).view(), nil
}

// WatchGameServer streams the server on every change until the client
// leaves or the server is finished.
func (s *sdkServer) WatchGameServer(_ *sdkv1.WatchGameServerRequest, stream grpc.ServerStreamingServer[sdkv1.GameServer]) error {
	gs := serverOf(stream.Context())
	for {
		gs.mu.Lock()
		changed, done, allocation := gs.changed, gs.done, gs.notifyTrace
		gs.notifyTrace = trace.SpanContext{}
		gs.mu.Unlock()
		if err := gs.sendTraced(stream, allocation); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-done:
			return nil
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// SetLabel sets one label.
func (s *sdkServer) SetLabel(ctx context.Context, req *sdkv1.SetLabelRequest) (*sdkv1.SetLabelResponse, error) {
	if err := serverOf(ctx).record(ctx, events.SetLabels{Set: map[string]string{req.GetKey(): req.GetValue()}}); err != nil {
		return nil, sdkError(err)
	}
	return &sdkv1.SetLabelResponse{}, nil
}

// Reserve holds the server back from allocation for a while.
func (s *sdkServer) Reserve(ctx context.Context, req *sdkv1.ReserveRequest) (*sdkv1.ReserveResponse, error) {
	if n := req.GetSeconds(); n < 1 || n > maxReserveSeconds {
		return nil, status.Errorf(codes.InvalidArgument, "seconds must be 1 to %d, not %d", maxReserveSeconds, n)
	}
	until := s.a.opts.Clock.Now().Add(time.Duration(req.GetSeconds()) * time.Second)
	if err := serverOf(ctx).record(ctx, events.Reserve{Until: until}); err != nil {
		return nil, sdkError(err)
	}
	return &sdkv1.ReserveResponse{}, nil
}

// Allocate allocates the server to a game session of its own making.
func (s *sdkServer) Allocate(ctx context.Context, req *sdkv1.AllocateRequest) (*sdkv1.AllocateResponse, error) {
	gs := serverOf(ctx)
	gs.mu.Lock()
	policy := proto.CloneOf(gs.state.GetPlayerSessionPolicy())
	gs.mu.Unlock()
	name := events.GameSessionName(events.NewID("gsess"))
	alloc := &eventsv1.GameServerAllocated{GameSession: name, Properties: req.GetProperties(), MaxPlayers: policy.GetMaxPlayers(), SelfAllocated: true}
	if err := gs.record(ctx, events.Allocate{Allocated: alloc}); err != nil {
		return nil, sdkError(err)
	}
	created := events.SessionCreated(gs.name, s.a.host, alloc, policy, s.a.opts.Clock.Now(), "")
	if _, _, err := s.a.decideSession(ctx, name, events.CreateGameSession{Created: created}, nil); err != nil {
		// The allocation stands; the controller creates the session from it.
		gs.log.Warn("self-allocation: game session not created yet; the controller will", "game_session", name, "err", err)
	}
	gs.log.Info("game server allocated itself", "game_session", name)
	return &sdkv1.AllocateResponse{GameSession: name}, nil
}

// AcceptPlayer admits a player who presents their player session's token:
// a reserved seat becomes theirs, a disconnected one within its window is
// theirs again (same slot). Only a token of the seat's current generation
// is accepted (a reconnect revokes the earlier ones); an ACTIVE seat is
// refused to a second connection with the same token, and taken over by a
// reissued one. The response numbers the connection, for DisconnectPlayer
// and RemovePlayer.
func (s *sdkServer) AcceptPlayer(ctx context.Context, req *sdkv1.AcceptPlayerRequest) (*sdkv1.AcceptPlayerResponse, error) {
	gs := serverOf(ctx)
	gsess, psID, err := gs.playerSession(ctx, req.GetPlayerSessionId())
	if err != nil {
		return nil, err
	}
	if s.a.opts.Tokens == nil {
		return nil, status.Error(codes.FailedPrecondition, "this agent has no player-token keys (tether agent --player-token-keys)")
	}
	gsessID, _ := events.ParseGameSessionName(gsess) // the server's own game session: valid
	psName := events.PlayerSessionName(gsessID, psID)
	claims, err := s.a.opts.Tokens.Check(req.GetToken(), psName, s.a.opts.Clock.Now())
	if err != nil {
		gs.log.Warn("player token refused", "player_session", psName, "err", err)
		return nil, status.Errorf(codes.PermissionDenied, "token refused for %s: %v", psName, err)
	}
	cmd := events.AcceptPlayer{PlayerSession: psID, TokenGeneration: claims.Generation, Now: s.a.opts.Clock.Now()}
	state, msgs, err := s.a.decideSession(ctx, gsess, cmd, gs.sessionFromAllocation(gsess))
	if err != nil {
		gs.log.Warn("player refused", "player_session", psName, "token_generation", claims.Generation, "err", err)
		return nil, playerError(err)
	}
	p := events.FindPlayer(state, psID)
	var kind string // an accept that is not refused records one event
	if len(msgs) > 0 {
		kind = events.TypeOf(msgs[0])
	}
	gs.log.Info("player accepted", "player_session", psName, "player", p.GetPlayerId(), "slot", p.GetSlot(),
		"reconnects", p.GetReconnectCount(), "connection", p.GetConnection(), "token_generation", claims.Generation, "event", kind)
	return &sdkv1.AcceptPlayerResponse{PlayerId: p.GetPlayerId(), PlayerData: p.GetPlayerData(), Slot: p.GetSlot(),
		Reconnected: kind == "PlayerReconnected" || kind == "PlayerTakenOver", ReconnectCount: p.GetReconnectCount(),
		Connection: p.GetConnection(), TakenOver: kind == "PlayerTakenOver"}, nil
}

// DisconnectPlayer reports a player's connection lost; the seat waits for
// the reconnect window. A connection that no longer holds the seat (a newer
// one took it over) changes nothing: the answer says it is stale.
func (s *sdkServer) DisconnectPlayer(ctx context.Context, req *sdkv1.DisconnectPlayerRequest) (*sdkv1.DisconnectPlayerResponse, error) {
	gs := serverOf(ctx)
	gsess, psID, err := gs.playerSession(ctx, req.GetPlayerSession())
	if err != nil {
		return nil, err
	}
	cmd := events.DisconnectPlayer{PlayerSession: psID, Connection: req.GetConnection(), Now: s.a.opts.Clock.Now()}
	state, _, err := s.a.decideSession(ctx, gsess, cmd, gs.sessionFromAllocation(gsess))
	if err != nil {
		return nil, sdkError(err)
	}
	p := events.FindPlayer(state, psID)
	if events.StaleConnection(p, req.GetConnection()) {
		gs.log.Info("disconnect of a connection the seat was taken from; ignored", "player_session", p.GetName(),
			"connection", req.GetConnection(), "current_connection", p.GetConnection())
		return &sdkv1.DisconnectPlayerResponse{Stale: true}, nil
	}
	gs.log.Info("player disconnected", "player_session", p.GetName(), "reconnect_deadline", p.GetReconnectDeadline().AsTime())
	return &sdkv1.DisconnectPlayerResponse{ReconnectDeadline: p.GetReconnectDeadline()}, nil
}

// RemovePlayer ends a player's session for good, unless the connection
// named no longer holds the seat (then nothing changes: stale).
func (s *sdkServer) RemovePlayer(ctx context.Context, req *sdkv1.RemovePlayerRequest) (*sdkv1.RemovePlayerResponse, error) {
	gs := serverOf(ctx)
	gsess, psID, err := gs.playerSession(ctx, req.GetPlayerSession())
	if err != nil {
		return nil, err
	}
	state, _, err := s.a.decideSession(ctx, gsess, events.RemovePlayer{PlayerSession: psID, Connection: req.GetConnection()}, gs.sessionFromAllocation(gsess))
	if err != nil {
		return nil, sdkError(err)
	}
	if p := events.FindPlayer(state, psID); events.SeatHeld(p) && events.StaleConnection(p, req.GetConnection()) {
		gs.log.Info("removal by a connection the seat was taken from; ignored", "player_session", p.GetName(),
			"connection", req.GetConnection(), "current_connection", p.GetConnection())
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
