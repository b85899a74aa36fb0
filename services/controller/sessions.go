package controller

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// sessionBatch bounds the game sessions one pass handles per duty; the
// rest wait for the next pass.
const sessionBatch = 500

// uncreatedAfter is how long an allocation may wait for its game session
// before the controller creates it (the allocator stopped between its two
// appends).
const uncreatedAfter = 5 * time.Second

// planSessions carries out the controller's game-session duties, each as
// an append guarded by the aggregate's sequence: a conflict means someone
// (a reconnecting player, an agent) wrote first, and the next pass decides
// again on fresh views.
//   - reservations that ran out end: RESERVED servers return to READY,
//     reserved seats time out;
//   - reconnect windows that ran out complete their player sessions;
//   - game sessions whose server no longer runs them end, with the
//     server's reason;
//   - allocations whose game session was never created get it.
func (p planner) planSessions(s snapshot, out *Plan) {
	for _, r := range s.servers {
		if r.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_RESERVED {
			p.decideServer(r, events.EndReservation{Now: s.now}, out)
		}
	}
	for _, r := range s.dueSessions {
		p.decideSession(r, events.ExpirePlayers{Now: s.now}, out)
	}
	for _, o := range s.orphanSessions {
		p.decideSession(o.session, sessionEnd(o.server, o.session.State), out)
	}
	for _, u := range s.uncreatedSessions {
		p.createSession(u, s.now, out)
	}
}

// sessionEnd decides why a game session whose server moved on ends.
func sessionEnd(gs *eventsv1.GameServerState, s *eventsv1.GameSessionState) events.EndGameSession {
	if gs.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_READY || gs.GetGameSession() != "" && gs.GetGameSession() != s.GetName() {
		return events.EndGameSession{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_READY_AGAIN,
			Detail: "the game server called Ready again"}
	}
	return events.EndGameSession{
		Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED, ServerReason: gs.GetReason(),
		Detail: fmt.Sprintf("game server %s is %s", gs.GetName(), events.LifecycleName(gs.GetLifecycle())),
	}
}

// createSession decides the GameSessionCreated an allocator left out, from
// the server's allocation, as the first event of the session's subject (a
// conflict: its allocator created it after all).
func (p planner) createSession(u uncreatedSession, now time.Time, out *Plan) {
	alloc := u.server.GetAllocation()
	created := events.SessionCreated(u.server.GetName(), u.server.GetHost(), alloc, u.policy, now, "")
	name := alloc.GetGameSession()
	msgs, err := events.DecideGameSession(name, nil, events.CreateGameSession{Created: created})
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("create the game session of %s: %w", u.server.GetName(), err))
		return
	}
	out.decisions = append(out.decisions, decision{action: actSession, name: name, events: msgs,
		say: "game session created by the controller: its allocator stopped before it", attrs: []any{"game_session", name, "game_server", u.server.GetName()}})
}

// decideSession decides a command on a game session.
func (p planner) decideSession(r projections.Row[*eventsv1.GameSessionState], cmd events.GameSessionCommand, out *Plan) {
	name := r.State.GetName()
	msgs, err := events.DecideGameSession(name, r.State, cmd)
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("game session %s, %T: %w", name, cmd, err))
		return
	}
	p.deadline(name, "", r.Sequence, msgs, out)
}

// decideServer decides a command on a game server.
func (p planner) decideServer(r projections.Row[*eventsv1.GameServerState], cmd events.GameServerCommand, out *Plan) {
	name := r.State.GetName()
	msgs, err := events.DecideGameServer(name, r.State, cmd)
	if err == nil && len(msgs) > 0 {
		var subject string
		if subject, err = events.SubjectOf(r.State); err == nil {
			p.deadline(name, subject, r.Sequence, msgs, out)
		}
	}
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("game server %s, %T: %w", name, cmd, err))
	}
}

// deadline adds a session duty's events, if any, on aggregate name
// (subject: its subject when it is a game server), guarded by guard.
func (p planner) deadline(name, subject string, guard uint64, msgs []proto.Message, out *Plan) {
	if len(msgs) == 0 {
		return
	}
	out.decisions = append(out.decisions, decision{action: actSession, name: name, subject: subject, guard: guard, events: msgs,
		say: "controller decision appended", attrs: []any{"aggregate", name}})
}
