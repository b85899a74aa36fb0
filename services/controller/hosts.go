package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/hostbeat"
)

// checkHosts turns host heartbeats into liveness verdicts (DESIGN.md §4):
// a host silent for UnreachableAfter becomes UNREACHABLE (its servers keep
// running and are not replaced: the control plane merely lost sight of
// them); silent for LostAfter it becomes LOST and its live servers are
// terminated with HOST_LOST, so the fleets replace them; a heartbeat brings
// it back ONLINE. It returns the host statuses after its verdicts.
func (c *Controller) checkHosts(ctx context.Context, hosts []postgres.HostRow, servers []postgres.Row[*eventsv1.GameServerState],
	note func(uint64)) (map[string]eventsv1.HostStatus, error) {
	if c.beats == nil {
		kv, err := hostbeat.Open(ctx, c.opts.JetStream)
		if err != nil {
			return nil, err
		}
		c.beats = kv
	}
	beats, err := hostbeat.Last(ctx, c.beats)
	if err != nil {
		return nil, err
	}
	now := c.opts.Now()
	status := map[string]eventsv1.HostStatus{}
	for _, h := range hosts {
		name := h.State.GetName()
		status[name] = h.State.GetStatus()
		id, err := events.ParseHostName(name)
		if err != nil {
			return nil, err
		}
		if b, ok := beats[id]; ok && b.After(c.seen[id]) {
			c.seen[id] = b
		}
		last, ok := c.seen[id]
		if !ok {
			// First sight since this instance leads: give it a full grace.
			last, c.seen[id] = now, now
		}
		silent := now.Sub(last)
		var cmd events.HostCommand
		switch st := h.State.GetStatus(); {
		case (st == eventsv1.HostStatus_HOST_STATUS_ONLINE || st == eventsv1.HostStatus_HOST_STATUS_DRAINING) && silent > c.opts.UnreachableAfter:
			cmd = events.MarkHostUnreachable{LastHeartbeat: last}
		case st == eventsv1.HostStatus_HOST_STATUS_UNREACHABLE && silent > c.opts.LostAfter:
			cmd = events.MarkHostLost{LastHeartbeat: last}
		case (st == eventsv1.HostStatus_HOST_STATUS_UNREACHABLE || st == eventsv1.HostStatus_HOST_STATUS_LOST) && silent <= c.opts.UnreachableAfter:
			cmd = events.MarkHostOnline{LastHeartbeat: last}
		default:
			continue
		}
		msgs, err := events.DecideHost(name, h.State, cmd)
		if err != nil || len(msgs) == 0 {
			if err != nil {
				c.log.Error("host verdict refused", "host", name, "err", err)
			}
			continue
		}
		seq, err := c.opts.Store.Append(ctx, events.MustSubject(name), h.Sequence, c.envelopes(name, msgs)...)
		if errors.Is(err, events.ErrConflict) {
			continue // the host changed (e.g. re-registered); next pass
		}
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", name, err)
		}
		note(seq)
		typ := events.TypeOf(msgs[0])
		c.log.Warn("host liveness changed", "host", name, "event", typ, "silent", silent.Round(time.Millisecond))
		switch typ {
		case "HostUnreachable":
			status[name] = eventsv1.HostStatus_HOST_STATUS_UNREACHABLE
		case "HostOnline":
			status[name] = eventsv1.HostStatus_HOST_STATUS_ONLINE
		case "HostLost":
			status[name] = eventsv1.HostStatus_HOST_STATUS_LOST
			c.terminateLost(ctx, name, last, servers, note)
		}
	}
	return status, nil
}

// terminateLost ends every live server of a lost host with HOST_LOST.
func (c *Controller) terminateLost(ctx context.Context, host string, last time.Time, servers []postgres.Row[*eventsv1.GameServerState], note func(uint64)) {
	for _, r := range servers {
		if r.State.GetHost() != host {
			continue
		}
		name := r.State.GetName()
		ev := &eventsv1.Evidence{RequestedBy: c.producer, Detail: fmt.Sprintf("host %s lost: no heartbeat since %s", host, last.Format(time.RFC3339))}
		msgs, err := events.DecideGameServer(name, r.State, events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST, Evidence: ev})
		if err != nil {
			c.log.Error("terminate server of a lost host", "game_server", name, "err", err)
			continue
		}
		seq, err := c.opts.Store.Append(ctx, events.MustSubject(name), r.Sequence, c.envelopes(name, msgs)...)
		if err != nil {
			c.log.Error("terminate server of a lost host", "game_server", name, "err", err)
			continue
		}
		note(seq)
		c.shutdowns.Add(ctx, 1)
	}
}
