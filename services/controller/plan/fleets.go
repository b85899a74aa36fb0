package plan

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// planFleet brings one fleet toward its replica count: unhealthy servers
// are shut down (and replaced), SCHEDULED ones whose start is overdue get
// their start command again, missing ones are scheduled on hosts with
// room (no faster than the fleet's start backoff allows), servers leaving
// a draining host are replaced before they are shut down, servers of an
// older revision are replaced during a rollout (planRollout), and surplus
// ones are shut down, READY first, never ALLOCATED or RESERVED. New
// servers go only to hosts whose labels match the template's host
// selector. It returns why servers of the fleet wait for a host, if they
// do.
func (p Planner) planFleet(s Snapshot, f *eventsv1.FleetState, rows []projections.Row[*eventsv1.GameServerState], hosts []*hostSlot, draining map[string]bool, out *Plan) *NoRoom {
	var stay, leaving []projections.Row[*eventsv1.GameServerState]
	for _, r := range rows {
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY:
			// Terminate it (its process may still run) and let it be replaced.
			reason := r.State.GetReason()
			if reason == eventsv1.Reason_REASON_UNSPECIFIED {
				reason = eventsv1.Reason_REASON_HEALTH_CHECK_FAILED
			}
			p.shutdown(s.Now, r, reason, "unhealthy: replaced", out)
		case eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN:
		default:
			if draining[r.State.GetHost()] && movable(r.State) {
				leaving = append(leaving, r)
			} else {
				stay = append(stay, r)
			}
			if r.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_SCHEDULED {
				p.resendStart(s, r.State, out)
			}
		}
	}
	want := int(f.GetSpec().GetReplicas())
	rev := splitRevisions(f, stay)
	// Servers of the fleet's revision are scheduled up to want, less the
	// outdated servers a rollout keeps for now; within a rolling update's
	// surge.
	wantNew, limit := want-len(rev.kept), len(rev.current)+startsAllowed(f, rev.current, s.Now)
	if rev.rolling && f.GetSpec().GetStrategy().GetType() != eventsv1.FleetStrategy_RECREATE {
		surge, _ := events.RolloutBounds(f.GetSpec().GetStrategy(), want, 0)
		limit = min(limit, len(rev.current)+max(0, want+surge-len(stay)))
	}
	selector := f.GetSpec().GetTemplate().GetHostSelector()
	var blocked *NoRoom
	for i := len(rev.current); i < wantNew && i < limit; i++ {
		h := pickHost(hosts, f.GetSpec().GetScheduling(), selector)
		if h == nil {
			blocked = whyNoRoom(f.GetName(), wantNew-i, hosts, selector)
			out.NoRoom = append(out.NoRoom, *blocked)
			break
		}
		p.schedule(f, h, out)
		h.used++
	}
	budget := p.planRollout(s, f, stay, rev, out)
	// A server leaving a draining host goes once a server that stays can
	// take its place: the fleet holds its replicas in servers that serve
	// (READY, RESERVED, ALLOCATED) all through the drain. Those that serve
	// are the ones kept; those not ready yet go at once.
	slices.SortStableFunc(leaving, func(a, b projections.Row[*eventsv1.GameServerState]) int {
		return boolRank(!serves(a.State)) - boolRank(!serves(b.State))
	})
	keep := min(len(leaving), max(0, want-UseOf(stay).serving()), UseOf(leaving).serving())
	for _, r := range leaving[keep:] {
		p.shutdown(s.Now, r, eventsv1.Reason_REASON_HOST_DRAINING, fmt.Sprintf("host %s is draining: a replacement serves elsewhere", r.State.GetHost()), out)
	}
	if surplus := len(rev.current) - wantNew; surplus > 0 {
		candidates := scaleDownOrder(rev.current, f.GetSpec().GetScheduling(), s.load)
		if rev.rolling {
			// During a rollout, scaling down spends the same unavailability
			// budget: the servers not serving go first, READY ones only
			// within what the rollout left of it.
			candidates = servingLast(candidates, budget)
		}
		for _, r := range candidates[:min(surplus, len(candidates))] {
			p.shutdown(s.Now, r, eventsv1.Reason_REASON_FLEET_SCALED_DOWN, fmt.Sprintf("fleet scaled from %d to %d", len(stay), want), out)
		}
	}
	return blocked
}

