package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// maxReserveSeconds bounds an SDK Reserve.
const maxReserveSeconds = 3600

// session is the agent's copy of one game session aggregate, folded from
// the stream. Its mutex serialises the agent's decisions on it; other
// writers (the controller firing deadlines, the API adding players) are
// caught by the append guard.
type session struct {
	mu    sync.Mutex
	name  string
	state *eventsv1.GameSessionState
	seq   uint64
}

// sessions caches the game sessions of the agent's servers.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func (ss *sessions) get(name string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[string]*session{}
	}
	s, ok := ss.m[name]
	if !ok {
		s = &session{name: name}
		ss.m[name] = s
	}
	return s
}

// forget drops the cached sessions of a server that is finished.
func (ss *sessions) forget(gameSession string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, gameSession)
}

// refreshLocked folds what was appended to the session since seq, as the
// stream's leader has it: a refusal (no such session, no such seat, a
// window already expired) is not checked by the append's guard, and must
// not be decided on what a replica behind the leader shows.
func (s *session) refreshLocked(ctx context.Context, store eventStore, log *slog.Logger) error {
	hist, err := store.CurrentHistory(ctx, events.MustSubject(s.name), s.seq+1)
	if err != nil {
		return err
	}
	for _, e := range hist {
		next, err := events.ApplyGameSession(s.state, e)
		switch {
		case events.Skipped(err):
			// Left out, as the projector dead-letters it; its sequence
			// is the guard of the next append all the same.
			log.Warn("game session event skipped", "game_session", s.name, "sequence", e.Sequence, "type", e.Type, "err", err)
		case err != nil:
			return fmt.Errorf("fold %s at %d: %w", s.name, e.Sequence, err)
		default:
			s.state = next
		}
		s.seq = e.Sequence
	}
	return nil
}

// decide runs a command on the game session: refresh, decide, append
// guarded by the last sequence; on a conflict, refresh and decide again.
// Player calls need the stream: while NATS is away they fail (UNAVAILABLE)
// rather than queue, because the game must know whether the seat is theirs.
//
// create, if not nil, gives the GameSessionCreated to record first when the
// session does not exist yet: its allocator stopped between the server's
// append and the session's (the controller would create it too, seconds
// later; the player should not wait for that).
func (a *Agent) decideSession(ctx context.Context, name string, cmd events.GameSessionCommand, create func() *eventsv1.GameSessionCreated) (*eventsv1.GameSessionState, []proto.Message, error) {
	s := a.sessions.get(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	creating := false
	op := write.Op{
		Name: name,
		Read: func(ctx context.Context) (uint64, error) {
			if err := s.refreshLocked(ctx, a.opts.Store, a.log); err != nil {
				return 0, status.Errorf(codes.Unavailable, "read game session %s: %v", name, err)
			}
			return s.seq, nil
		},
		Decide: func(context.Context) ([]proto.Message, error) {
			todo := cmd
			if creating = s.state == nil && create != nil; creating {
				todo = events.CreateGameSession{Created: create()}
			}
			return events.DecideGameSession(name, s.state, todo)
		},
		Stamp: func(context.Context) events.Stamp { return a.stamp() },
	}
	store := unavailableOnError{Store: a.opts.Store, what: "record on game session " + name}
	for range 2 { // its creation, if the allocator left it out, then the player's command
		res, err := write.Do(ctx, store, op, write.Policy{Attempts: maxRecordAttempts})
		if err != nil {
			return nil, nil, err
		}
		if len(res.Events) == 0 {
			return s.state, nil, nil
		}
		msgs := make([]proto.Message, len(res.Events))
		for i, e := range res.Events {
			if s.state, err = events.ApplyGameSession(s.state, e); err != nil {
				return nil, nil, fmt.Errorf("fold own event: %w", err)
			}
			msgs[i] = e.Data
		}
		s.seq = res.Sequence
		if creating {
			a.log.Warn("game session created by the agent: its allocator stopped before it", "game_session", name)
			continue // now the player's command
		}
		if s.state.GetStatus() == eventsv1.GameSessionStatus_GAME_SESSION_STATUS_ENDED {
			a.sessions.forget(name)
		}
		return s.state, msgs, nil
	}
	return nil, nil, fmt.Errorf("agent: game session %s was created twice over", name)
}

// unavailableOnError turns the event store's failures (not its conflicts)
// into UNAVAILABLE for an SDK caller: the stream is away.
type unavailableOnError struct {
	write.Store
	what string
}

func (u unavailableOnError) Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	seq, err := u.Store.Append(ctx, subject, expected, evs...)
	if err != nil && !errors.Is(err, events.ErrConflict) {
		return 0, status.Errorf(codes.Unavailable, "%s: %v", u.what, err)
	}
	return seq, err
}

