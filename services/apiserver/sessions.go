package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// gameSessionService implements tetherv1.GameSessionServiceServer.
type gameSessionService struct {
	tetherv1.UnimplementedGameSessionServiceServer
	s *Server
	// decided keeps the game sessions this replica last wrote token
	// reissues to, so that the next reconnect decides without a read.
	decided decidedSessions
}

// maxDecidedSessions bounds decidedSessions.
const maxDecidedSessions = 4096

// decidedSessions caches game session states at a sequence this replica
// appended. An entry is only a guess: the append it guards fails if anyone
// wrote since, and the writer then reads the session afresh.
type decidedSessions struct {
	mu sync.Mutex
	m  map[string]decidedSession
}

// decidedSession is a game session's state after its event at seq.
type decidedSession struct {
	state *eventsv1.GameSessionState
	seq   uint64
}

func (d *decidedSessions) get(name string) (decidedSession, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.m[name]
	return v, ok
}

// put keeps a state (or forgets the session when it has ended), making
// room by dropping an arbitrary entry when full.
func (d *decidedSessions) put(name string, v decidedSession) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v.state.GetStatus() == eventsv1.GameSessionStatus_GAME_SESSION_STATUS_ENDED {
		delete(d.m, name)
		return
	}
	if d.m == nil {
		d.m = map[string]decidedSession{}
	}
	if _, ok := d.m[name]; !ok && len(d.m) >= maxDecidedSessions {
		for k := range d.m {
			delete(d.m, k)
			break
		}
	}
	d.m[name] = v
}

func (g *gameSessionService) GetGameSession(ctx context.Context, req *tetherv1.GetGameSessionRequest) (*tetherv1.GameSession, error) {
	if _, err := events.ParseGameSessionName(req.GetName()); err != nil {
		return nil, invalidField("name", err.Error())
	}
	if err := g.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	row, err := g.s.opts.Views.GameSession(ctx, req.GetName())
	if err != nil {
		return nil, g.s.archivedNotFound(ctx, req.GetName(), req.GetName(), err)
	}
	return gameSessionToAPI(row.State, row.Sequence), nil
}

func (g *gameSessionService) ListGameSessions(ctx context.Context, req *tetherv1.ListGameSessionsRequest) (*tetherv1.ListGameSessionsResponse, error) {
	q, err := parseGameSessionFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	if tok := req.GetPageToken(); tok != "" {
		after, err := decodePageToken(tok, req.GetFilter())
		if err != nil {
			return nil, err
		}
		at, name, ok := strings.Cut(after, " ")
		t, perr := time.Parse(time.RFC3339Nano, at)
		if !ok || perr != nil {
			return nil, invalidField("page_token", "not a token of this list")
		}
		q.AfterTime, q.AfterName = t, name
	}
	if err := g.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	q.Limit = size + 1
	rows, err := g.s.opts.Views.ListGameSessions(ctx, q)
	if err != nil {
		return nil, err
	}
	resp := &tetherv1.ListGameSessionsResponse{}
	for i, r := range rows {
		if i == size {
			prev := rows[i-1].State
			resp.NextPageToken = encodePageToken(prev.GetCreateTime().AsTime().Format(time.RFC3339Nano)+" "+prev.GetName(), req.GetFilter())
			break
		}
		resp.GameSessions = append(resp.GameSessions, gameSessionToAPI(r.State, r.Sequence))
	}
	return resp, nil
}

