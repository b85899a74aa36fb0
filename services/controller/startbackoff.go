package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A fleet whose game servers cannot start (a command that does not exist,
// more ports than the host has, a process that crashes before Ready) would
// have each failed server replaced at once, for ever: the stream and the
// disk grow by a server a second. So each pass the controller reads the
// game servers that changed since its last pass and counts, per fleet, those
// that ended before they were ever READY (startFailure). It records them
// as FleetStartFailing, with a backoff that doubles with each failure up to
// a cap (events.StartBackoff), and while a fleet is failing it starts at
// most one game server at a time, and none before the backoff has passed
// (startsAllowed). A server scheduled after the failures began that becomes
// READY ends the run (FleetStartRecovered). docs/crash-loops.md.

// startWatch follows the game servers that end before READY, between passes.
type startWatch struct {
	read  bool   // after is set: this leadership has read once
	after uint64 // the largest game server sequence read
	// pending are failures not recorded yet (an append conflicted), by fleet.
	pending map[string]*startNews
	// counted are servers counted while UNHEALTHY: their termination is
	// the same failure.
	counted map[string]bool
}

// startNews is what one read of changed game servers says about a fleet.
type startNews struct {
	failures []events.StartFailure
	// ready is a server scheduled after the fleet's failures began that
	// became READY, with the sequence it was read at; "" if none.
	ready    string
	readySeq uint64
}

// failureReasons are the ends of a server that never became READY that
// say its start failed; the others (scaled down, host lost, deleted, …)
// were decided by someone else.
var failureReasons = map[eventsv1.Reason]bool{
	eventsv1.Reason_REASON_PROCESS_START_FAILED:         true,
	eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY: true,
	eventsv1.Reason_REASON_PROCESS_EXITED:               true,
	eventsv1.Reason_REASON_READY_TIMEOUT:                true,
	eventsv1.Reason_REASON_HEALTH_CHECK_FAILED:          true,
	eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED: true,
	eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME:   true,
}

// startFailure reports whether a game server, as last seen, is a failed
// start of fleet f: it ended (or went UNHEALTHY) before it was ever READY,
// for a reason of its own, running what the fleet runs now (a failure of
// an earlier template says nothing of the current one).
func startFailure(s *eventsv1.GameServerState, f *eventsv1.FleetState) bool {
	switch s.GetLifecycle() {
	case eventsv1.Lifecycle_LIFECYCLE_TERMINATED, eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY:
	default:
		return false
	}
	return !s.GetEverReady() && failureReasons[s.GetReason()] &&
		proto.Equal(s.GetTemplate(), f.GetSpec().GetTemplate()) && events.SameHealthContract(s.GetHealthPolicy(), f.GetSpec().GetHealth())
}

// startRecovery reports whether a game server ends fleet f's run of
// failures: it became READY and was scheduled after the run began.
func startRecovery(s *eventsv1.GameServerState, f *eventsv1.FleetState) bool {
	return f.GetStartFailing() != nil && s.GetEverReady() &&
		!s.GetCreateTime().AsTime().Before(f.GetStartConditionTime().AsTime())
}

// startError says in words why a server's start failed.
func startError(s *eventsv1.GameServerState) string {
	ev := s.GetEvidence()
	if ev == nil {
		ev = &eventsv1.Evidence{}
	}
	if ev.GetDetail() != "" {
		return ev.GetDetail()
	}
	var facts []string
	switch {
	case ev.ExitCode != nil:
		facts = append(facts, fmt.Sprintf("exited with code %d", ev.GetExitCode()))
	case ev.GetSignal() != "":
		facts = append(facts, "ended by signal "+ev.GetSignal())
	case ev.GetMissedPeriods() > 0:
		facts = append(facts, fmt.Sprintf("missed %d heartbeat periods of %d s", ev.GetMissedPeriods(), ev.GetPeriodSeconds()))
	}
	if n := ev.GetStartAttempts(); n > 0 {
		facts = append(facts, fmt.Sprintf("after %d start attempts", n))
	}
	if len(facts) == 0 {
		return events.ReasonName(s.GetReason()) + " before Ready"
	}
	return strings.Join(facts, " ") + " before Ready"
}

// classify sorts changed game server rows, in stream order, into news per
// fleet. counted tracks servers counted while UNHEALTHY (updated).
func classify(rows []projections.Row[*eventsv1.GameServerState], fleets map[string]*eventsv1.FleetState, counted map[string]bool) map[string]*startNews {
	out := map[string]*startNews{}
	for _, r := range rows {
		s := r.State
		fleetID, _, err := events.ParseGameServerName(s.GetName())
		if err != nil {
			continue
		}
		f, ok := fleets[events.FleetName(fleetID)]
		if !ok {
			continue // standalone, deleted, or not in the views yet
		}
		news := out[f.GetName()]
		if news == nil {
			news = &startNews{}
		}
		switch {
		case startFailure(s, f):
			already := counted[s.GetName()]
			if s.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
				delete(counted, s.GetName())
			} else {
				counted[s.GetName()] = true
			}
			if already || r.Sequence <= f.GetCountedFailureSequence() {
				continue
			}
			news.failures = append(news.failures, events.StartFailure{
				GameServer: s.GetName(), Reason: s.GetReason(), Error: startError(s), Sequence: r.Sequence,
			})
		case startRecovery(s, f):
			news.ready, news.readySeq = s.GetName(), r.Sequence
		default:
			if s.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
				delete(counted, s.GetName())
			}
			continue
		}
		out[f.GetName()] = news
	}
	return out
}

