package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/nats/hostbeat"
)

// A pass has three steps, after the model of Nomad's reconciler
// (scheduler/reconciler: a pure Compute() that returns what to place and
// stop):
//
//  1. observe (observe.go) reads the views, the host heartbeats and the
//     controller's memory between passes into a snapshot;
//  2. plan (this file) turns the snapshot into decisions: a pure function,
//     with no NATS, PostgreSQL or clock of its own, so the rules are tested
//     as tables (plan_test.go);
//  3. execute (execute.go) appends each decision guarded by the sequence
//     it was decided on and sends its command to the host's agent.
//
// A plan assumes its decisions hold. One that the stream refuses (the
// aggregate changed since the views were read) is skipped, and the next
// pass plans again on views that show why. New rules (an autoscaler, a
// rolling update) are new planning steps: functions from the snapshot to
// decisions.

// A snapshot is everything one pass decides from.
type snapshot struct {
	now time.Time
	// stale is set while the views have stopped moving (staleness.go): the
	// pass judges host liveness only.
	stale bool
	// fleets are the live fleets.
	fleets []projections.FleetRow
	// servers are the live game servers, ordered by name.
	servers []projections.Row[*eventsv1.GameServerState]
	// byFleet are the servers grouped by fleet name, and misnamed the
	// servers whose names are not a game server's (groupByFleet).
	byFleet  map[string][]projections.Row[*eventsv1.GameServerState]
	misnamed []error
	// hosts are the registered hosts.
	hosts []projections.HostRow
	// beats are the hosts' last heartbeats, by host id.
	beats map[string]hostbeat.Beat
	// heard is, by host id, when a heartbeat was last known while this
	// instance leads (a host first seen gets the time it was first seen).
	heard map[string]time.Time
	// beatsSince is when the heartbeat bucket's leader was elected (zero
	// if unknown). No host could beat while the bucket had none, so a
	// host's silence counts from no earlier than this.
	beatsSince time.Time
	// deletedFleets are the deleted fleets that still have live servers.
	deletedFleets map[string]bool
	// startNews is, by fleet, what the game servers changed since the last
	// pass say about starts failing or recovering (startbackoff.go).
	startNews map[string]*startNews
	// startResent is, by SCHEDULED game server, when its start command was
	// last sent again.
	startResent map[string]time.Time
	// dueSessions are game sessions with a deadline that has passed.
	dueSessions []projections.Row[*eventsv1.GameSessionState]
	// orphanSessions are game sessions whose game server moved on.
	orphanSessions []orphanSession
	// uncreatedSessions are allocations whose game session was never created.
	uncreatedSessions []uncreatedSession
	// webhooks are, by fleet, the last answers of the webhook policies in
	// force (autoscale.go).
	webhooks map[string]webhookAnswer
	// load is every host's used slots, by name: set by plan from hosts.
	load map[string]int32
}

