package controller

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller/plan"
	"github.com/tetherhq/tether/services/nats/hostbeat"
)

// sessionBatch bounds the game sessions one pass handles per duty; the
// rest wait for the next pass.
const sessionBatch = 500

// uncreatedAfter is how long an allocation may wait for its game session
// before the controller creates it (the allocator stopped between its two
// appends).
const uncreatedAfter = 5 * time.Second

// observe reads what a pass decides from (plan.Snapshot): the views (once they
// include this leader's writes), the host heartbeats, and what the
// controller remembers between passes. On stale views it reads only what
// host liveness needs.
// Each step is marked in steps.
func (c *Controller) observe(ctx context.Context, steps *passSteps) (plan.Snapshot, error) {
	s := plan.Snapshot{Now: c.opts.Clock.Now(), StartResent: maps.Clone(c.startResent)}
	stale, err := c.checkViews(ctx)
	steps.mark("views checked")
	if err != nil {
		return s, err
	}
	s.Stale = stale
	if !stale {
		err := c.awaitViews(ctx)
		steps.mark("views caught up")
		if err != nil {
			return s, err
		}
		s.Fleets, err = c.allFleets(ctx)
		steps.mark("fleets read")
		if err != nil {
			return s, err
		}
	}
	s.Servers, err = c.live.read(ctx)
	steps.mark("servers read")
	if err != nil {
		return s, err
	}
	hosts, err := c.hosts.read(ctx)
	steps.mark("hosts read")
	if err != nil {
		return s, err
	}
	s.Hosts = withUse(hosts, s.Servers)
	beats, err := c.readBeats(ctx)
	steps.mark("heartbeats read")
	if err != nil {
		return s, err
	}
	s.Beats = plannedBeats(beats)
	s.Heard = c.hear(s.Hosts, beats, s.Now)
	s.BeatsSince = c.beats.LeaderSince()
	c.noteBeatsLeader(s.BeatsSince, s.Now)
	if stale {
		return s, nil
	}
	s.ByFleet, s.Misnamed = plan.GroupByFleet(s.Servers)
	s.DeletedFleets = c.readDeletedFleets(ctx, s.Fleets, s.ByFleet)
	steps.mark("deleted fleets read")
	s.Webhooks = c.hooks.poll(ctx, s.Fleets, s.Servers, s.Now)
	steps.mark("webhooks polled")
	var autoscaled []string
	for _, f := range s.Fleets {
		if f.State.GetSpec().GetAutoscaling() != nil {
			if id, err := events.ParseFleetName(f.State.GetName()); err == nil {
				autoscaled = append(autoscaled, id)
			}
		}
	}
	// The views include every event up to c.written (awaitViews above).
	if err := c.wake.want(ctx, autoscaled, c.written+1); err != nil {
		c.log.Warn("follow game servers' events; replacements and buffer refills wait for the next pass", "err", err)
	}
	steps.mark("events followed")
	err = c.readSessions(ctx, &s)
	steps.mark("sessions read")
	if err != nil {
		return s, err
	}
	// Last: the start news are the controller's to keep until executed.
	s.StartNews, err = c.readStarts(ctx, s.Fleets)
	steps.mark("start failures read")
	if err != nil {
		return s, err
	}
	return s, nil
}

// hear updates when each host was last heard of while this instance leads
// from the heartbeats, and returns it by host id. A host first seen gets a
// full grace: it was heard of now.
func (c *Controller) hear(hosts []projections.HostRow, beats map[string]hostbeat.Beat, now time.Time) map[string]time.Time {
	heard := make(map[string]time.Time, len(hosts))
	for _, h := range hosts {
		id, err := events.ParseHostName(h.State.GetName())
		if err != nil {
			continue // the planner refuses it
		}
		if beat, ok := beats[id]; ok && beat.Stored.After(c.seen[id]) {
			c.seen[id] = beat.Stored
		}
		if _, ok := c.seen[id]; !ok {
			c.seen[id] = now
		}
		heard[id] = c.seen[id]
	}
	return heard
}

