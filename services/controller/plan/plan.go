package plan

import (
	"slices"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Planner holds the rules' settings; Plan is a pure function of them and
// a snapshot.
type Planner struct {
	// Producer is the controller instance that decides
	// ("controllers/<id>"): it asks for the shutdowns it decides.
	Producer string
	// ShutdownGrace is the deadline given to a server asked to stop.
	ShutdownGrace time.Duration
	// ShutdownSettle is how long past a shutdown's deadline a server's
	// end may take to reach the stream (planUnfinishedShutdowns).
	ShutdownSettle time.Duration
	// StartTimeout is how long a SCHEDULED server waits before its start
	// command is sent again.
	StartTimeout time.Duration
	// UnreachableAfter and LostAfter are the silences after which a host
	// is UNREACHABLE, then LOST.
	UnreachableAfter time.Duration
	LostAfter        time.Duration
	// Backoff is how long a fleet whose servers fail to start waits
	// before it starts another.
	Backoff events.StartBackoff
	// NewID names new game servers (random in production, a counter in
	// tests).
	NewID func() string
}

// Plan decides one pass. It does not change the snapshot.
func (p Planner) Plan(s Snapshot) Plan {
	var out Plan
	status := p.planHosts(s, &out)
	if s.Stale {
		return out
	}
	p.planOrphans(s, &out)
	p.planUnfinishedShutdowns(s, status, &out)
	s.load = hostLoad(s.Hosts) // s is Plan's copy: the caller's snapshot is untouched
	fleets := p.planStarts(s, &out)
	hosts := roomOn(s.Hosts, status, &out)
	draining := drainingHosts(s.Hosts, status)
	out.Refused = append(out.Refused, s.Misnamed...)
	// The servers of LOST hosts are terminated by their hosts' verdicts.
	byFleet := withoutLost(s.ByFleet, status)
	starts := map[string]bool{} // fleets with a decision of planStarts this pass
	for _, d := range out.Decisions {
		if d.Action == ActStarts {
			starts[d.Name] = true
		}
	}
	for i, f := range fleets {
		rows := byFleet[f.GetName()]
		if starts[f.GetName()] {
			// One decision per fleet and pass: the fleet's other events
			// wait for the next pass.
			p.planFleet(s, f, rows, hosts, draining, &out)
		} else {
			// The fleet's own decisions first, each on the fleet as the
			// one before leaves it, so that its servers are planned on it.
			scaled, next := p.planAutoscale(s, f, rows, &out)
			stepped, next := p.decideFleetSteps(s, next, rolloutStep(s, next, rows), &out)
			mark := len(out.Decisions)
			blocked := p.planFleet(s, next, rows, hosts, draining, &out)
			placed, _ := p.decideFleetSteps(s, next, placementStep(s, blocked), &out)
			fleetMsgs := slices.Concat(scaled, stepped, placed)
			if d := p.fleetDecision(s.Fleets[i].Sequence, next.GetName(), fleetMsgs, blocked); d != nil {
				if len(scaled) > 0 {
					// The fleet's servers follow its new size: they are
					// decided on it, and hold only if it is appended.
					d.Then = slices.Clone(out.Decisions[mark:])
					out.Decisions = out.Decisions[:mark]
				}
				out.Decisions = append(out.Decisions, *d)
			}
		}
		delete(byFleet, f.GetName())
	}
	// What is left belongs to fleets that are not live.
	p.planDeletedFleets(s, byFleet, &out)
	p.planSessions(s, &out)
	return out
}

// withoutLost returns byFleet (a copy of the map; the rows are shared
// unless filtered) without the servers on LOST hosts.
func withoutLost(byFleet map[string][]projections.Row[*eventsv1.GameServerState], status map[string]eventsv1.HostStatus) map[string][]projections.Row[*eventsv1.GameServerState] {
	lost := map[string]bool{}
	for host, st := range status {
		if st == eventsv1.HostStatus_HOST_STATUS_LOST {
			lost[host] = true
		}
	}
	onLost := func(r projections.Row[*eventsv1.GameServerState]) bool { return lost[r.State.GetHost()] }
	out := make(map[string][]projections.Row[*eventsv1.GameServerState], len(byFleet))
	for fleet, rows := range byFleet {
		if len(lost) > 0 && slices.ContainsFunc(rows, onLost) { // copied only if it changes
			rows = slices.DeleteFunc(slices.Clone(rows), onLost)
		}
		if len(rows) > 0 {
			out[fleet] = rows
		}
	}
	return out
}

// hostLoad is every host's used slots, by name.
func hostLoad(hosts []projections.HostRow) map[string]int32 {
	out := make(map[string]int32, len(hosts))
	for _, h := range hosts {
		out[h.State.GetName()] = h.Used
	}
	return out
}

// drainingHosts are the hosts asked to drain whose servers are known:
// not unreachable or lost (their servers are judged by liveness).
func drainingHosts(hosts []projections.HostRow, status map[string]eventsv1.HostStatus) map[string]bool {
	out := map[string]bool{}
	for _, h := range hosts {
		switch status[h.State.GetName()] {
		case eventsv1.HostStatus_HOST_STATUS_DRAINING, eventsv1.HostStatus_HOST_STATUS_DRAINED:
			out[h.State.GetName()] = h.State.GetDraining()
		}
	}
	return out
}