// groupByFleet groups live servers by fleet name, in their order; a
// server whose name is not a game server's is left out and returned as an
// error (the planner refuses it). It runs once a pass, for the fleets of
// live servers (readDeletedFleets) and the plan. Servers ordered by name
// (as the pass reads them) come in one run per fleet, and each group is
// then that run of servers, not a copy (capped, so that appending to it
// copies).
func groupByFleet(servers []projections.Row[*eventsv1.GameServerState]) (map[string][]projections.Row[*eventsv1.GameServerState], []error) {
	byFleet := map[string][]projections.Row[*eventsv1.GameServerState]{}
	var misnamed []error
	start, fleet := 0, ""
	endRun := func(end int) {
		if fleet == "" || start == end {
			return
		}
		run := servers[start:end:end]
		if prev, ok := byFleet[fleet]; ok { // not in name order
			run = append(prev, run...)
		}
		byFleet[fleet] = run
	}
	for i, r := range servers {
		name, err := events.GameServerFleetName(r.State.GetName())
		if err != nil {
			endRun(i)
			start, fleet = i+1, ""
			misnamed = append(misnamed, err)
			continue
		}
		if name != fleet {
			endRun(i)
			start, fleet = i, name
		}
	}
	endRun(len(servers))
	return byFleet, misnamed
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

// An orphanSession is a running game session whose server no longer runs it.
type orphanSession struct {
	session projections.Row[*eventsv1.GameSessionState]
	server  *eventsv1.GameServerState
}

// An uncreatedSession is an allocated game server whose game session was
// never created (its allocator stopped between its two appends).
type uncreatedSession struct {
	server *eventsv1.GameServerState
	// policy is the player-session policy of the server's fleet.
	policy *eventsv1.PlayerSessionPolicy
}

// An action names what a decision does.
type action string

// The controller's actions.
const (
	actHost      action = "host"      // a host liveness verdict
	actTerminate action = "terminate" // a game server ended by the controller (host lost, missing from the inventory, agent restarted)
	actStarts    action = "starts"    // a fleet's start failures or recovery recorded
	actShutdown  action = "shutdown"  // a game server asked to stop (unhealthy, scaled down, fleet deleted)
	actSchedule  action = "schedule"  // a new game server placed on a host
	actResend    action = "resend"    // a SCHEDULED server's start command sent again (no event)
	actSession   action = "session"   // a game session or reservation deadline fired, or a missing game session created
	actPlacement action = "placement" // a fleet's wait for a host with room recorded, or its end
	actScale     action = "autoscale" // a fleet's replicas set by its autoscaling policy (and its placement recorded)
	actRollout   action = "rollout"   // a fleet's rollout progressed, completed or halted
)

// A decision is one append and the command that follows it: events decided
// on one aggregate, with the sequence they were decided on as the guard.
type decision struct {
	action action
	// name is the aggregate decided on.
	name string
	// subject is its stream subject when it is a game server (events.SubjectOf);
	// empty: events.Subject of name.
	subject string
	// guard is the aggregate's sequence the decision was made on; 0 for a
	// new aggregate.
	guard uint64
	// events are the decided events; none for a resend.
	events []proto.Message
	// host (a host id) and command, if set, are sent once the events are
	// in the stream.
	host    string
	command *agentv1.Command
	// then are decisions that hold only if this one is appended.
	then []decision
	// news, for actStarts: what the fleet (name) decides again next pass
	// if the append fails.
	news *startNews
	// say is the log line that reports the decision, with attrs.
	say   string
	attrs []any
}

// String is the decision in short, for tests and logs: the action, the
// aggregate with its guard, its event types and the host its command goes
// to.
func (d decision) String() string {
	types := make([]string, len(d.events))
	for i, m := range d.events {
		types[i] = events.TypeOf(m)
	}
	s := string(d.action) + " " + d.name
	if d.guard > 0 {
		s += fmt.Sprintf("@%d", d.guard)
	}
	if len(types) > 0 {
		s += " " + strings.Join(types, ",")
	}
	if d.command != nil {
		s += " → " + d.host
	}
	return s
}

// A noRoom is a fleet short of servers because no host that may take
// them has room.
type noRoom struct {
	fleet   string
	missing int
	// reason is events.NoMatchingHost or events.NoHostWithRoom, and
	// message says it for humans.
	reason, message string
}

// Plan is what one pass decided, in the order it is carried out: host
// verdicts, orphans, unfinished shutdowns, start failures, then each fleet's shutdowns, resends
// and schedules, the deleted fleets, and game-session deadlines.
type Plan struct {
	decisions []decision
	// noRoom are the fleets no host had room for.
	noRoom []noRoom
	// refused are decisions the domain refused (a bug, or views that
	// contradict themselves); the executor logs them.
	refused []error
}

// planner holds the rules' settings; plan is a pure function of them and
// a snapshot.
type planner struct {
	producer         string
	shutdownGrace    time.Duration
	shutdownSettle   time.Duration // Options.ShutdownSettle
	startTimeout     time.Duration
	unreachableAfter time.Duration
	lostAfter        time.Duration
	backoff          events.StartBackoff
	// newID names new game servers (random in production, a counter in
	// tests).
	newID func() string
}

// plan decides one pass. It does not change the snapshot.
func (p planner) plan(s snapshot) Plan {
	var out Plan
	status := p.planHosts(s, &out)
	if s.stale {
		return out
	}
	p.planOrphans(s, &out)
	p.planUnfinishedShutdowns(s, status, &out)
	s.load = hostLoad(s.hosts) // s is plan's copy: the caller's snapshot is untouched
	fleets := p.planStarts(s, &out)
	hosts := roomOn(s.hosts, status, &out)
	draining := drainingHosts(s.hosts, status)
	out.refused = append(out.refused, s.misnamed...)
	// The servers of LOST hosts are terminated by their hosts' verdicts.
	byFleet := withoutLost(s.byFleet, status)
	starts := map[string]bool{} // fleets with a decision of planStarts this pass
	for _, d := range out.decisions {
		if d.action == actStarts {
			starts[d.name] = true
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
			mark := len(out.decisions)
			blocked := p.planFleet(s, next, rows, hosts, draining, &out)
			placed, _ := p.decideFleetSteps(s, next, placementStep(s, blocked), &out)
			fleetMsgs := slices.Concat(scaled, stepped, placed)
			if d := p.fleetDecision(s.fleets[i].Sequence, next.GetName(), fleetMsgs, blocked); d != nil {
				if len(scaled) > 0 {
					// The fleet's servers follow its new size: they are
					// decided on it, and hold only if it is appended.
					d.then = slices.Clone(out.decisions[mark:])
					out.decisions = out.decisions[:mark]
				}
				out.decisions = append(out.decisions, *d)
			}
		}
		delete(byFleet, f.GetName())
	}
	// What is left belongs to fleets that are not live: deleted ones, or
	// (read between the two queries) created since.
	for _, fleet := range slices.Sorted(maps.Keys(byFleet)) {
		if !s.deletedFleets[fleet] {
			continue // standalone servers are never replaced; a new fleet waits a pass
		}
		for _, r := range byFleet[fleet] {
			if r.State.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN {
				p.shutdown(s.now, r, eventsv1.Reason_REASON_FLEET_DELETED, "fleet "+fleet+" was deleted", &out)
			}
		}
	}
	p.planSessions(s, &out)
	return out
}

// hostSlot is a host's room during one pass.
type hostSlot struct {
	id       string
	name     string
	labels   map[string]string
	capacity int32
	used     int32
	// hostSubjects: its agent writes host subjects (HostRegistered), so
	// the servers placed on it get theirs.
	hostSubjects bool
}

// roomOn lists the hosts that take new servers: ONLINE ones (not
// unreachable, lost, cordoned or draining), with their used slots.
func roomOn(hosts []projections.HostRow, status map[string]eventsv1.HostStatus, out *Plan) []*hostSlot {
	var slots []*hostSlot
	for _, h := range hosts {
		if status[h.State.GetName()] != eventsv1.HostStatus_HOST_STATUS_ONLINE || h.State.GetCordoned() {
			continue
		}
		id, err := events.ParseHostName(h.State.GetName())
		if err != nil {
			out.refused = append(out.refused, err)
			continue
		}
		slots = append(slots, &hostSlot{id: id, name: h.State.GetName(), labels: h.State.GetLabels(), capacity: h.State.GetCapacity(), used: h.Used,
			hostSubjects: h.State.GetHostSubjects()})
	}
	return slots
}

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
func (p planner) planFleet(s snapshot, f *eventsv1.FleetState, rows []projections.Row[*eventsv1.GameServerState], hosts []*hostSlot, draining map[string]bool, out *Plan) *noRoom {
	var stay, leaving []projections.Row[*eventsv1.GameServerState]
	for _, r := range rows {
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY:
			// Terminate it (its process may still run) and let it be replaced.
			reason := r.State.GetReason()
			if reason == eventsv1.Reason_REASON_UNSPECIFIED {
				reason = eventsv1.Reason_REASON_HEALTH_CHECK_FAILED
			}
			p.shutdown(s.now, r, reason, "unhealthy: replaced", out)
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
	wantNew, limit := want-len(rev.kept), len(rev.current)+startsAllowed(f, rev.current, s.now)
	if rev.rolling && f.GetSpec().GetStrategy().GetType() != eventsv1.FleetStrategy_RECREATE {
		surge, _ := events.RolloutBounds(f.GetSpec().GetStrategy(), want, 0)
		limit = min(limit, len(rev.current)+max(0, want+surge-len(stay)))
	}
	selector := f.GetSpec().GetTemplate().GetHostSelector()
	var blocked *noRoom
	for i := len(rev.current); i < wantNew && i < limit; i++ {
		h := pickHost(hosts, f.GetSpec().GetScheduling(), selector)
		if h == nil {
			blocked = whyNoRoom(f.GetName(), wantNew-i, hosts, selector)
			out.noRoom = append(out.noRoom, *blocked)
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
	keep := min(len(leaving), max(0, want-useOf(stay).serving()), useOf(leaving).serving())
	for _, r := range leaving[keep:] {
		p.shutdown(s.now, r, eventsv1.Reason_REASON_HOST_DRAINING, fmt.Sprintf("host %s is draining: a replacement serves elsewhere", r.State.GetHost()), out)
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
			p.shutdown(s.now, r, eventsv1.Reason_REASON_FLEET_SCALED_DOWN, fmt.Sprintf("fleet scaled from %d to %d", len(stay), want), out)
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

// servingLast reorders scale-down candidates for a rollout: those not
// serving first, then at most budget serving ones.
func servingLast(candidates []projections.Row[*eventsv1.GameServerState], budget int) []projections.Row[*eventsv1.GameServerState] {
	var idle, busy []projections.Row[*eventsv1.GameServerState]
	for _, r := range candidates {
		if serves(r.State) {
			busy = append(busy, r)
		} else {
			idle = append(idle, r)
		}
	}
	return append(idle, busy[:min(len(busy), max(0, budget))]...)
}

// revisions splits a fleet's staying servers for a rollout.
type revisions struct {
	// rolling is set while a rollout progresses.
	rolling bool
	// current are the servers counted toward the fleet's revision: all of
	// them unless a rollout progresses, else those of its revision.
	current []projections.Row[*eventsv1.GameServerState]
	// outdated are, during a rollout, the older revision's servers without
	// a match: they are replaced.
	outdated []projections.Row[*eventsv1.GameServerState]
	// kept are, during a rollout, the older revision's servers holding a
	// match (ALLOCATED, RESERVED): they count toward replicas until it
	// ends.
	kept []projections.Row[*eventsv1.GameServerState]
}

// splitRevisions sorts stay by revision for f's rollout, if one
// progresses.
func splitRevisions(f *eventsv1.FleetState, stay []projections.Row[*eventsv1.GameServerState]) revisions {
	if !events.RolloutActive(f) {
		return revisions{current: stay}
	}
	r := revisions{rolling: true}
	for _, row := range stay {
		switch {
		case row.State.GetRevision() == f.GetRevision():
			r.current = append(r.current, row)
		case movable(row.State):
			r.outdated = append(r.outdated, row)
		default:
			r.kept = append(r.kept, row)
		}
	}
	return r
}

// planRollout shuts down the outdated servers of a progressing rollout:
// under RECREATE all at once; under a rolling update those not serving at
// once, and READY ones only while the fleet keeps replicas less
// max_unavailable serving (the replacements scheduled by planFleet, within
// max_surge, serve first).
//
// It returns how many more serving servers may go this pass (for a
// scale-down during the rollout): what max_unavailable leaves.
func (p planner) planRollout(s snapshot, f *eventsv1.FleetState, stay []projections.Row[*eventsv1.GameServerState], rev revisions, out *Plan) int {
	want := int(f.GetSpec().GetReplicas())
	use := useOf(stay)
	_, unavailable := events.RolloutBounds(f.GetSpec().GetStrategy(), want, use.busy())
	canGo := use.serving() - (want - unavailable)
	if !rev.rolling || len(rev.outdated) == 0 {
		return canGo
	}
	detail := fmt.Sprintf("replaced by revision %d of its fleet", f.GetRevision())
	if f.GetSpec().GetStrategy().GetType() == eventsv1.FleetStrategy_RECREATE {
		for _, r := range rev.outdated {
			p.shutdown(s.now, r, eventsv1.Reason_REASON_FLEET_UPDATED, detail, out)
		}
		return canGo
	}
	for _, r := range scaleDownOrder(rev.outdated, f.GetSpec().GetScheduling(), s.load) {
		if serves(r.State) {
			if canGo <= 0 {
				continue
			}
			canGo--
		}
		p.shutdown(s.now, r, eventsv1.Reason_REASON_FLEET_UPDATED, detail, out)
	}
	return canGo
}

// fleetUse is what a fleet's live servers are doing.
type fleetUse struct {
	allocated, reserved, ready, starting int
}

// useOf counts servers by what they do.
func useOf(rows []projections.Row[*eventsv1.GameServerState]) fleetUse {
	var u fleetUse
	for _, r := range rows {
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_ALLOCATED:
			u.allocated++
		case eventsv1.Lifecycle_LIFECYCLE_RESERVED:
			u.reserved++
		case eventsv1.Lifecycle_LIFECYCLE_READY:
			u.ready++
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_STARTING:
			u.starting++
		}
	}
	return u
}

// busy counts the servers holding a match (ALLOCATED, RESERVED).
func (u fleetUse) busy() int { return u.allocated + u.reserved }

// serving counts the servers up for matches or in one.
func (u fleetUse) serving() int { return u.ready + u.busy() }

// whyNoRoom says why a fleet's missing servers found no host: its host
// selector matches none of the hosts that take new servers, or those it
// matches (all of them, without a selector) are full.
func whyNoRoom(fleet string, missing int, hosts []*hostSlot, selector map[string]string) *noRoom {
	matching := 0
	for _, h := range hosts {
		if events.MatchesLabels(h.labels, selector) {
			matching++
		}
	}
	n := &noRoom{fleet: fleet, missing: missing, reason: events.NoHostWithRoom}
	if len(selector) > 0 {
		n.reason = events.NoMatchingHost
		n.message = fmt.Sprintf("%d game servers wait: no ONLINE, uncordoned host with labels %s has room (%d match, all full)",
			missing, labelList(selector), matching)
		if matching == 0 {
			n.message = fmt.Sprintf("%d game servers wait: no ONLINE, uncordoned host has labels %s", missing, labelList(selector))
		}
		return n
	}
	n.message = fmt.Sprintf("%d game servers wait: all %d ONLINE, uncordoned hosts are full", missing, matching)
	if matching == 0 {
		n.message = fmt.Sprintf("%d game servers wait: no host is ONLINE and uncordoned", missing)
	}
	return n
}

// labelList is a selector as "k1=v1,k2=v2", sorted.
func labelList(labels map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k+"="+labels[k])
	}
	return strings.Join(out, ",")
}

// rolloutStep is the rollout command of a fleet this pass, or nil: halt a
// progressing rollout whose new servers kept failing before READY (the
// fleet's start failures since it started or resumed reached the
// strategy's threshold), else record its counts (completing it when no
// outdated server is left and enough of the revision's serve: replicas,
// less max_unavailable for a rolling update).
func rolloutStep(s snapshot, f *eventsv1.FleetState, rows []projections.Row[*eventsv1.GameServerState]) events.FleetCommand {
	if !events.RolloutActive(f) {
		return nil
	}
	ro := f.GetRollout()
	threshold := f.GetSpec().GetStrategy().GetFailureThreshold()
	if n := events.FailuresSinceBaseline(f); threshold > 0 && n >= threshold {
		fail := f.GetStartFailing()
		return events.HaltRollout{
			Reason: fmt.Sprintf("%d new servers of revision %d ended before READY in a row (threshold %d): %s",
				n, ro.GetRevision(), threshold, events.ReasonName(fail.GetReason())),
			Failures: n, LastError: fail.GetLastError()}
	}
	want := int(f.GetSpec().GetReplicas())
	c := events.RecordRolloutProgress{Need: want}
	if f.GetSpec().GetStrategy().GetType() != eventsv1.FleetStrategy_RECREATE {
		_, unavailable := events.RolloutBounds(f.GetSpec().GetStrategy(), want, useOf(rows).busy())
		c.Need = want - unavailable
	}
	for _, r := range rows {
		switch l := r.State.GetLifecycle(); {
		case l == eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN || l == eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY:
		case r.State.GetRevision() == f.GetRevision():
			c.Updated++
			if l == eventsv1.Lifecycle_LIFECYCLE_READY {
				c.UpdatedReady++
			}
			if serves(r.State) {
				c.UpdatedServing++
			}
		default:
			c.Outdated++
			if !movable(r.State) {
				c.OutdatedBusy++
			}
		}
	}
	c.Elapsed = int64(max(0, s.now.Sub(ro.GetStartTime().AsTime()).Seconds()))
	return c
}

// placementStep records a fleet's wait for a host with room (blocked)
// when it begins or changes (count or reason), or its end: the API shows
// the wait as the PLACEMENT_BLOCKED condition.
func placementStep(s snapshot, blocked *noRoom) events.FleetCommand {
	if blocked != nil {
		return events.RecordPlacementBlocked{Waiting: blocked.missing, Reason: blocked.reason, Message: blocked.message}
	}
	return events.RecordPlacementUnblocked{At: s.now}
}

// decideFleetSteps decides a command on a fleet (none for nil) and
// returns its events with the fleet as they leave it.
func (p planner) decideFleetSteps(s snapshot, f *eventsv1.FleetState, cmd events.FleetCommand, out *Plan) ([]proto.Message, *eventsv1.FleetState) {
	if cmd == nil {
		return nil, f
	}
	name := f.GetName()
	msgs, err := events.DecideFleet(name, f, cmd)
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("%T on %s: %w", cmd, name, err))
		return nil, f
	}
	next := f
	for _, m := range msgs {
		if next, err = events.ApplyFleet(next, events.New(name, s.now, m)); err != nil {
			out.refused = append(out.refused, fmt.Errorf("fold %s on %s: %w", events.TypeOf(m), name, err))
			return nil, f
		}
	}
	return msgs, next
}

// fleetDecision is the append of a fleet's own events, guarded by seq,
// with the log line that says why; nil for no events.
func (p planner) fleetDecision(seq uint64, name string, msgs []proto.Message, blocked *noRoom) *decision {
	if len(msgs) == 0 {
		return nil
	}
	d := decision{action: actPlacement, name: name, guard: seq, events: msgs,
		say: "fleet game servers have hosts again", attrs: []any{"fleet", name}}
	if blocked != nil {
		d.say, d.attrs = "fleet game servers wait for a host", []any{"fleet", name, "waiting", blocked.missing, "reason", blocked.reason, "detail", blocked.message}
	}
	for _, m := range msgs {
		switch e := m.(type) {
		case *eventsv1.FleetAutoscaled:
			d.action, d.say = actScale, "fleet autoscaled"
			d.attrs = []any{"fleet", name, "from", e.GetFromReplicas(), "to", e.GetToReplicas(), "policy", e.GetPolicy(), "why", e.GetReason()}
		case *eventsv1.FleetAutoscaleFailed:
			d.action, d.say = actScale, "fleet autoscaling failed; its size is kept"
			d.attrs = []any{"fleet", name, "policy", e.GetPolicy(), "err", e.GetError(), "replicas", e.GetReplicas()}
		case *eventsv1.FleetAutoscaleRecovered:
			d.action, d.say = actScale, "fleet autoscaling answers again"
		case *eventsv1.FleetRolloutProgressed:
			d.action, d.say = actRollout, "fleet rollout progressed"
			d.attrs = []any{"fleet", name, "revision", e.GetRevision(), "updated", e.GetUpdated(), "updated_ready", e.GetUpdatedReady(),
				"outdated", e.GetOutdated(), "outdated_busy", e.GetOutdatedBusy()}
		case *eventsv1.FleetRolloutCompleted:
			d.action, d.say = actRollout, "fleet rollout completed"
			d.attrs = []any{"fleet", name, "revision", e.GetRevision(), "seconds", e.GetDurationSeconds()}
		case *eventsv1.FleetRolloutHalted:
			d.action, d.say = actRollout, "fleet rollout halted: its new servers keep failing; the outdated ones keep serving"
			d.attrs = []any{"fleet", name, "revision", e.GetRevision(), "why", e.GetReason(), "last_error", e.GetLastError()}
		}
	}
	return &d
}

// movable reports whether a server leaves a draining host for another:
// one that holds no match (READY, or not ready yet). ALLOCATED and
// RESERVED servers finish what they hold.
func movable(gs *eventsv1.GameServerState) bool {
	switch gs.GetLifecycle() {
	case eventsv1.Lifecycle_LIFECYCLE_READY, eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_STARTING:
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

// scaleDownOrder lists the servers that may be scaled down, best first:
// READY, then those not yet ready. Within each, the opposite of placement
// (events.CompareHosts on the hosts' used slots, load): under PACKED the
// servers of the least used hosts go first, so that hosts empty out;
// under DISTRIBUTED those of the busiest; then the newest first. ALLOCATED
// and RESERVED servers are never scaled down.
func scaleDownOrder(live []projections.Row[*eventsv1.GameServerState], sched eventsv1.Scheduling, load map[string]int32) []projections.Row[*eventsv1.GameServerState] {
	distributed := sched == eventsv1.Scheduling_SCHEDULING_DISTRIBUTED
	rank := func(l eventsv1.Lifecycle) int {
		switch l {
		case eventsv1.Lifecycle_LIFECYCLE_READY:
			return 0
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_STARTING:
			return 1
		}
		return -1
	}
	var out []projections.Row[*eventsv1.GameServerState]
	for _, r := range live {
		if rank(r.State.GetLifecycle()) >= 0 {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b projections.Row[*eventsv1.GameServerState]) int {
		if ra, rb := rank(a.State.GetLifecycle()), rank(b.State.GetLifecycle()); ra != rb {
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

// pickHost chooses a host with room whose labels match selector, ranked
// by events.CompareHosts on their used slots: the fullest for PACKED, the
// emptiest for DISTRIBUTED.
func pickHost(hosts []*hostSlot, s eventsv1.Scheduling, selector map[string]string) *hostSlot {
	distributed := s == eventsv1.Scheduling_SCHEDULING_DISTRIBUTED
	var best *hostSlot
	for _, h := range hosts {
		if h.used >= h.capacity || !events.MatchesLabels(h.labels, selector) {
			continue
		}
		if best == nil || events.CompareHosts(distributed, h.load(), best.load()) < 0 {
			best = h
		}
	}
	return best
}

// load is the host as placement ranks it.
func (h *hostSlot) load() events.HostLoad { return events.HostLoad{Name: h.name, Load: int(h.used)} }

// schedule decides a new game server of fleet f on host h, and its start
// command.
func (p planner) schedule(f *eventsv1.FleetState, h *hostSlot, out *Plan) {
	fleetID, err := events.ParseFleetName(f.GetName())
	if err != nil {
		out.refused = append(out.refused, err)
		return
	}
	name := events.GameServerName(fleetID, p.newID())
	msgs, err := events.DecideGameServer(name, nil, events.ScheduleGameServer{Host: h.name, Spec: f.GetSpec(), Revision: f.GetRevision(), HostSubject: h.hostSubjects})
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("schedule a game server of %s: %w", f.GetName(), err))
		return
	}
	subject, err := events.Subject(name)
	if h.hostSubjects {
		subject, err = events.GameServerSubject(name, h.name)
	}
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("schedule a game server of %s: %w", f.GetName(), err))
		return
	}
	out.decisions = append(out.decisions, decision{action: actSchedule, name: name, subject: subject, events: msgs,
		host: h.id, command: startCommand(name, subject, f.GetSpec()),
		say: "game server scheduled", attrs: []any{"game_server", name, "host", h.name}})
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
func (p planner) resendStart(s snapshot, gs *eventsv1.GameServerState, out *Plan) {
	since := gs.GetCreateTime().AsTime()
	if t, ok := s.startResent[gs.GetName()]; ok && t.After(since) {
		since = t
	}
	if s.now.Sub(since) <= p.startTimeout {
		return
	}
	hostID, err := events.ParseHostName(gs.GetHost())
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("re-send the start of %s: %w", gs.GetName(), err))
		return
	}
	subject, err := events.SubjectOf(gs)
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("re-send the start of %s: %w", gs.GetName(), err))
		return
	}
	spec := &eventsv1.FleetSpec{Template: gs.GetTemplate(), Health: gs.GetHealthPolicy(),
		SdkDisconnectGraceSeconds: gs.GetSdkDisconnectGraceSeconds(), Labels: gs.GetLabels()}
	out.decisions = append(out.decisions, decision{action: actResend, name: gs.GetName(), subject: subject,
		host: hostID, command: startCommand(gs.GetName(), subject, spec),
		say: "start command re-sent", attrs: []any{"game_server", gs.GetName(), "host", gs.GetHost(),
			"scheduled_at", gs.GetCreateTime().AsTime(), "start_timeout", p.startTimeout}})
}