// parseGameSessionFilter parses "field=value" terms joined by " AND ";
// fields state, gameServer, fleet.
func parseGameSessionFilter(filter string) (projections.GameSessionQuery, error) {
	var q projections.GameSessionQuery
	if strings.TrimSpace(filter) == "" {
		return q, nil
	}
	for term := range strings.SplitSeq(filter, " AND ") {
		field, value, ok := strings.Cut(term, "=")
		field, value = strings.TrimSpace(field), strings.Trim(strings.TrimSpace(value), `"`)
		if !ok || value == "" {
			return q, invalidField("filter", fmt.Sprintf("term %q is not field=value", strings.TrimSpace(term)))
		}
		switch field {
		case "state":
			if value != "ACTIVE" && value != "ENDED" {
				return q, invalidField("filter", fmt.Sprintf("state=%s: value must be ACTIVE or ENDED", value))
			}
			q.State = value
		case "gameServer":
			if _, _, err := events.ParseGameServerName(value); err != nil {
				return q, invalidField("filter", fmt.Sprintf("gameServer=%s: %v", value, err))
			}
			q.GameServer = value
		case "fleet":
			if _, err := events.ParseFleetName(value); err != nil {
				return q, invalidField("filter", fmt.Sprintf("fleet=%s: %v", value, err))
			}
			q.Fleet = value
		default:
			return q, invalidField("filter", fmt.Sprintf("unknown field %q; use state, gameServer or fleet", field))
		}
	}
	return q, nil
}

// playerSession reads a player session's game session from the views.
func (g *gameSessionService) playerSession(ctx context.Context, name string, minSeq int64) (projections.Row[*eventsv1.GameSessionState], *eventsv1.PlayerSessionState, error) {
	gsess, ps, err := events.ParsePlayerSessionName(name)
	if err != nil {
		return projections.Row[*eventsv1.GameSessionState]{}, nil, invalidField("name", err.Error())
	}
	if err := g.s.waitFresh(ctx, uint64(max(minSeq, 0))); err != nil {
		return projections.Row[*eventsv1.GameSessionState]{}, nil, err
	}
	row, err := g.s.opts.Views.GameSession(ctx, events.GameSessionName(gsess))
	if err != nil {
		return row, nil, g.s.archivedNotFound(ctx, name, events.GameSessionName(gsess), err)
	}
	p := events.FindPlayer(row.State, ps)
	if p == nil {
		return row, nil, &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: fmt.Sprintf("player session %s not found", name)}
	}
	return row, p, nil
}

func (g *gameSessionService) GetPlayerSession(ctx context.Context, req *tetherv1.GetPlayerSessionRequest) (*tetherv1.PlayerSession, error) {
	row, p, err := g.playerSession(ctx, req.GetName(), req.GetMinSequence())
	if err != nil {
		return nil, err
	}
	return playerSessionToAPI(p, row.Sequence), nil
}

func (g *gameSessionService) ListPlayerSessions(ctx context.Context, req *tetherv1.ListPlayerSessionsRequest) (*tetherv1.ListPlayerSessionsResponse, error) {
	if _, err := events.ParseGameSessionName(req.GetParent()); err != nil {
		return nil, invalidField("parent", err.Error())
	}
	if err := g.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	row, err := g.s.opts.Views.GameSession(ctx, req.GetParent())
	if err != nil {
		return nil, g.s.archivedNotFound(ctx, req.GetParent(), req.GetParent(), err)
	}
	resp := &tetherv1.ListPlayerSessionsResponse{}
	for _, p := range row.State.GetPlayers() {
		resp.PlayerSessions = append(resp.PlayerSessions, playerSessionToAPI(p, row.Sequence))
	}
	return resp, nil
}

