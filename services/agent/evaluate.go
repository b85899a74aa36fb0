package agent

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// evaluateHealth applies every server's health contract each interval,
// leaving out the agent's own pauses (runWatch).
func (a *Agent) evaluateHealth(ctx context.Context) error {
	t := a.opts.Clock.NewTicker(a.opts.HealthEvalInterval)
	defer t.Stop()
	var list []*gameServer // reused: this runs every 200 ms on every host
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
		}
		list = a.snapshotInto(list)
		now := a.opts.Clock.Now()
		// Asked after now is read: a pause the watch has not noted yet
		// (this tick came first after the agent resumed) is in it.
		pauses := a.watch.pausesAt(a.opts.RunClock.Now(), now)
		for _, gs := range list {
			gs.evaluate(ctx, now, pauses)
		}
		clear(list) // hold no finished server until the next tick
	}
}

// evaluate applies the health contract now, recording missed health periods
// (and UNHEALTHY at the threshold) and an expired disconnect grace; the
// agent's pauses count toward none of its periods (healthCheck).
func (gs *gameServer) evaluate(ctx context.Context, now time.Time, pauses []pause) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	switch gs.state.GetLifecycle() {
	case eventsv1.Lifecycle_LIFECYCLE_STARTING, eventsv1.Lifecycle_LIFECYCLE_READY,
		eventsv1.Lifecycle_LIFECYCLE_RESERVED, eventsv1.Lifecycle_LIFECYCLE_ALLOCATED:
	default:
		return
	}
	if gs.check == nil || gs.stopping || gs.proc == nil {
		return
	}
	gs.foldPendingLocked(ctx)
	v := gs.check.due(now, pauses)
	if v.missed > 0 {
		gs.log.Warn("game server missed heartbeats", "missed", v.missed, "last_heartbeat", gs.check.lastPing, "evaluated_at", now)
		if err := gs.recordLocked(ctx, events.RecordMissedHeartbeats{Missed: v.missed, LastHeartbeat: gs.check.lastPing}); err != nil {
			gs.log.Error("record missed heartbeats", "err", err)
		}
	}
	if v.graceExpired && gs.state.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY {
		gs.log.Warn("SDK disconnect grace expired with no heartbeat since", "disconnected_at", gs.check.disconnectedAt)
		ev := &eventsv1.Evidence{ConnectionHistory: gs.state.GetConnectionHistory(), Detail: fmt.Sprintf(
			"SDK disconnected at %s; no call carrying the process token for %s", gs.check.disconnectedAt.Format(time.RFC3339), gs.check.grace)}
		if !gs.check.lastPing.IsZero() {
			ev.LastHeartbeatTime = timestamppb.New(gs.check.lastPing)
		}
		if err := gs.recordLocked(ctx, events.MarkUnhealthy{Reason: eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED, Evidence: ev}); err != nil {
			gs.log.Error("record grace expiry", "err", err)
		}
	}
	if gs.state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_STARTING && gs.readyCalls.Load() == 0 && gs.check.readyOverdue(now, pauses) {
		timeout := gs.check.readyBy.Sub(gs.check.started)
		gs.log.Warn("game server did not say Ready in time", "ready_timeout", timeout, "started", gs.check.started)
		ev := &eventsv1.Evidence{StartAttempts: gs.state.GetStartAttempts(), ConnectionHistory: gs.state.GetConnectionHistory(), Detail: fmt.Sprintf(
			"the process started at %s and had not called Ready %s later (the fleet's ready timeout)", gs.check.started.Format(time.RFC3339), timeout)}
		if !gs.check.lastPing.IsZero() {
			ev.LastHeartbeatTime = timestamppb.New(gs.check.lastPing)
		}
		if err := gs.recordLocked(ctx, events.MarkUnhealthy{Reason: eventsv1.Reason_REASON_READY_TIMEOUT, Evidence: ev}); err != nil {
			gs.log.Error("record ready timeout; the next evaluation tries again", "err", err)
			gs.check.readyReported = false
		}
	}
}
