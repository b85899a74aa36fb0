package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/nats/hostbeat"
)

// electionCredit is the most of a host's silence an election of the
// heartbeat bucket's leader excuses: the longest a NATS election leaves
// the bucket without a leader (nats-server's raft election timeout is
// 4-9 s, not configurable, then a vote).
const electionCredit = 10 * time.Second

// planHosts turns host heartbeats into liveness verdicts (DESIGN.md §4):
// a host silent for UnreachableAfter (counted from no earlier than the
// heartbeat bucket's last election, within electionCredit) becomes
// UNREACHABLE (its servers keep running and are not replaced: the control
// plane merely lost sight of them); silent for LostAfter it becomes LOST
// and its live servers are terminated with HOST_LOST, so the fleets
// replace them; a heartbeat brings it back ONLINE once its agent has
// nothing queued for the stream, and the servers the views place on it
// are checked against the inventory its agent reports (checkInventory).
// It returns the host statuses after its verdicts.
func (p planner) planHosts(s snapshot, out *Plan) map[string]eventsv1.HostStatus {
	status := map[string]eventsv1.HostStatus{}
	stillLost := map[string]time.Time{} // LOST hosts that stay LOST this pass → when last heard of
	for _, h := range s.hosts {
		name := h.State.GetName()
		status[name] = h.State.GetStatus()
		id, err := events.ParseHostName(name)
		if err != nil {
			out.refused = append(out.refused, err)
			continue
		}
		beat := s.beats[id]
		last := s.heard[id]
		silent := s.now.Sub(last)
		// What counts against the host is its silence since the bucket
		// could take its beats: after an election of the bucket's leader
		// (4-9 s, while no host could beat) every host has UnreachableAfter
		// again, but an election gives back at most electionCredit of a
		// longer silence, so elections in a row cannot hold a verdict back
		// for longer. Only the verdicts of silence use it: coming back
		// ONLINE takes a beat.
		counted := silent
		if last.Before(s.beatsSince) {
			counted = max(s.now.Sub(s.beatsSince), silent-electionCredit)
		}
		var cmd events.HostCommand
		switch st := h.State.GetStatus(); {
		case (st == eventsv1.HostStatus_HOST_STATUS_ONLINE || st == eventsv1.HostStatus_HOST_STATUS_DRAINING ||
			st == eventsv1.HostStatus_HOST_STATUS_DRAINED) && counted > p.unreachableAfter:
			cmd = events.MarkHostUnreachable{LastHeartbeat: last}
		case st == eventsv1.HostStatus_HOST_STATUS_UNREACHABLE && counted > p.lostAfter:
			cmd = events.MarkHostLost{LastHeartbeat: last}
		case (st == eventsv1.HostStatus_HOST_STATUS_UNREACHABLE || st == eventsv1.HostStatus_HOST_STATUS_LOST) && silent <= p.unreachableAfter:
			if inv := beat.Inv(); inv != nil && inv.Queued > 0 {
				// Its agent still publishes what it kept while away: the host
				// is back when its facts are, so the views and the inventory
				// agree. It beats, so it is not lost meanwhile.
				continue
			}
			cmd = events.MarkHostOnline{LastHeartbeat: last}
		case st == eventsv1.HostStatus_HOST_STATUS_LOST:
			stillLost[name] = last
			continue
		case st == eventsv1.HostStatus_HOST_STATUS_DRAINING && h.Used == 0:
			// Its last game server ended: the drain is done.
			cmd = events.MarkHostDrained{}
		default:
			continue
		}
		msgs, err := events.DecideHost(name, h.State, cmd)
		if err != nil {
			out.refused = append(out.refused, fmt.Errorf("host verdict on %s: %w", name, err))
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		say := "host liveness changed"
		if _, ok := cmd.(events.MarkHostDrained); ok {
			say = "host drained"
		}
		d := decision{action: actHost, name: name, guard: h.Sequence, events: msgs,
			say: say, attrs: []any{"host", name, "event", events.TypeOf(msgs[0]), "silent", silent.Round(time.Millisecond)}}
		switch msgs[0].(type) {
		case *eventsv1.HostUnreachable:
			status[name] = eventsv1.HostStatus_HOST_STATUS_UNREACHABLE
		case *eventsv1.HostOnline:
			status[name] = eventsv1.HostStatus_HOST_STATUS_ONLINE
			d.then = p.checkInventory(name, beat, s.servers, out)
			if inv := beat.Inv(); inv != nil {
				d.attrs = append(d.attrs, "inventory_time", beat.WrittenAt(), "inventory_servers", len(inv.Servers))
			}
		case *eventsv1.HostLost:
			status[name] = eventsv1.HostStatus_HOST_STATUS_LOST
			d.then = p.terminateLost(map[string]time.Time{name: last}, s.servers, out)
		case *eventsv1.HostDrained:
			status[name] = eventsv1.HostStatus_HOST_STATUS_DRAINED
		}
		out.decisions = append(out.decisions, d)
	}
	// A server still live on a host already LOST lost the race its
	// termination ran (a shutdown the API appended meanwhile: the
	// termination, decided only with the verdict, conflicted); it would
	// otherwise stay live on a host nobody hears from.
	out.decisions = append(out.decisions, p.terminateLost(stillLost, s.servers, out)...)
	return status
}

// beatsWait bounds a pass's wait for the heartbeat tracker to hold every
// beat in the bucket (on a new tracker, its initial values).
const beatsWait = 5 * time.Second

// beatsBehindPasses is how many passes in a row a heartbeat tracker may
// fail to catch up with the bucket before it is replaced. Its watcher is
// served by one NATS server, which may stay behind the bucket's leader (a
// replica catching up, or cut off from the others); a new watcher is
// placed afresh, preferably on a server that is caught up.
const beatsBehindPasses = 2

// readBeats returns every host's last beat. It reads them from a tracker of
// the bucket (one round trip instead of one per host), started on first use
// with the pass's context, so it lives as long as the leadership: lead
// stops it. A pass never reads a map the tracker cannot vouch for, nor one
// still filling: a tracker that has not caught up with the bucket within
// beatsWait fails the pass, as a failed Read did. It is kept for the next
// pass (its watcher may resume on its own), and replaced once it has
// failed beatsBehindPasses passes in a row. One that has ended (its
// watcher failed or stalled, or a previous leadership's context ended) is
// replaced at once, and a tracker that ends during the pass is replaced
// within it, once: after a NATS restart took its watcher's consumer, the
// pass decides on a new watcher instead of failing.
func (c *Controller) readBeats(ctx context.Context) (map[string]hostbeat.Beat, error) {
	wctx, cancel := context.WithTimeout(ctx, c.beatsWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		if c.beats != nil {
			if err := c.beats.Err(); err != nil {
				if !errors.Is(err, hostbeat.ErrStopped) {
					c.log.Warn("host heartbeat tracker ended; starting another", "err", err)
				}
				c.stopBeats()
			}
		}
		if c.beats == nil {
			t, err := hostbeat.Track(ctx, c.opts.JetStream)
			if err != nil {
				return nil, err
			}
			c.beats = t
		}
		beats, err := c.beats.Beats(wctx)
		switch {
		case err == nil:
			c.beatsBehind = 0
		case attempt == 1 && ctx.Err() == nil && wctx.Err() == nil && errors.Is(err, hostbeat.ErrWatchEnded):
			continue // replaced above, in what is left of the wait
		case ctx.Err() == nil && errors.Is(err, hostbeat.ErrBehind):
			if c.beatsBehind++; c.beatsBehind >= beatsBehindPasses {
				c.log.Warn("host heartbeat tracker stayed behind the bucket; starting another", "passes", c.beatsBehind, "err", err)
				c.stopBeats()
			}
		}
		return beats, err
	}
}

// stopBeats stops the heartbeat tracker, if any.
func (c *Controller) stopBeats() {
	if c.beats == nil {
		return
	}
	if err := c.beats.Stop(); err != nil {
		c.log.Warn("stop the host heartbeat tracker", "err", err)
	}
	c.beats, c.beatsBehind = nil, 0
}

// terminateLost ends with HOST_LOST every live server of the lost hosts
// (host → when it was last heard of).
func (p planner) terminateLost(lost map[string]time.Time, servers []projections.Row[*eventsv1.GameServerState], out *Plan) []decision {
	if len(lost) == 0 {
		return nil
	}
	var ds []decision
	for _, r := range servers {
		last, ok := lost[r.State.GetHost()]
		if !ok {
			continue
		}
		detail := fmt.Sprintf("host %s lost: no heartbeat since %s", r.State.GetHost(), last.Format(time.RFC3339))
		if d := p.terminate(r, eventsv1.Reason_REASON_HOST_LOST, detail, "game server of a lost host terminated", out); d != nil {
			ds = append(ds, *d)
		}
	}
	return ds
}

// missingDetail opens the evidence of a server terminated because its host
// came back without it.
const missingDetail = "not in the host's inventory when it came back"

// checkInventory compares the servers the views place on a host that just
// came back with the inventory in its agent's beat. Servers in it carry on
// untouched. A live server missing from it is no longer supervised there
// (its process ended while the host was out of sight and the facts were
// lost, e.g. with a full outbox), so it is terminated with PROCESS_EXITED
// and the evidence, and its fleet replaces it. Only what the inventory can
// speak for is judged: not SCHEDULED servers (their start may still be on
// its way), nor servers whose last event is newer than the inventory; the
// append is guarded by the server's sequence, so a server whose end (or any
// other event) reached the stream since the views were read is left alone.
func (p planner) checkInventory(host string, beat hostbeat.Beat, servers []projections.Row[*eventsv1.GameServerState], out *Plan) []decision {
	inv := beat.Inv()
	if inv == nil {
		return nil // an older agent: its servers are kept
	}
	var then []decision
	for _, r := range servers {
		name := r.State.GetName()
		if r.State.GetHost() != host || inv.Has(name) {
			continue
		}
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_TERMINATED:
			continue
		}
		if u := r.State.GetUpdateTime(); u != nil && u.AsTime().After(beat.WrittenAt()) {
			continue // changed since the inventory was taken
		}
		detail := fmt.Sprintf("%s: host %s reported %d game servers at %s, not this one (last known pid %d, %s)",
			missingDetail, host, len(inv.Servers), beat.WrittenAt().Format(time.RFC3339Nano), r.State.GetPid(), events.LifecycleName(r.State.GetLifecycle()))
		if d := p.terminate(r, eventsv1.Reason_REASON_PROCESS_EXITED, detail, "game server missing from its host's inventory; terminated", out); d != nil {
			then = append(then, *d)
		}
	}
	return then
}