// CreatePlayerSession reserves the lowest free seat in a running game
// session, guarded by the game session's sequence.
func (g *gameSessionService) CreatePlayerSession(ctx context.Context, req *tetherv1.CreatePlayerSessionRequest) (*tetherv1.PlayerSession, error) {
	s := g.s
	gsessID, err := events.ParseGameSessionName(req.GetParent())
	if err != nil {
		return nil, invalidField("parent", err.Error())
	}
	if req.GetPlayerSession().GetPlayerId() == "" {
		return nil, invalidField("player_session.player_id", "must be set")
	}
	var state *eventsv1.GameSessionState
	psID := events.NewID("ps")
	res, err := s.write(ctx, req.GetParent(), req.GetRequestId(), "", func(ctx context.Context, last uint64) ([]proto.Message, error) {
		row, err := s.opts.Views.GameSession(ctx, req.GetParent())
		if err != nil {
			return nil, err
		}
		state = row.State
		return events.DecideGameSession(req.GetParent(), state, events.ReservePlayer{
			PlayerSession: psID, PlayerID: req.GetPlayerSession().GetPlayerId(), PlayerData: req.GetPlayerSession().GetPlayerData(), Now: s.opts.Now(),
		})
	})
	if err != nil {
		return nil, err
	}
	if res.Replayed {
		// The first call's seat: the player session its request reserved.
		if err := s.waitFresh(ctx, res.Sequence); err != nil {
			return nil, err
		}
		ev, err := s.opts.Store.Event(ctx, res.Sequence)
		if err != nil {
			return nil, err
		}
		r, ok := ev.Data.(*eventsv1.PlayerSessionReserved)
		if !ok {
			return nil, fmt.Errorf("create player session replay: event %d is %s", res.Sequence, ev.Type)
		}
		psID = r.GetSeat().GetPlayerSession()
	}
	row, p, err := g.playerSession(ctx, events.PlayerSessionName(gsessID, psID), int64(res.Sequence))
	if err != nil {
		return nil, err
	}
	out := playerSessionToAPI(p, row.Sequence)
	out.Token = s.opts.Tokens.Sign(p.GetName(), s.opts.Now().Add(s.opts.TokenTTL))
	return out, nil
}

// ReconnectPlayerSession gives a player who lost everything but their
// player session id what they need to rejoin: endpoint, seat and a fresh
// token. The token is of the seat's next token generation, recorded first
// (PlayerTokenReissued, guarded by the game session's sequence), so that
// every earlier token of the seat is refused from then on; the game
// server's AcceptPlayer records the reconnect. The seat must still be held
// (RESERVED, ACTIVE — the server may not have noticed the drop yet — or
// DISCONNECTED within its window). A request id makes it idempotent: a
// retry gets a token of the same generation.
func (g *gameSessionService) ReconnectPlayerSession(ctx context.Context, req *tetherv1.ReconnectPlayerSessionRequest) (*tetherv1.ReconnectPlayerSessionResponse, error) {
	s := g.s
	gsessID, psID, err := events.ParsePlayerSessionName(req.GetName())
	if err != nil {
		return nil, invalidField("name", err.Error())
	}
	if err := s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	decided, res, err := g.reissue(ctx, gsessID, psID, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	state, seq, err := g.reissued(ctx, gsessID, decided, res)
	if err != nil {
		return nil, err
	}
	p := events.FindPlayer(state, psID)
	if p == nil {
		return nil, &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: fmt.Sprintf("player session %s not found", req.GetName())}
	}
	gs, err := s.opts.Views.GameServer(ctx, state.GetGameServer())
	if err != nil {
		return nil, err
	}
	token := s.opts.Tokens.SignGeneration(p.GetName(), s.opts.Now().Add(s.opts.TokenTTL), p.GetTokenGeneration())
	return &tetherv1.ReconnectPlayerSessionResponse{PlayerSession: playerSessionToAPI(p, seq), Endpoint: endpointOf(gs.State), Token: token}, nil
}

