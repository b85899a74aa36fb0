package plan

import (
	"fmt"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// electionCredit is the most of a host's silence an election of the
// heartbeat bucket's leader excuses: the longest a NATS election leaves
// the bucket without a leader (nats-server's raft election timeout is
// 4-9 s, not configurable, then a vote).
const electionCredit = 10 * time.Second

// planHosts turns host heartbeats into liveness verdicts (docs/host-liveness.md):
// a host silent for UnreachableAfter (counted from no earlier than the
// heartbeat bucket's last election, within electionCredit) becomes
// UNREACHABLE (its servers keep running and are not replaced: the control
// plane merely lost sight of them); silent for LostAfter it becomes LOST
// and its live servers are terminated with HOST_LOST, so the fleets
// replace them; a heartbeat brings it back ONLINE once its agent has
// nothing queued for the stream, and the servers the views place on it
// are checked against the inventory its agent reports (checkInventory).
// It returns the host statuses after its verdicts.
func (p Planner) planHosts(s Snapshot, out *Plan) map[string]eventsv1.HostStatus {
	status := map[string]eventsv1.HostStatus{}
	stillLost := map[string]time.Time{} // LOST hosts that stay LOST this pass → when last heard of
	for _, h := range s.Hosts {
		name := h.State.GetName()
		status[name] = h.State.GetStatus()
		id, err := events.ParseHostName(name)
		if err != nil {
			out.Refused = append(out.Refused, err)
			continue
		}
		beat := s.Beats[id]
		last := s.Heard[id]
		silent := s.Now.Sub(last)
		// What counts against the host is its silence since the bucket
		// could take its beats: after an election of the bucket's leader
		// (4-9 s, while no host could beat) every host has UnreachableAfter
		// again, but an election gives back at most electionCredit of a
		// longer silence, so elections in a row cannot hold a verdict back
		// for longer. Only the verdicts of silence use it: coming back
		// ONLINE takes a beat.
		counted := silent
		if last.Before(s.BeatsSince) {
			counted = max(s.Now.Sub(s.BeatsSince), silent-electionCredit)
		}
		var cmd events.HostCommand
		switch st := h.State.GetStatus(); {
		case (st == eventsv1.HostStatus_HOST_STATUS_ONLINE || st == eventsv1.HostStatus_HOST_STATUS_DRAINING ||
			st == eventsv1.HostStatus_HOST_STATUS_DRAINED) && counted > p.UnreachableAfter:
			cmd = events.MarkHostUnreachable{LastHeartbeat: last}
		case st == eventsv1.HostStatus_HOST_STATUS_UNREACHABLE && counted > p.LostAfter:
			cmd = events.MarkHostLost{LastHeartbeat: last}
		case (st == eventsv1.HostStatus_HOST_STATUS_UNREACHABLE || st == eventsv1.HostStatus_HOST_STATUS_LOST) && silent <= p.UnreachableAfter:
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
			out.Refused = append(out.Refused, fmt.Errorf("host verdict on %s: %w", name, err))
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		say := "host liveness changed"
		if _, ok := cmd.(events.MarkHostDrained); ok {
			say = "host drained"
		}
		d := Decision{Action: ActHost, Name: name, Guard: h.Sequence, Events: msgs,
			Say: say, Attrs: []any{"host", name, "event", events.TypeOf(msgs[0]), "silent", silent.Round(time.Millisecond)}}
		switch msgs[0].(type) {
		case *eventsv1.HostUnreachable:
			status[name] = eventsv1.HostStatus_HOST_STATUS_UNREACHABLE
		case *eventsv1.HostOnline:
			status[name] = eventsv1.HostStatus_HOST_STATUS_ONLINE
			d.Then = p.checkInventory(name, beat, s.Servers, out)
			if inv := beat.Inv(); inv != nil {
				d.Attrs = append(d.Attrs, "inventory_time", beat.WrittenAt(), "inventory_servers", len(inv.Servers))
			}
		case *eventsv1.HostLost:
			status[name] = eventsv1.HostStatus_HOST_STATUS_LOST
			d.Then = p.terminateLost(map[string]time.Time{name: last}, s.Servers, out)
		case *eventsv1.HostDrained:
			status[name] = eventsv1.HostStatus_HOST_STATUS_DRAINED
		}
		out.Decisions = append(out.Decisions, d)
	}
	// A server still live on a host already LOST lost the race its
	// termination ran (a shutdown the API appended meanwhile: the
	// termination, decided only with the verdict, conflicted); it would
	// otherwise stay live on a host nobody hears from.
	out.Decisions = append(out.Decisions, p.terminateLost(stillLost, s.Servers, out)...)
	return status
}

// terminateLost ends with HOST_LOST every live server of the lost hosts
// (host → when it was last heard of).
func (p Planner) terminateLost(lost map[string]time.Time, servers []projections.Row[*eventsv1.GameServerState], out *Plan) []Decision {
	if len(lost) == 0 {
		return nil
	}
	var ds []Decision
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
func (p Planner) checkInventory(host string, beat Beat, servers []projections.Row[*eventsv1.GameServerState], out *Plan) []Decision {
	inv := beat.Inv()
	if inv == nil {
		return nil // an older agent: its servers are kept
	}
	var then []Decision
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