// merge adds later news to earlier news.
func (n *startNews) merge(later *startNews) *startNews {
	if n == nil {
		return later
	}
	if later == nil {
		return n
	}
	out := &startNews{failures: slices.Concat(n.failures, later.failures), ready: n.ready, readySeq: n.readySeq}
	if later.ready != "" {
		out.ready, out.readySeq = later.ready, later.readySeq
	}
	return out
}

// command is what to record for a fleet: its recovery if a server became
// READY after every failure seen, else the failures; nil for nothing.
// Failures before a recovery belong to the run it ends.
func (n *startNews) command(now time.Time, b events.StartBackoff) events.FleetCommand {
	if n == nil {
		return nil
	}
	if n.ready != "" {
		last := uint64(0)
		for _, f := range n.failures {
			last = max(last, f.Sequence)
		}
		if n.readySeq > last {
			return events.RecordStartRecovered{GameServer: n.ready}
		}
	}
	if len(n.failures) == 0 {
		return nil
	}
	return events.RecordStartFailures{Failures: n.failures, At: now, Backoff: b}
}

// startsAllowed is how many new servers fleet f may start this pass: any
// number while it is not failing; while it is, none before its backoff has
// passed, and then one, unless one started since the failures began (a
// probe) is still starting.
func startsAllowed(f *eventsv1.FleetState, live []projections.Row[*eventsv1.GameServerState], now time.Time) int {
	failing := f.GetStartFailing()
	if failing == nil {
		return int(f.GetSpec().GetReplicas())
	}
	if until := failing.GetBackoffUntil(); until != nil && now.Before(until.AsTime()) {
		return 0
	}
	since := f.GetStartConditionTime().AsTime()
	for _, r := range live {
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_STARTING:
			if !r.State.GetCreateTime().AsTime().Before(since) {
				return 0
			}
		}
	}
	return 1
}

// firstRead is where a new leader starts reading changed game servers:
// from the views' checkpoint, or earlier, from the last failure counted of
// a fleet that is failing (its later failures may not be counted yet).
func firstRead(fleets []projections.FleetRow, checkpoint uint64) uint64 {
	from := checkpoint
	for _, f := range fleets {
		if sf := f.State.GetStartFailing(); sf != nil {
			from = min(from, sf.GetFailureSequence())
		}
	}
	return from
}

// readStarts reads the game servers changed since the last pass and
// returns, per fleet, what they say about starts, with what earlier passes
// could not record yet (pending); the executor puts back what it cannot
// record this pass.
func (c *Controller) readStarts(ctx context.Context, fleets []projections.FleetRow) (map[string]*startNews, error) {
	w := &c.starts
	if !w.read {
		cp, err := c.opts.Views.Checkpoint(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the views' checkpoint: %w", err)
		}
		w.after, w.read, w.pending, w.counted = firstRead(fleets, cp), true, map[string]*startNews{}, map[string]bool{}
	}
	rows, err := c.opts.Views.GameServersChangedSince(ctx, w.after)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*eventsv1.FleetState, len(fleets))
	for _, f := range fleets {
		byName[f.State.GetName()] = f.State
	}
	for _, r := range rows {
		w.after = max(w.after, r.Sequence)
	}
	news := classify(rows, byName, w.counted)
	for name, n := range w.pending {
		if _, ok := byName[name]; ok {
			news[name] = n.merge(news[name])
		}
	}
	w.pending = map[string]*startNews{} // the fleet is gone, or its news are in this pass's snapshot
	return news, nil
}

// planStarts records, per fleet, start failures and recoveries. It returns
// the fleets' states with what it decided folded in, so that this pass
// already holds back.
func (p planner) planStarts(s snapshot, out *Plan) []*eventsv1.FleetState {
	fleets := make([]*eventsv1.FleetState, len(s.fleets))
	for i, f := range s.fleets {
		fleets[i] = f.State
		name := f.State.GetName()
		n := s.startNews[name]
		cmd := n.command(s.now, p.backoff)
		if cmd == nil {
			continue
		}
		msgs, err := events.DecideFleet(name, f.State, cmd)
		if err != nil {
			out.refused = append(out.refused, fmt.Errorf("record the starts of %s: %w", name, err))
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		state := f.State
		for _, m := range msgs {
			if state, err = events.ApplyFleet(state, events.New(name, s.now, m)); err != nil {
				break
			}
		}
		if err != nil {
			out.refused = append(out.refused, fmt.Errorf("fold the starts of %s: %w", name, err))
			continue
		}
		fleets[i] = state
		d := decision{action: actStarts, name: name, guard: f.Sequence, events: msgs, news: n}
		switch e := msgs[0].(type) {
		case *eventsv1.FleetStartFailing:
			d.say, d.attrs = "fleet game servers fail to start; replacements back off", []any{"fleet", name,
				"consecutive_failures", e.GetConsecutiveFailures(), "reason", events.ReasonName(e.GetReason()),
				"last_error", e.GetLastError(), "game_server", e.GetGameServer(), "backoff_until", e.GetBackoffUntil().AsTime()}
		case *eventsv1.FleetStartRecovered:
			d.say, d.attrs = "fleet game servers start again", []any{"fleet", name, "game_server", e.GetGameServer(),
				"failures", e.GetConsecutiveFailures()}
		}
		out.decisions = append(out.decisions, d)
	}
	return fleets
}