// sessionFromAllocation returns how to create the game session gsess from
// the server's allocation, or nil when the server's allocation is another.
func (gs *gameServer) sessionFromAllocation(gsess string) func() *eventsv1.GameSessionCreated {
	gs.mu.Lock()
	alloc, policy := gs.state.GetAllocation(), gs.state.GetPlayerSessionPolicy()
	gs.mu.Unlock()
	if alloc.GetGameSession() != gsess {
		return nil
	}
	return func() *eventsv1.GameSessionCreated {
		return events.SessionCreated(gs.name, gs.a.host, alloc, policy, gs.a.opts.Clock.Now(), "")
	}
}

// playerSession is playerSessionOf, refused only on the server as the
// stream's leader has it. The agent's copy of the server may not show its
// allocation yet: the allocation's notice may still be on its way, or the
// server may have been read from a replica behind the leader, and a
// player refused for that would be turned away from a match that is
// theirs. So a refusal on the copy reads the server's newer events from
// the leader and resolves again; a server that cannot be read is
// UNAVAILABLE (the game may retry), not a refusal.
func (gs *gameServer) playerSession(ctx context.Context, id string) (gameSession, psID string, err error) {
	gameSession, psID, err = gs.playerSessionOf(id)
	if status.Code(err) != codes.FailedPrecondition {
		return gameSession, psID, err
	}
	if err := gs.confirm(ctx); err != nil {
		return "", "", status.Errorf(codes.Unavailable, "read game server %s: %v", gs.name, err)
	}
	return gs.playerSessionOf(id)
}

// playerSessionOf resolves a player session id ("ps-…") or full name
// against the agent's copy of the server's current game session.
func (gs *gameServer) playerSessionOf(id string) (gameSession, psID string, err error) {
	gs.mu.Lock()
	current := gs.state.GetGameSession()
	gs.mu.Unlock()
	if current == "" {
		return "", "", status.Error(codes.FailedPrecondition, "the game server has no game session: it is not allocated")
	}
	if strings.Contains(id, "/") {
		g, p, err := events.ParsePlayerSessionName(id)
		if err != nil {
			return "", "", status.Error(codes.InvalidArgument, err.Error())
		}
		if events.GameSessionName(g) != current {
			return "", "", status.Errorf(codes.FailedPrecondition, "player session %s is not in this server's game session %s", id, current)
		}
		return current, p, nil
	}
	if err := events.CheckID(id); err != nil {
		return "", "", status.Errorf(codes.InvalidArgument, "player session id: %v", err)
	}
	return current, id, nil
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

// allocationView is the allocation as the SDK shows it.
func allocationView(a *eventsv1.GameServerAllocated) *sdkv1.GameSession {
	if a == nil {
		return nil
	}
	v := &sdkv1.GameSession{Name: a.GetGameSession(), Properties: a.GetProperties(), MaxPlayers: a.GetMaxPlayers()}
	for _, p := range a.GetPlayers() {
		v.Players = append(v.Players, &sdkv1.Player{PlayerSession: p.GetPlayerSession(), PlayerId: p.GetPlayerId(), Slot: p.GetSlot()})
	}
	return v
}