// reissue appends the seat's next token generation and returns the game
// session it decided on. With a request id it takes the API's write path
// (which waits for the views, where request ids are found). Without one it
// does not wait for the projector: it takes the game session from the
// views as far as they have it and folds the rest from the stream, then
// appends guarded by the last sequence it folded.
func (g *gameSessionService) reissue(ctx context.Context, gsessID, psID, requestID string) (*eventsv1.GameSessionState, writeResult, error) {
	s := g.s
	gsess := events.GameSessionName(gsessID)
	var state *eventsv1.GameSessionState
	if requestID != "" {
		res, err := s.write(ctx, gsess, requestID, "", func(ctx context.Context, last uint64) ([]proto.Message, error) {
			row, err := s.opts.Views.GameSession(ctx, gsess)
			if err != nil {
				return nil, err
			}
			state = row.State
			return decideReissue(gsessID, state, psID, s.opts.Now())
		})
		return state, res, err
	}
	subject := events.MustSubject(gsess)
	now := s.opts.Now()
	// The first decision is made on the state this replica kept from its
	// last reissue of the session, if the command applies to it (refused,
	// it may only be stale); every other one on the stream's.
	cached, useCache := g.decided.get(gsess)
	if useCache {
		_, err := decideReissue(gsessID, cached.state, psID, now)
		useCache = err == nil
	}
	res, err := write.Do(ctx, s.opts.Store, write.Op{
		Name: gsess,
		Read: func(ctx context.Context) (uint64, error) {
			if useCache {
				useCache = false
				state = cached.state
				return cached.seq, nil
			}
			var last uint64
			var err error
			state, last, err = g.current(ctx, gsess, subject)
			return last, err
		},
		Decide: func(context.Context) ([]proto.Message, error) { return decideReissue(gsessID, state, psID, now) },
		Stamp:  func(ctx context.Context) events.Stamp { return s.stamp(ctx, "") },
	}, write.Policy{Attempts: maxWriteAttempts})
	if err != nil {
		return nil, writeResult{}, err
	}
	return state, writeResult{Sequence: res.Sequence, Events: res.Events}, nil
}

// current returns a game session's state at its last event in the stream,
// and that event's sequence: the views' row, with what the projector has
// not applied yet folded from the stream. Both reads of the stream are
// the leader's: a player refused on a replica's past (no such seat, its
// window expired) would not be told the truth.
func (g *gameSessionService) current(ctx context.Context, gsess, subject string) (*eventsv1.GameSessionState, uint64, error) {
	s := g.s
	last, err := s.opts.Store.LeaderLastSequence(ctx, subject)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", gsess, err)
	}
	row, err := s.opts.Views.GameSession(ctx, gsess)
	if err != nil && !errors.Is(err, projections.ErrNotFound) {
		return nil, 0, err
	}
	if row.Sequence >= last {
		return row.State, row.Sequence, nil
	}
	tail, err := s.opts.Store.CurrentHistory(ctx, subject, row.Sequence+1)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", gsess, err)
	}
	state, seq := row.State, row.Sequence
	for _, e := range tail {
		next, err := events.ApplyGameSession(state, e)
		switch {
		case events.Skipped(err):
			// Left out, as the projector dead-letters it; its sequence
			// guards the next append all the same.
			s.log.Warn("game session event skipped", "game_session", gsess, "sequence", e.Sequence, "type", e.Type, "err", err)
		case err != nil:
			return nil, 0, fmt.Errorf("fold %s at %d: %w", gsess, e.Sequence, err)
		default:
			state = next
		}
		seq = e.Sequence
	}
	return state, seq, nil
}

// decideReissue raises the token generation of a seat still held, or says
// why the player can no longer reconnect.
func decideReissue(gsessID string, state *eventsv1.GameSessionState, psID string, now time.Time) ([]proto.Message, error) {
	p := events.FindPlayer(state, psID)
	if p == nil {
		return nil, &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: fmt.Sprintf("player session %s not found", events.PlayerSessionName(gsessID, psID))}
	}
	msgs, err := events.DecideGameSession(events.GameSessionName(gsessID), state, events.ReissueToken{PlayerSession: psID, Now: now})
	var re *events.RefusedError
	if errors.As(err, &re) && re.Reason == events.RefusedPlayerSessionExpired {
		return nil, &apiError{code: codes.FailedPrecondition, reason: events.RefusedPlayerSessionExpired,
			msg: fmt.Sprintf("player session %s can no longer reconnect (%s)", p.GetName(), describeEnd(p))}
	}
	return msgs, err
}

