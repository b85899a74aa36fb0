package plan

import (
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
// game servers that changed since its last pass, and ClassifyStarts
// counts, per fleet, those that ended before they were ever READY
// (startFailure). planStarts records them as FleetStartFailing, with a
// backoff that doubles with each failure up to a cap (events.StartBackoff),
// and while a fleet is failing it starts at most one game server at a
// time, and none before the backoff has passed (startsAllowed). A server
// scheduled after the failures began that becomes READY ends the run
// (FleetStartRecovered). docs/crash-loops.md.

// StartNews is what one read of changed game servers says about a fleet.
type StartNews struct {
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

// ClassifyStarts sorts changed game server rows, in stream order, into
// news per fleet (fleets by name). counted tracks servers counted while
// UNHEALTHY (updated): their termination is the same failure.
func ClassifyStarts(rows []projections.Row[*eventsv1.GameServerState], fleets map[string]*eventsv1.FleetState, counted map[string]bool) map[string]*StartNews {
	out := map[string]*StartNews{}
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
			news = &StartNews{}
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

// Merge adds later news to earlier news.
func (n *StartNews) Merge(later *StartNews) *StartNews {
	if n == nil {
		return later
	}
	if later == nil {
		return n
	}
	out := &StartNews{failures: slices.Concat(n.failures, later.failures), ready: n.ready, readySeq: n.readySeq}
	if later.ready != "" {
		out.ready, out.readySeq = later.ready, later.readySeq
	}
	return out
}

// command is what to record for a fleet: its recovery if a server became
// READY after every failure seen, else the failures; nil for nothing.
// Failures before a recovery belong to the run it ends.
func (n *StartNews) command(now time.Time, b events.StartBackoff) events.FleetCommand {
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

// planStarts records, per fleet, start failures and recoveries. It returns
// the fleets' states with what it decided folded in, so that this pass
// already holds back.
func (p Planner) planStarts(s Snapshot, out *Plan) []*eventsv1.FleetState {
	fleets := make([]*eventsv1.FleetState, len(s.Fleets))
	for i, f := range s.Fleets {
		fleets[i] = f.State
		name := f.State.GetName()
		n := s.StartNews[name]
		cmd := n.command(s.Now, p.Backoff)
		if cmd == nil {
			continue
		}
		msgs, err := events.DecideFleet(name, f.State, cmd)
		if err != nil {
			out.Refused = append(out.Refused, fmt.Errorf("record the starts of %s: %w", name, err))
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		state := f.State
		for _, m := range msgs {
			if state, err = events.ApplyFleet(state, events.New(name, s.Now, m)); err != nil {
				break
			}
		}
		if err != nil {
			out.Refused = append(out.Refused, fmt.Errorf("fold the starts of %s: %w", name, err))
			continue
		}
		fleets[i] = state
		d := Decision{Action: ActStarts, Name: name, Guard: f.Sequence, Events: msgs, News: n}
		switch e := msgs[0].(type) {
		case *eventsv1.FleetStartFailing:
			d.Say, d.Attrs = "fleet game servers fail to start; replacements back off", []any{"fleet", name,
				"consecutive_failures", e.GetConsecutiveFailures(), "reason", events.ReasonName(e.GetReason()),
				"last_error", e.GetLastError(), "game_server", e.GetGameServer(), "backoff_until", e.GetBackoffUntil().AsTime()}
		case *eventsv1.FleetStartRecovered:
			d.Say, d.Attrs = "fleet game servers start again", []any{"fleet", name, "game_server", e.GetGameServer(),
				"failures", e.GetConsecutiveFailures()}
		}
		out.Decisions = append(out.Decisions, d)
	}
	return fleets
}