// shutdown decides a server's shutdown with ShutdownGrace to stop, and the
// stop command for its agent.
func (p planner) shutdown(now time.Time, r projections.Row[*eventsv1.GameServerState], reason eventsv1.Reason, detail string, out *Plan) {
	name := r.State.GetName()
	deadline := now.Add(p.shutdownGrace)
	ev := proto.CloneOf(r.State.GetEvidence())
	if ev == nil {
		ev = &eventsv1.Evidence{}
	}
	ev.RequestedBy, ev.Detail = p.producer, detail
	msgs, err := events.DecideGameServer(name, r.State, events.RequestShutdown{Reason: reason, Evidence: ev, Deadline: deadline})
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("shut down %s: %w", name, err))
		return
	}
	if len(msgs) == 0 {
		return
	}
	hostID, err := events.ParseHostName(r.State.GetHost())
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("shut down %s: %w", name, err))
		return
	}
	subject, err := events.SubjectOf(r.State)
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("shut down %s: %w", name, err))
		return
	}
	out.decisions = append(out.decisions, decision{action: actShutdown, name: name, subject: subject, guard: r.Sequence, events: msgs,
		host: hostID, command: &agentv1.Command{Action: &agentv1.Command_Stop{Stop: &agentv1.StopGameServer{
			GameServer: name, Reason: reason, Deadline: timestamppb.New(deadline),
		}}},
		say: "game server shutdown requested", attrs: []any{"game_server", name, "reason", events.ReasonName(reason)}})
}

// terminate decides that the controller ends a game server itself, with a
// reason and evidence; nil if the domain refuses (recorded in out).
func (p planner) terminate(r projections.Row[*eventsv1.GameServerState], reason eventsv1.Reason, detail, say string, out *Plan) *decision {
	name := r.State.GetName()
	ev := &eventsv1.Evidence{RequestedBy: p.producer, Detail: detail}
	msgs, err := events.DecideGameServer(name, r.State, events.Terminate{Reason: reason, Evidence: ev})
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("terminate %s (%s): %w", name, events.ReasonName(reason), err))
		return nil
	}
	subject, err := events.SubjectOf(r.State)
	if err != nil {
		out.refused = append(out.refused, fmt.Errorf("terminate %s (%s): %w", name, events.ReasonName(reason), err))
		return nil
	}
	return &decision{action: actTerminate, name: name, subject: subject, guard: r.Sequence, events: msgs,
		say: say, attrs: []any{"game_server", name, "host", r.State.GetHost(), "pid", r.State.GetPid(), "reason", events.ReasonName(reason)}}
}
