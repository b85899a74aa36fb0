package agent

import (
	"context"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// heartbeat notes a heartbeat from the process, a call carrying its token
// over transport ("": one the caller noted already, as an open
// HealthStream does).
//
// It never waits for an append. The server's lock is held while its events
// are appended, and an append can take seconds when NATS is busy: a
// heartbeat that waited behind it held up the game's next heartbeat too,
// and the agent counted as missed the periods it was itself too busy to
// take the beats in (at 100,000 simulated servers, healthy servers were
// judged FAILED this way; docs/scaling.md). So the arrival is noted first,
// lock-free (lastHeartbeat), and periods are counted from it. If the lock
// is free and the beat changes nothing to record, it is folded in place.
// Otherwise (the lock is held, or the beat ends a degradation or proves a
// connection the state does not show) a background fold takes the lock and
// folds it, recording HealthRecovered or SdkConnected; the health
// evaluation folds what is pending before it judges, so a verdict never
// waits for the background fold either.
func (gs *gameServer) heartbeat(ctx context.Context, transport string) {
	now := gs.a.opts.Clock.Now()
	gs.lastHeartbeat.Store(now.UnixNano())
	gs.foldSoon(ctx, transport, now, true)
}

// foldSoon folds a call that must not wait for the server's lock: the
// connection it proves over transport ("": none to note) and, if beat, its
// heartbeat at now. In place if the lock is free and nothing is to be
// recorded; otherwise the connection is left pending and a background fold
// takes it (the heartbeat's arrival is in lastHeartbeat already).
func (gs *gameServer) foldSoon(ctx context.Context, transport string, now time.Time, beat bool) {
	if gs.mu.TryLock() {
		inPlace := (transport == "" || gs.state.GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED) &&
			(!beat || (gs.check != nil && gs.check.reported == 0))
		if inPlace && gs.check != nil {
			if transport != "" {
				gs.check.connected()
			}
			if beat {
				gs.check.heartbeat(now)
			}
		}
		gs.mu.Unlock()
		if inPlace {
			return
		}
	}
	if transport != "" {
		gs.pendingConn.Store(&pendingConnect{transport: transport, remote: remoteOf(ctx), at: now})
	}
	gs.foldInBackground(ctx)
}

// lastArrival is when the process's last heartbeat arrived (zero: none
// yet), read without the lock.
func (gs *gameServer) lastArrival() time.Time {
	if ns := gs.lastHeartbeat.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// pendingConnect is a connection a heartbeat proved that is not folded yet.
type pendingConnect struct {
	transport, remote string
	at                time.Time
}

// foldInBackground folds what heartbeats left pending on a goroutine of
// its own, which waits for the server's lock: at most one per server at a
// time, and none once the agent stops (what is pending then is not
// recorded, as no connection change is while the agent stops).
func (gs *gameServer) foldInBackground(ctx context.Context) {
	if !gs.folding.CompareAndSwap(false, true) {
		return // the running fold takes this beat too, or the evaluation does
	}
	base := context.WithoutCancel(ctx) // the call's values (its trace), not its end
	started := gs.a.background.start(func() {
		for {
			gs.mu.Lock()
			if gs.a.stopping.Load() {
				gs.pendingConn.Store(nil) // no connection change is recorded while the agent stops
			} else {
				// The deadline is the appends', not the wait for the lock.
				ctx, cancel := context.WithTimeout(base, finalEventTimeout)
				gs.foldPendingLocked(ctx)
				cancel()
			}
			gs.mu.Unlock()
			gs.folding.Store(false)
			// A connection noted after the fold read it, whose own call
			// found the fold still running: fold again.
			if gs.pendingConn.Load() == nil || !gs.folding.CompareAndSwap(false, true) {
				return
			}
		}
	})
	if !started {
		gs.folding.Store(false)
	}
}

// foldPendingLocked folds what heartbeat calls noted without the lock: the
// connection they proved (unless a disconnect was recorded since), then
// the last beat's arrival.
func (gs *gameServer) foldPendingLocked(ctx context.Context) {
	if c := gs.pendingConn.Swap(nil); c != nil {
		if gs.check == nil || gs.check.disconnectedAt.IsZero() || c.at.After(gs.check.disconnectedAt) {
			gs.connectedFromLocked(ctx, c.transport, c.remote)
		}
	}
	if at := gs.lastArrival(); gs.check != nil && at.After(gs.check.lastBeat) {
		gs.heartbeatLocked(ctx, at)
	}
}

// heartbeatLocked folds a heartbeat that arrived at at into the health
// contract.
func (gs *gameServer) heartbeatLocked(ctx context.Context, at time.Time) {
	if gs.check == nil {
		return
	}
	if gs.check.heartbeat(at) {
		if err := gs.recordLocked(ctx, events.RecordHeartbeatsResumed{At: at}); err != nil {
			gs.log.Warn("record heartbeats resumed", "err", err)
		}
	}
}
