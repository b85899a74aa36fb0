package agent

import (
	"context"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// healthPing notes a health ping from the process (an SDK Health call, or
// a HealthStream message), a call carrying its token over transport ("":
// one the caller noted already, as an open HealthStream does).
//
// It never waits for an append. The server's lock is held while its events
// are appended, and an append can take seconds when NATS is busy: a
// health ping that waited behind it held up the game's next ping too, and
// the agent counted as missed the periods it was itself too busy to take
// the pings in (at 100,000 simulated servers, healthy servers were judged
// FAILED this way; docs/scaling.md). So the arrival is noted first,
// lock-free (lastPing), and periods are counted from it. If the lock is
// free and the ping changes nothing to record, it is folded in place.
// Otherwise (the lock is held, or the ping ends a degradation or proves a
// connection the state does not show) a background fold takes the lock and
// folds it, recording HealthRecovered or SdkConnected; the health
// evaluation folds what is pending before it judges, so a verdict never
// waits for the background fold either.
func (gs *gameServer) healthPing(ctx context.Context, transport string) {
	now := gs.a.opts.Clock.Now()
	gs.lastPing.Store(now.UnixNano())
	gs.foldSoon(ctx, transport, now, true)
}

// foldSoon folds a call that must not wait for the server's lock: the
// connection it proves over transport ("": none to note) and, if ping, its
// health ping at now. In place if the lock is free and nothing is to be
// recorded; otherwise the connection is left pending and a background fold
// takes it (the ping's arrival is in lastPing already).
func (gs *gameServer) foldSoon(ctx context.Context, transport string, now time.Time, ping bool) {
	if gs.mu.TryLock() {
		inPlace := (transport == "" || gs.state.GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED) &&
			(!ping || (gs.check != nil && gs.check.reported == 0))
		if inPlace && gs.check != nil {
			if transport != "" {
				gs.check.connected()
			}
			if ping {
				gs.check.pinged(now)
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

// lastPingAt is when the process's last health ping arrived (zero: none
// yet), read without the lock.
func (gs *gameServer) lastPingAt() time.Time {
	if ns := gs.lastPing.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// pendingConnect is a connection a health ping proved that is not folded
// yet.
type pendingConnect struct {
	transport, remote string
	at                time.Time
}

// foldInBackground folds what health pings left pending on a goroutine of
// its own, which waits for the server's lock: at most one per server at a
// time, and none once the agent stops (what is pending then is not
// recorded, as no connection change is while the agent stops).
func (gs *gameServer) foldInBackground(ctx context.Context) {
	if !gs.folding.CompareAndSwap(false, true) {
		return // the running fold takes this ping too, or the evaluation does
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

// foldPendingLocked folds what health pings noted without the lock: the
// connection they proved (unless a disconnect was recorded since), then
// the last ping's arrival.
func (gs *gameServer) foldPendingLocked(ctx context.Context) {
	if c := gs.pendingConn.Swap(nil); c != nil {
		if gs.check == nil || gs.check.disconnectedAt.IsZero() || c.at.After(gs.check.disconnectedAt) {
			gs.connectedFromLocked(ctx, c.transport, c.remote)
		}
	}
	if at := gs.lastPingAt(); gs.check != nil && at.After(gs.check.lastPing) {
		gs.foldPingLocked(ctx, at)
	}
}

// foldPingLocked folds a health ping that arrived at at into the health
// contract, and records HealthRecovered if it ends a degradation.
func (gs *gameServer) foldPingLocked(ctx context.Context, at time.Time) {
	if gs.check == nil {
		return
	}
	if gs.check.pinged(at) {
		if err := gs.recordLocked(ctx, events.RecordHeartbeatsResumed{At: at}); err != nil {
			gs.log.Warn("record heartbeats resumed", "err", err)
		}
	}
}
