package plan

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

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
func (p Planner) planSessions(s Snapshot, out *Plan) {
	for _, r := range s.Servers {
		if r.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_RESERVED {
			p.decideServer(r, events.EndReservation{Now: s.Now}, out)
		}
	}
	for _, r := range s.DueSessions {
		p.decideSession(r, events.ExpirePlayers{Now: s.Now}, out)
	}
	for _, o := range s.OrphanSessions {
		p.decideSession(o.Session, sessionEnd(o.Server, o.Session.State), out)
	}
	for _, u := range s.UncreatedSessions {
		p.createSession(u, s.Now, out)
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
func (p Planner) createSession(u UncreatedSession, now time.Time, out *Plan) {
	alloc := u.Server.GetAllocation()
	created := events.SessionCreated(u.Server.GetName(), u.Server.GetHost(), alloc, u.Policy, now, "")
	name := alloc.GetGameSession()
	msgs, err := events.DecideGameSession(name, nil, events.CreateGameSession{Created: created})
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("create the game session of %s: %w", u.Server.GetName(), err))
		return
	}
	out.Decisions = append(out.Decisions, Decision{Action: ActSession, Name: name, Events: msgs,
		Say: "game session created by the controller: its allocator stopped before it", Attrs: []any{"game_session", name, "game_server", u.Server.GetName()}})
}

// decideSession decides a command on a game session.
func (p Planner) decideSession(r projections.Row[*eventsv1.GameSessionState], cmd events.GameSessionCommand, out *Plan) {
	name := r.State.GetName()
	msgs, err := events.DecideGameSession(name, r.State, cmd)
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("game session %s, %T: %w", name, cmd, err))
		return
	}
	p.deadline(name, "", r.Sequence, msgs, out)
}

// decideServer decides a command on a game server.
func (p Planner) decideServer(r projections.Row[*eventsv1.GameServerState], cmd events.GameServerCommand, out *Plan) {
	name := r.State.GetName()
	msgs, err := events.DecideGameServer(name, r.State, cmd)
	if err == nil && len(msgs) > 0 {
		var subject string
		if subject, err = events.SubjectOf(r.State); err == nil {
			p.deadline(name, subject, r.Sequence, msgs, out)
		}
	}
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("game server %s, %T: %w", name, cmd, err))
	}
}

// deadline adds a session duty's events, if any, on aggregate name
// (subject: its subject when it is a game server), guarded by guard.
func (p Planner) deadline(name, subject string, guard uint64, msgs []proto.Message, out *Plan) {
	if len(msgs) == 0 {
		return
	}
	out.Decisions = append(out.Decisions, Decision{Action: ActSession, Name: name, Subject: subject, Guard: guard, Events: msgs,
		Say: "controller decision appended", Attrs: []any{"aggregate", name}})
}