// boolRank is 1 for true, 0 for false, for sorting.
func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FleetUse is what a fleet's live servers are doing: how many are
// ALLOCATED, RESERVED, READY, and starting (SCHEDULED or STARTING).
type FleetUse struct {
	Allocated, Reserved, Ready, Starting int
}

// UseOf counts servers by what they do. A READY server with rooms in use
// (events.RoomsInUse: its game took them through the SDK) holds matches:
// it counts as ALLOCATED.
func UseOf(rows []projections.Row[*eventsv1.GameServerState]) FleetUse {
	var u FleetUse
	for _, r := range rows {
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_ALLOCATED:
			u.Allocated++
		case eventsv1.Lifecycle_LIFECYCLE_READY:
			if events.RoomsInUse(r.State) {
				u.Allocated++
			} else {
				u.Ready++
			}
		case eventsv1.Lifecycle_LIFECYCLE_RESERVED:
			u.Reserved++
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_STARTING:
			u.Starting++
		}
	}
	return u
}

// busy counts the servers holding a match (ALLOCATED, RESERVED).
func (u FleetUse) busy() int { return u.Allocated + u.Reserved }

// serving counts the servers up for matches or in one.
func (u FleetUse) serving() int { return u.Ready + u.busy() }

// decideFleetSteps decides a command on a fleet (none for nil) and
// returns its events with the fleet as they leave it.
func (p Planner) decideFleetSteps(s Snapshot, f *eventsv1.FleetState, cmd events.FleetCommand, out *Plan) ([]proto.Message, *eventsv1.FleetState) {
	if cmd == nil {
		return nil, f
	}
	name := f.GetName()
	msgs, err := events.DecideFleet(name, f, cmd)
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("%T on %s: %w", cmd, name, err))
		return nil, f
	}
	next := f
	for _, m := range msgs {
		if next, err = events.ApplyFleet(next, events.New(name, s.Now, m)); err != nil {
			out.Refused = append(out.Refused, fmt.Errorf("fold %s on %s: %w", events.TypeOf(m), name, err))
			return nil, f
		}
	}
	return msgs, next
}

// fleetDecision is the append of a fleet's own events, guarded by seq,
// with the log line that says why; nil for no events.
func (p Planner) fleetDecision(seq uint64, name string, msgs []proto.Message, blocked *NoRoom) *Decision {
	if len(msgs) == 0 {
		return nil
	}
	d := Decision{Action: ActPlacement, Name: name, Guard: seq, Events: msgs,
		Say: "fleet game servers have hosts again", Attrs: []any{"fleet", name}}
	if blocked != nil {
		d.Say, d.Attrs = "fleet game servers wait for a host", []any{"fleet", name, "waiting", blocked.Missing, "reason", blocked.Reason, "detail", blocked.Message}
	}
	for _, m := range msgs {
		switch e := m.(type) {
		case *eventsv1.FleetAutoscaled:
			d.Action, d.Say = ActAutoscale, "fleet autoscaled"
			d.Attrs = []any{"fleet", name, "from", e.GetFromReplicas(), "to", e.GetToReplicas(), "policy", e.GetPolicy(), "why", e.GetReason()}
		case *eventsv1.FleetAutoscaleFailed:
			d.Action, d.Say = ActAutoscale, "fleet autoscaling failed; its size is kept"
			d.Attrs = []any{"fleet", name, "policy", e.GetPolicy(), "err", e.GetError(), "replicas", e.GetReplicas()}
		case *eventsv1.FleetAutoscaleRecovered:
			d.Action, d.Say = ActAutoscale, "fleet autoscaling answers again"
		case *eventsv1.FleetRolloutProgressed:
			d.Action, d.Say = ActRollout, "fleet rollout progressed"
			d.Attrs = []any{"fleet", name, "revision", e.GetRevision(), "updated", e.GetUpdated(), "updated_ready", e.GetUpdatedReady(),
				"outdated", e.GetOutdated(), "outdated_busy", e.GetOutdatedBusy()}
		case *eventsv1.FleetRolloutCompleted:
			d.Action, d.Say = ActRollout, "fleet rollout completed"
			d.Attrs = []any{"fleet", name, "revision", e.GetRevision(), "seconds", e.GetDurationSeconds()}
		case *eventsv1.FleetRolloutHalted:
			d.Action, d.Say = ActRollout, "fleet rollout halted: its new servers keep failing; the outdated ones keep serving"
			d.Attrs = []any{"fleet", name, "revision", e.GetRevision(), "why", e.GetReason(), "last_error", e.GetLastError()}
		}
	}
	return &d
}