// unfinishedDetail opens the evidence of a server terminated because its
// agent ended it without recording the end.
const unfinishedDetail = "shutdown past its deadline and no longer in its host's inventory"

// planUnfinishedShutdowns ends the SHUTTING_DOWN servers whose agent no
// longer supervises them although nothing recorded their end: the
// server's shutdown deadline passed Options.ShutdownSettle (the time the
// agent takes to kill the process at the deadline, see it exit and append
// its end, through its outbox) before its host's last beat was stored,
// that beat's inventory does not list it, and its agent has nothing
// queued for the stream (an end in its outbox is on its way). Without
// this such a server stayed SHUTTING_DOWN for good, its slot on the host
// taken and, in a fleet that fills its hosts, its replacement never
// placed (seen once in a 100,000-server scale run: the agent had acted
// on the stop and let the server go, and no event of its end reached the
// stream). Only hosts that beat with their servers (ONLINE, DRAINING,
// DRAINED) before and after this pass's verdicts are judged: the others
// are not heard from, and their servers are judged with them, and a host
// that comes back has its whole inventory checked with its verdict. The
// servers of an agent that restarted since their last event are
// planOrphans' to end. The server is terminated with its shutdown's
// reason (PROCESS_EXITED if it had none) and the evidence; the append is
// guarded by its sequence, so a server whose end reached the stream since
// the views were read is left alone.
func (p planner) planUnfinishedShutdowns(s snapshot, status map[string]eventsv1.HostStatus, out *Plan) {
	var hosts map[string]*eventsv1.HostState // by name, made for the first server past its settle
	for _, r := range s.servers {
		gs := r.State
		if gs.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN || gs.GetShutdownDeadline() == nil {
			continue
		}
		deadline := gs.GetShutdownDeadline().AsTime()
		if s.now.Before(deadline.Add(p.shutdownSettle)) {
			continue // most shutdowns: in their grace, and no beat decoded for them
		}
		if hosts == nil {
			hosts = make(map[string]*eventsv1.HostState, len(s.hosts))
			for _, h := range s.hosts {
				hosts[h.State.GetName()] = h.State
			}
		}
		host := gs.GetHost()
		h := hosts[host]
		// Judged on the host's status in the views and after this pass's
		// verdicts both: a host that comes back this pass has its
		// inventory checked whole with its verdict (checkInventory).
		if h == nil || !beatsWithItsServers(h.GetStatus()) || !beatsWithItsServers(status[host]) {
			continue
		}
		if r.Sequence < h.GetRegisteredSequence() {
			continue // planOrphans' to end
		}
		id, err := events.ParseHostName(host)
		if err != nil {
			continue // a misnamed host: refused with the host verdicts
		}
		beat := s.beats[id]
		// When the beat was stored, by the NATS server's clock (the
		// agent's may be off); its time as the agent wrote it if unknown.
		at := beat.Stored
		if at.IsZero() {
			at = beat.WrittenAt()
		}
		inv := beat.Inv()
		if inv == nil || inv.Queued > 0 || inv.Has(gs.GetName()) || at.Before(deadline.Add(p.shutdownSettle)) {
			continue
		}
		if u := gs.GetUpdateTime(); u != nil && u.AsTime().After(at) {
			continue // changed since the inventory was taken
		}
		reason := gs.GetReason()
		if reason == eventsv1.Reason_REASON_UNSPECIFIED {
			reason = eventsv1.Reason_REASON_PROCESS_EXITED
		}
		detail := fmt.Sprintf("%s: deadline %s; host %s reported %d game servers at %s, not this one (last known pid %d)",
			unfinishedDetail, deadline.Format(time.RFC3339Nano), host, len(inv.Servers), at.Format(time.RFC3339Nano), gs.GetPid())
		if d := p.terminate(r, reason, detail, "game server shut down, gone from its host's inventory, its end never recorded: terminated", out); d != nil {
			out.decisions = append(out.decisions, *d)
		}
	}
}