// reissued returns the game session as the reissue left it, with the
// sequence to report: folded from the decided state and the appended event
// (and kept for the next reconnect), or, for a replayed request, read back
// with the token generation that request recorded.
func (g *gameSessionService) reissued(ctx context.Context, gsessID string, decided *eventsv1.GameSessionState, res writeResult) (*eventsv1.GameSessionState, uint64, error) {
	s := g.s
	gsess := events.GameSessionName(gsessID)
	if !res.Replayed {
		state := decided
		for _, e := range res.Events {
			next, err := events.ApplyGameSession(state, e)
			if err != nil {
				return nil, 0, fmt.Errorf("fold the reissue: %w", err)
			}
			state = next
		}
		g.decided.put(gsess, decidedSession{state: state, seq: res.Sequence})
		return state, res.Sequence, nil
	}
	ev, err := s.opts.Store.Event(ctx, res.Sequence)
	if err != nil {
		return nil, 0, err
	}
	r, ok := ev.Data.(*eventsv1.PlayerTokenReissued)
	if !ok {
		return nil, 0, fmt.Errorf("reconnect replay: event %d is %s", res.Sequence, ev.Type)
	}
	if err := s.waitFresh(ctx, res.Sequence); err != nil {
		return nil, 0, err
	}
	row, err := s.opts.Views.GameSession(ctx, gsess)
	if err != nil {
		return nil, 0, err
	}
	state := proto.CloneOf(row.State)
	if p := events.FindPlayer(state, r.GetPlayerSession()); p != nil {
		p.TokenGeneration = r.GetTokenGeneration() // the generation that request was given
	}
	return state, row.Sequence, nil
}

// describeEnd says why a seat is gone, for error messages.
func describeEnd(p *eventsv1.PlayerSessionState) string {
	if p.GetStatus() == eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_DISCONNECTED {
		return "reconnect window ended at " + p.GetReconnectDeadline().AsTime().Format(time.RFC3339)
	}
	s := events.PlayerSessionStatusName(p.GetStatus())
	if r := p.GetEndReason(); r != eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_UNSPECIFIED {
		s += ", " + strings.TrimPrefix(r.String(), "PLAYER_SESSION_END_REASON_")
	}
	return s
}

func gameSessionToAPI(s *eventsv1.GameSessionState, seq uint64) *tetherv1.GameSession {
	g := &tetherv1.GameSession{
		Name: s.GetName(), GameServer: s.GetGameServer(), State: tetherv1.GameSession_State(s.GetStatus()),
		Properties: s.GetProperties(), MaxPlayers: s.GetPolicy().GetMaxPlayers(), PlayerCount: int32(events.SeatsTaken(s)),
		ServerReason: events.ReasonName(s.GetServerReason()), ReconnectWindowSeconds: s.GetPolicy().GetReconnectWindowSeconds(),
		CreateTime: s.GetCreateTime(), UpdateTime: s.GetUpdateTime(), Sequence: int64(seq),
	}
	if r := s.GetEndReason(); r != eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_UNSPECIFIED {
		g.EndReason = strings.TrimPrefix(r.String(), "GAME_SESSION_END_REASON_")
	}
	return g
}

func playerSessionToAPI(p *eventsv1.PlayerSessionState, seq uint64) *tetherv1.PlayerSession {
	out := &tetherv1.PlayerSession{
		Name: p.GetName(), PlayerId: p.GetPlayerId(), PlayerData: p.GetPlayerData(), State: tetherv1.PlayerSession_State(p.GetStatus()),
		Slot: p.GetSlot(), ReservationDeadline: p.GetReservationDeadline(), ReconnectDeadline: p.GetReconnectDeadline(),
		ReconnectCount: p.GetReconnectCount(), CreateTime: p.GetCreateTime(), UpdateTime: p.GetUpdateTime(), Sequence: int64(seq),
		TokenGeneration: p.GetTokenGeneration(),
	}
	if r := p.GetEndReason(); r != eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_UNSPECIFIED {
		out.EndReason = strings.TrimPrefix(r.String(), "PLAYER_SESSION_END_REASON_")
	}
	return out
}