// movable reports whether a server leaves a draining host for another
// (or, outdated, is replaced by a rollout): one that holds no match
// (READY with no room in use, or not ready yet). ALLOCATED and RESERVED
// servers finish what they hold, and so does a READY one whose rooms are
// in use (events.RoomsInUse).
func movable(gs *eventsv1.GameServerState) bool {
	switch gs.GetLifecycle() {
	case eventsv1.Lifecycle_LIFECYCLE_READY:
		return !events.RoomsInUse(gs)
	case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_STARTING:
		return true
	}
	return false
}

// serves reports whether a server is up for matches or in one.
func serves(gs *eventsv1.GameServerState) bool {
	switch gs.GetLifecycle() {
	case eventsv1.Lifecycle_LIFECYCLE_READY, eventsv1.Lifecycle_LIFECYCLE_RESERVED, eventsv1.Lifecycle_LIFECYCLE_ALLOCATED:
		return true
	}
	return false
}

// scaleDownOrder lists the servers that may be scaled down, best first:
// READY, then those not yet ready. Within each, the opposite of placement
// (events.CompareHosts on the hosts' used slots, load): under PACKED the
// servers of the least used hosts go first, so that hosts empty out;
// under DISTRIBUTED those of the busiest; then the newest first. ALLOCATED
// and RESERVED servers are never scaled down, nor READY ones with rooms in
// use (events.RoomsInUse).
func scaleDownOrder(live []projections.Row[*eventsv1.GameServerState], sched eventsv1.Scheduling, load map[string]int32) []projections.Row[*eventsv1.GameServerState] {
	distributed := sched == eventsv1.Scheduling_SCHEDULING_DISTRIBUTED
	rank := func(gs *eventsv1.GameServerState) int {
		switch gs.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_READY:
			if events.RoomsInUse(gs) {
				return -1
			}
			return 0
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_STARTING:
			return 1
		}
		return -1
	}
	var out []projections.Row[*eventsv1.GameServerState]
	for _, r := range live {
		if rank(r.State) >= 0 {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b projections.Row[*eventsv1.GameServerState]) int {
		if ra, rb := rank(a.State), rank(b.State); ra != rb {
			return ra - rb
		}
		ha, hb := a.State.GetHost(), b.State.GetHost()
		if la, lb := load[ha], load[hb]; la != lb {
			// Placement's preference, reversed: the host placement would
			// pick last loses its servers first.
			return -events.CompareHosts(distributed, events.HostLoad{Name: ha, Load: int(la)}, events.HostLoad{Name: hb, Load: int(lb)})
		}
		return b.State.GetCreateTime().AsTime().Compare(a.State.GetCreateTime().AsTime())
	})
	return out
}