// noteBeatsLeader logs an election of the heartbeat bucket's leader (at
// since) it had not seen that is recent enough to spare a silent host its
// verdict (within UnreachableAfter of now).
func (c *Controller) noteBeatsLeader(since, now time.Time) {
	if since.Equal(c.beatsSince) {
		return
	}
	c.beatsSince = since
	if now.Sub(since) < c.opts.UnreachableAfter {
		c.log.Info("the host heartbeat bucket has a new leader: a host's silence counts from its election",
			"elected", since.Format(time.RFC3339Nano), "ago", now.Sub(since).Round(time.Millisecond))
	}
}

// readDeletedFleets reads the fleets of live servers (byFleet) that are
// not among the live fleets, and returns those deleted (the others were
// created since the fleets were read). A fleet that cannot be read is
// logged and counts as not deleted this pass.
func (c *Controller) readDeletedFleets(ctx context.Context, fleets []projections.FleetRow, byFleet map[string][]projections.Row[*eventsv1.GameServerState]) map[string]bool {
	live := make(map[string]bool, len(fleets))
	for _, f := range fleets {
		live[f.State.GetName()] = true
	}
	standalone := events.FleetName(events.StandaloneFleet)
	deleted := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(byFleet)) {
		if name == standalone || live[name] {
			continue
		}
		f, err := c.opts.Views.Fleet(ctx, name)
		if err != nil {
			c.log.Error("read the fleet of live game servers", "fleet", name, "err", err)
			continue
		}
		deleted[name] = f.State.GetDeleted()
	}
	return deleted
}

// readSessions reads the game sessions due for the controller's duties,
// each duty at most sessionBatch a pass, with the game server or fleet
// each needs. One whose server or fleet cannot be read is logged and
// waits for the next pass.
func (c *Controller) readSessions(ctx context.Context, s *plan.Snapshot) error {
	var err error
	if s.DueSessions, err = c.opts.Views.DueGameSessions(ctx, s.Now, sessionBatch); err != nil {
		return err
	}
	orphans, err := c.opts.Views.OrphanedGameSessions(ctx, sessionBatch)
	if err != nil {
		return err
	}
	for _, r := range orphans {
		gs, err := c.opts.Views.GameServer(ctx, r.State.GetGameServer())
		if err != nil {
			c.log.Error("read the server of a game session", "game_session", r.State.GetName(), "err", err)
			continue
		}
		s.OrphanSessions = append(s.OrphanSessions, plan.OrphanSession{Session: r, Server: gs.State})
	}
	uncreated, err := c.opts.Views.UncreatedGameSessions(ctx, s.Now.Add(-uncreatedAfter), sessionBatch)
	if err != nil {
		return err
	}
	for _, r := range uncreated {
		fleet, _, err := events.ParseGameServerName(r.State.GetName())
		if err != nil {
			c.log.Error("create the game session of an allocation", "game_server", r.State.GetName(), "err", err)
			continue
		}
		f, err := c.opts.Views.Fleet(ctx, events.FleetName(fleet))
		if err != nil {
			c.log.Error("read the fleet of an allocation without a game session", "game_server", r.State.GetName(), "err", err)
			continue
		}
		s.UncreatedSessions = append(s.UncreatedSessions, plan.UncreatedSession{Server: r.State, Policy: f.State.GetSpec().GetPlayerSessions()})
	}
	return nil
}

// serversByFleet groups game servers by their fleet's name.
func serversByFleet(servers []projections.Row[*eventsv1.GameServerState]) map[string][]projections.Row[*eventsv1.GameServerState] {
	out := map[string][]projections.Row[*eventsv1.GameServerState]{}
	for _, r := range servers {
		if fleet, _, err := events.ParseGameServerName(r.State.GetName()); err == nil {
			out[events.FleetName(fleet)] = append(out[events.FleetName(fleet)], r)
		}
	}
	return out
}
