package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// sessionBatch bounds the game sessions one pass handles per duty; the
// rest wait for the next pass.
const sessionBatch = 500

// uncreatedAfter is how long an allocation may wait for its game session
// before the controller creates it (the allocator stopped between its two
// appends).
const uncreatedAfter = 5 * time.Second

// reconcileSessions carries out the controller's game-session duties, each
// as appends guarded by the aggregate's sequence: a conflict means someone
// (a reconnecting player, an agent) wrote first, and the next pass decides
// again on fresh views.
//   - reservations that ran out end: RESERVED servers return to READY,
//     reserved seats time out;
//   - reconnect windows that ran out complete their player sessions;
//   - game sessions whose server no longer runs them end, with the
//     server's reason;
//   - allocations whose game session was never created get it.
func (c *Controller) reconcileSessions(ctx context.Context, servers []postgres.Row[*eventsv1.GameServerState], note func(uint64)) error {
	now := c.opts.Now()
	for _, r := range servers {
		if r.State.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_RESERVED {
			continue
		}
		c.appendServer(ctx, r, events.EndReservation{Now: now}, note)
	}
	due, err := c.opts.Views.DueGameSessions(ctx, now, sessionBatch)
	if err != nil {
		return err
	}
	for _, r := range due {
		c.appendSession(ctx, r, events.ExpirePlayers{Now: now}, note)
	}
	orphans, err := c.opts.Views.OrphanedGameSessions(ctx, sessionBatch)
	if err != nil {
		return err
	}
	for _, r := range orphans {
		cmd, err := c.sessionEnd(ctx, r.State)
		if err != nil {
			c.log.Error("read the server of a game session", "game_session", r.State.GetName(), "err", err)
			continue
		}
		c.appendSession(ctx, r, cmd, note)
	}
	uncreated, err := c.opts.Views.UncreatedGameSessions(ctx, now.Add(-uncreatedAfter), sessionBatch)
	if err != nil {
		return err
	}
	for _, r := range uncreated {
		if err := c.createSession(ctx, r.State, now, note); err != nil {
			c.log.Error("create the game session of an allocation", "game_server", r.State.GetName(), "err", err)
		}
	}
	return nil
}

// sessionEnd decides why a game session whose server moved on ends.
func (c *Controller) sessionEnd(ctx context.Context, s *eventsv1.GameSessionState) (events.EndGameSession, error) {
	gs, err := c.opts.Views.GameServer(ctx, s.GetGameServer())
	if err != nil {
		return events.EndGameSession{}, err
	}
	st := gs.State
	if st.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_READY || st.GetGameSession() != "" && st.GetGameSession() != s.GetName() {
		return events.EndGameSession{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_READY_AGAIN,
			Detail: "the game server called Ready again"}, nil
	}
	return events.EndGameSession{
		Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED, ServerReason: st.GetReason(),
		Detail: fmt.Sprintf("game server %s is %s", st.GetName(), events.LifecycleName(st.GetLifecycle())),
	}, nil
}

// createSession appends the GameSessionCreated an allocator left out, from
// the server's allocation, as the first event of the session's subject.
func (c *Controller) createSession(ctx context.Context, gs *eventsv1.GameServerState, now time.Time, note func(uint64)) error {
	alloc := gs.GetAllocation()
	fleet, _, err := events.ParseGameServerName(gs.GetName())
	if err != nil {
		return err
	}
	f, err := c.opts.Views.Fleet(ctx, events.FleetName(fleet))
	if err != nil {
		return err
	}
	created := events.SessionCreated(gs.GetName(), alloc, f.State.GetSpec().GetPlayerSessions(), now, "")
	name := alloc.GetGameSession()
	msgs, err := events.DecideGameSession(name, nil, events.CreateGameSession{Created: created})
	if err != nil {
		return err
	}
	seq, err := c.opts.Store.Append(ctx, events.MustSubject(name), 0, c.envelopes(name, msgs)...)
	if errors.Is(err, events.ErrConflict) {
		return nil // its allocator created it after all
	}
	if err != nil {
		return err
	}
	note(seq)
	c.log.Warn("game session created by the controller: its allocator stopped before it", "game_session", name, "game_server", gs.GetName())
	return nil
}

// appendSession decides a command on a game session and appends the
// result guarded by the row's sequence.
func (c *Controller) appendSession(ctx context.Context, r postgres.Row[*eventsv1.GameSessionState], cmd events.GameSessionCommand, note func(uint64)) {
	name := r.State.GetName()
	msgs, err := events.DecideGameSession(name, r.State, cmd)
	if err != nil {
		c.log.Error("game session decision", "game_session", name, "command", fmt.Sprintf("%T", cmd), "err", err)
		return
	}
	c.appendGuarded(ctx, name, r.Sequence, msgs, note)
}

// appendServer decides a command on a game server and appends the result
// guarded by the row's sequence.
func (c *Controller) appendServer(ctx context.Context, r postgres.Row[*eventsv1.GameServerState], cmd events.GameServerCommand, note func(uint64)) {
	name := r.State.GetName()
	msgs, err := events.DecideGameServer(name, r.State, cmd)
	if err != nil {
		c.log.Error("game server decision", "game_server", name, "command", fmt.Sprintf("%T", cmd), "err", err)
		return
	}
	c.appendGuarded(ctx, name, r.Sequence, msgs, note)
}

// appendGuarded appends decided events; a conflict leaves the decision to
// the next pass.
func (c *Controller) appendGuarded(ctx context.Context, name string, guard uint64, msgs []proto.Message, note func(uint64)) {
	if len(msgs) == 0 {
		return
	}
	seq, err := c.opts.Store.Append(ctx, events.MustSubject(name), guard, c.envelopes(name, msgs)...)
	if errors.Is(err, events.ErrConflict) {
		c.log.Debug("aggregate changed under the decision; next pass", "aggregate", name)
		return
	}
	if err != nil {
		c.log.Error("append decision", "aggregate", name, "err", err)
		return
	}
	note(seq)
	for _, m := range msgs {
		c.log.Info("controller decision appended", "aggregate", name, "event", events.TypeOf(m))
	}
}