// beatsWithItsServers tells the host statuses under which a host beats and
// runs its servers: ONLINE, DRAINING and DRAINED.
func beatsWithItsServers(st eventsv1.HostStatus) bool {
	switch st {
	case eventsv1.HostStatus_HOST_STATUS_ONLINE, eventsv1.HostStatus_HOST_STATUS_DRAINING, eventsv1.HostStatus_HOST_STATUS_DRAINED:
		return true
	}
	return false
}

// restartedDetail opens the evidence of a server terminated because its
// host's agent restarted without it.
const restartedDetail = "its host's agent restarted"

// planOrphans ends the live game servers whose host's agent restarted
// since their last event (DESIGN.md §4): an agent that starts supervises
// none of its predecessor's processes. It stops those it recorded in its
// data directory and terminates them itself before it registers; the rest
// (a lost data directory, a process started in the moment before the
// crash) are found here: a server that is neither SCHEDULED (its start may
// still come from the command stream, and the new agent will run it) nor
// TERMINATED, whose last event precedes its host's last registration, has
// nobody looking after it. It is terminated with AGENT_RESTARTED and the
// evidence, and its fleet replaces it. The append is guarded by the
// server's sequence, so one that heard from anyone since is left alone.
func (p planner) planOrphans(s snapshot, out *Plan) {
	registered := make(map[string]*eventsv1.HostState, len(s.hosts))
	var latest uint64 // the last registration of any host
	for _, h := range s.hosts {
		registered[h.State.GetName()] = h.State
		latest = max(latest, h.State.GetRegisteredSequence())
	}
	for _, r := range s.servers {
		if r.Sequence >= latest {
			continue // heard from since every host's registration: most servers, and no host to look up
		}
		h := registered[r.State.GetHost()]
		if h == nil || r.Sequence >= h.GetRegisteredSequence() {
			continue
		}
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_TERMINATED:
			continue
		}
		detail := fmt.Sprintf(
			"%s: %s registered again at sequence %d (agent %s) after this server's last event (sequence %d, %s, pid %d); the new agent does not supervise it",
			restartedDetail, h.GetName(), h.GetRegisteredSequence(), h.GetAgentIncarnation(), r.Sequence,
			events.LifecycleName(r.State.GetLifecycle()), r.State.GetPid())
		if d := p.terminate(r, eventsv1.Reason_REASON_AGENT_RESTARTED, detail, "game server of a restarted agent terminated", out); d != nil {
			out.decisions = append(out.decisions, *d)
		}
	}
}