// schedule decides a new game server of fleet f on host h, and its start
// command.
func (p Planner) schedule(f *eventsv1.FleetState, h *hostSlot, out *Plan) {
	fleetID, err := events.ParseFleetName(f.GetName())
	if err != nil {
		out.Refused = append(out.Refused, err)
		return
	}
	name := events.GameServerName(fleetID, p.NewID())
	msgs, err := events.DecideGameServer(name, nil, events.ScheduleGameServer{Host: h.name, Spec: f.GetSpec(), Revision: f.GetRevision(), HostSubject: h.hostSubjects})
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("schedule a game server of %s: %w", f.GetName(), err))
		return
	}
	subject, err := events.Subject(name)
	if h.hostSubjects {
		subject, err = events.GameServerSubject(name, h.name)
	}
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("schedule a game server of %s: %w", f.GetName(), err))
		return
	}
	out.Decisions = append(out.Decisions, Decision{Action: ActSchedule, Name: name, Subject: subject, Events: msgs,
		Host: h.id, Command: startCommand(name, subject, f.GetSpec()),
		Say: "game server scheduled", Attrs: []any{"game_server", name, "host", h.name}})
}

// startCommand tells an agent to start a game server whose events are on
// subject.
func startCommand(name, subject string, spec *eventsv1.FleetSpec) *agentv1.Command {
	return &agentv1.Command{Action: &agentv1.Command_Start{Start: &agentv1.StartGameServer{
		GameServer: name, Template: proto.CloneOf(spec.GetTemplate()), Health: proto.CloneOf(spec.GetHealth()),
		SdkDisconnectGraceSeconds: spec.GetSdkDisconnectGraceSeconds(), Labels: maps.Clone(spec.GetLabels()),
		Subject: subject,
	}}}
}

// resendStart sends a SCHEDULED server's start command again when neither
// it was scheduled nor its command last re-sent within StartTimeout (the
// command may have been lost, or the agent away; the agent ignores a
// duplicate). The command is rebuilt from the server's own copy of the
// template and policies, which a later fleet update does not change.
func (p Planner) resendStart(s Snapshot, gs *eventsv1.GameServerState, out *Plan) {
	since := gs.GetCreateTime().AsTime()
	if t, ok := s.StartResent[gs.GetName()]; ok && t.After(since) {
		since = t
	}
	if s.Now.Sub(since) <= p.StartTimeout {
		return
	}
	hostID, err := events.ParseHostName(gs.GetHost())
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("re-send the start of %s: %w", gs.GetName(), err))
		return
	}
	subject, err := events.SubjectOf(gs)
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("re-send the start of %s: %w", gs.GetName(), err))
		return
	}
	spec := &eventsv1.FleetSpec{Template: gs.GetTemplate(), Health: gs.GetHealthPolicy(),
		SdkDisconnectGraceSeconds: gs.GetSdkDisconnectGraceSeconds(), Labels: gs.GetLabels()}
	out.Decisions = append(out.Decisions, Decision{Action: ActResend, Name: gs.GetName(), Subject: subject,
		Host: hostID, Command: startCommand(gs.GetName(), subject, spec),
		Say: "start command re-sent", Attrs: []any{"game_server", gs.GetName(), "host", gs.GetHost(),
			"scheduled_at", gs.GetCreateTime().AsTime(), "start_timeout", p.StartTimeout}})
}

// planDeletedFleets shuts down the servers left of fleets that are not
// live (byFleet, less the live fleets): those of a deleted fleet. The
// others are standalone servers, never replaced, or those of a fleet
// created since the fleets were read, which waits a pass.
func (p Planner) planDeletedFleets(s Snapshot, byFleet map[string][]projections.Row[*eventsv1.GameServerState], out *Plan) {
	for _, fleet := range slices.Sorted(maps.Keys(byFleet)) {
		if !s.DeletedFleets[fleet] {
			continue
		}
		for _, r := range byFleet[fleet] {
			if r.State.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN {
				p.shutdown(s.Now, r, eventsv1.Reason_REASON_FLEET_DELETED, "fleet "+fleet+" was deleted", out)
			}
		}
	}
}
