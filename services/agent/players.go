package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

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
		Stamp: func(ctx context.Context) events.Stamp { return a.stampFor(ctx) },
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

// AcceptPlayer admits a player who presents their player session's token:
// a reserved seat becomes theirs, a disconnected one within its window is
// theirs again (same slot). Only a token of the seat's current generation
// is accepted (a reconnect revokes the earlier ones); an ACTIVE seat is
// refused to a second connection with the same token, and taken over by a
// reissued one. The seat numbers the connection, for DisconnectPlayer and
// RemovePlayer.
func (o agentSDK) AcceptPlayer(ctx context.Context, c sdkCaller, playerSession, token string) (acceptedPlayer, error) {
	ctx = c.acting(ctx)
	gs := c.gs
	gsess, psID, err := gs.playerSession(ctx, playerSession)
	if err != nil {
		return acceptedPlayer{}, err
	}
	if o.a.opts.Tokens == nil {
		return acceptedPlayer{}, status.Error(codes.FailedPrecondition, "this agent has no player-token keys (tether agent --player-token-keys)")
	}
	gsessID, _ := events.ParseGameSessionName(gsess) // the server's own game session: valid
	psName := events.PlayerSessionName(gsessID, psID)
	claims, err := o.a.opts.Tokens.Check(token, psName, o.a.opts.Clock.Now())
	if err != nil {
		gs.log.Warn("player token refused", "player_session", psName, "err", err)
		return acceptedPlayer{}, status.Errorf(codes.PermissionDenied, "token refused for %s: %v", psName, err)
	}
	cmd := events.AcceptPlayer{PlayerSession: psID, TokenGeneration: claims.Generation, Now: o.a.opts.Clock.Now()}
	state, msgs, err := o.a.decideSession(ctx, gsess, cmd, gs.sessionFromAllocation(gsess))
	if err != nil {
		gs.log.Warn("player refused", "player_session", psName, "token_generation", claims.Generation, "err", err)
		return acceptedPlayer{}, err
	}
	p := events.FindPlayer(state, psID)
	var kind string // an accept that is not refused records one event
	if len(msgs) > 0 {
		kind = events.TypeOf(msgs[0])
	}
	gs.log.Info("player accepted", "player_session", psName, "player", p.GetPlayerId(), "slot", p.GetSlot(),
		"reconnects", p.GetReconnectCount(), "connection", p.GetConnection(), "token_generation", claims.Generation, "event", kind)
	return acceptedPlayer{seat: p, reconnected: kind == "PlayerReconnected" || kind == "PlayerTakenOver", takenOver: kind == "PlayerTakenOver"}, nil
}

// DisconnectPlayer reports a player's connection lost; the seat waits for
// the reconnect window. A connection that no longer holds the seat (a newer
// one took it over) changes nothing: it is stale.
func (o agentSDK) DisconnectPlayer(ctx context.Context, c sdkCaller, playerSession string, connection int64) (*eventsv1.PlayerSessionState, bool, error) {
	ctx = c.acting(ctx)
	gs := c.gs
	gsess, psID, err := gs.playerSession(ctx, playerSession)
	if err != nil {
		return nil, false, err
	}
	cmd := events.DisconnectPlayer{PlayerSession: psID, Connection: connection, Now: o.a.opts.Clock.Now()}
	state, _, err := o.a.decideSession(ctx, gsess, cmd, gs.sessionFromAllocation(gsess))
	if err != nil {
		return nil, false, err
	}
	p := events.FindPlayer(state, psID)
	if events.StaleConnection(p, connection) {
		gs.log.Info("disconnect of a connection the seat was taken from; ignored", "player_session", p.GetName(),
			"connection", connection, "current_connection", p.GetConnection())
		return p, true, nil
	}
	gs.log.Info("player disconnected", "player_session", p.GetName(), "reconnect_deadline", p.GetReconnectDeadline().AsTime())
	return p, false, nil
}

// RemovePlayer ends a player's session for good, unless the connection
// named no longer holds the seat (then nothing changes: stale).
func (o agentSDK) RemovePlayer(ctx context.Context, c sdkCaller, playerSession string, connection int64) (bool, error) {
	ctx = c.acting(ctx)
	gs := c.gs
	gsess, psID, err := gs.playerSession(ctx, playerSession)
	if err != nil {
		return false, err
	}
	state, _, err := o.a.decideSession(ctx, gsess, events.RemovePlayer{PlayerSession: psID, Connection: connection}, gs.sessionFromAllocation(gsess))
	if err != nil {
		return false, err
	}
	if p := events.FindPlayer(state, psID); events.SeatHeld(p) && events.StaleConnection(p, connection) {
		gs.log.Info("removal by a connection the seat was taken from; ignored", "player_session", p.GetName(),
			"connection", connection, "current_connection", p.GetConnection())
		return true, nil
	}
	return false, nil
}
