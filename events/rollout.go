package events

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Rollouts (docs/rollouts.md): a change of a fleet's template or health
// makes a new revision (FleetRolloutStarted, with FleetUpdated), and the
// controller moves the fleet's game servers to it within the strategy's
// bounds, recording each step. Servers holding a match (ALLOCATED,
// RESERVED) are never touched: they finish it on their revision and are
// replaced after. An operator pauses, resumes or undoes a rollout; the
// controller halts one whose new servers keep failing before READY.

// The strategy's defaults.
const (
	DefaultMaxSurge                = "25%"
	DefaultMaxUnavailable          = "25%"
	DefaultRolloutFailureThreshold = 3
	// MaxRevisions is how many revisions a fleet keeps for undo.
	MaxRevisions = 10
)

// normalizeStrategy fills a strategy's zero values.
func normalizeStrategy(s *eventsv1.FleetSpec) {
	if s.Strategy == nil {
		s.Strategy = &eventsv1.FleetStrategy{}
	}
	st := s.Strategy
	if st.Type == eventsv1.FleetStrategy_TYPE_UNSPECIFIED {
		st.Type = eventsv1.FleetStrategy_ROLLING_UPDATE
	}
	if st.MaxSurge == "" {
		st.MaxSurge = DefaultMaxSurge
	}
	if st.MaxUnavailable == "" {
		st.MaxUnavailable = DefaultMaxUnavailable
	}
	st.FailureThreshold = orDefault(st.FailureThreshold, DefaultRolloutFailureThreshold)
}

// validateStrategy checks a strategy; zero values stand for the
// defaults.
func validateStrategy(st *eventsv1.FleetStrategy) error {
	if _, ok := eventsv1.FleetStrategy_Type_name[int32(st.GetType())]; !ok {
		return Invalid("fleet.strategy.type", "unknown type %d", st.GetType())
	}
	for field, v := range map[string]string{"max_surge": cmp.Or(st.GetMaxSurge(), DefaultMaxSurge), "max_unavailable": cmp.Or(st.GetMaxUnavailable(), DefaultMaxUnavailable)} {
		if _, _, err := parseCountOrPercent(v, 100); err != nil {
			return Invalid("fleet.strategy."+field, "%v", err)
		}
	}
	if st.GetFailureThreshold() < 0 {
		return Invalid("fleet.strategy.failure_threshold", "must not be negative, got %d", st.GetFailureThreshold())
	}
	return nil
}

// parseCountOrPercent reads "3" or "25%" (at most maxPercent).
func parseCountOrPercent(s string, maxPercent int) (n int, percent bool, err error) {
	digits, percent := strings.CutSuffix(strings.TrimSpace(s), "%")
	n, err = strconv.Atoi(digits)
	switch {
	case err != nil || n < 0:
		return 0, false, fmt.Errorf("%q is neither a count (3) nor a percentage (25%%)", s)
	case percent && n > maxPercent:
		return 0, false, fmt.Errorf("%q: at most %d%%", s, maxPercent)
	case !percent && n > MaxReplicas:
		return 0, false, fmt.Errorf("%q: at most %d", s, MaxReplicas)
	}
	return n, percent, nil
}

// RolloutBounds are a rolling update's limits for a fleet of replicas of
// which busy hold a match (ALLOCATED or RESERVED): at most surge servers
// above replicas, and at most unavailable of the servers without a match
// not serving. A percentage surge is of replicas, rounded up; a
// percentage unavailable is of the servers without a match (replicas −
// busy), rounded down, so a rollout never takes an autoscaled fleet's
// whole buffer of READY servers at once. One of them is at least 1, so a
// rollout always moves.
func RolloutBounds(st *eventsv1.FleetStrategy, replicas, busy int) (surge, unavailable int) {
	resolve := func(s string, of int, up bool) int {
		n, percent, err := parseCountOrPercent(s, 100)
		if err != nil {
			return 0
		}
		if !percent {
			return n
		}
		f := float64(max(0, of)) * float64(n) / 100
		if up {
			return int(math.Ceil(f))
		}
		return int(math.Floor(f))
	}
	surge = resolve(cmp.Or(st.GetMaxSurge(), DefaultMaxSurge), replicas, true)
	unavailable = resolve(cmp.Or(st.GetMaxUnavailable(), DefaultMaxUnavailable), replicas-busy, false)
	if surge == 0 && unavailable == 0 {
		surge = 1
	}
	return surge, unavailable
}

// StrategyInWords says a strategy for events and humans.
func StrategyInWords(st *eventsv1.FleetStrategy) string {
	if st.GetType() == eventsv1.FleetStrategy_RECREATE {
		return "recreate"
	}
	return fmt.Sprintf("rolling update, max surge %s, max unavailable %s", cmp.Or(st.GetMaxSurge(), DefaultMaxSurge), cmp.Or(st.GetMaxUnavailable(), DefaultMaxUnavailable))
}

// RolloutActive reports whether a fleet's rollout moves servers now.
func RolloutActive(f *eventsv1.FleetState) bool {
	return f.GetRollout().GetState() == eventsv1.RolloutState_ROLLOUT_STATE_PROGRESSING
}

// RolloutOpen reports whether a fleet has a rollout that has not
// completed: progressing, paused or halted.
func RolloutOpen(f *eventsv1.FleetState) bool {
	switch f.GetRollout().GetState() {
	case eventsv1.RolloutState_ROLLOUT_STATE_PROGRESSING, eventsv1.RolloutState_ROLLOUT_STATE_PAUSED, eventsv1.RolloutState_ROLLOUT_STATE_HALTED:
		return true
	}
	return false
}

// PauseRollout pauses a progressing rollout.
type PauseRollout struct{ By string }

// ResumeRollout resumes a paused or halted rollout.
type ResumeRollout struct{ By string }

// UndoRollout goes back to the revision before the current one: its
// template and health are the fleet's again, and a rollout moves the
// servers there.
type UndoRollout struct{ By string }

// RecordRolloutProgress records a rollout's counts when they changed; with
// no outdated server left and at least Need servers of the revision
// serving, the rollout is completed.
type RecordRolloutProgress struct {
	Updated, UpdatedReady, Outdated, OutdatedBusy int
	// UpdatedServing are the revision's servers READY, RESERVED or
	// ALLOCATED, and Need how many must be for the rollout to be done.
	UpdatedServing, Need int
	// Seconds since the rollout started, for its completion.
	Elapsed int64
}

// HaltRollout stops a rollout whose new servers keep failing.
type HaltRollout struct {
	Reason    string
	Failures  int32
	LastError string
}

func (PauseRollout) fleetCommand()          {}
func (ResumeRollout) fleetCommand()         {}
func (UndoRollout) fleetCommand()           {}
func (RecordRolloutProgress) fleetCommand() {}
func (HaltRollout) fleetCommand()           {}

// rolloutStart is the FleetRolloutStarted an update that changed the
// fields changed makes, or nil when neither the template nor the health
// contract changed (a ready timeout set to its default's value is the same
// contract).
func rolloutStart(state *eventsv1.FleetState, next *eventsv1.FleetSpec, changed []string) *eventsv1.FleetRolloutStarted {
	what := runChanges(state.GetSpec(), next, changed)
	if len(what) == 0 {
		return nil
	}
	return &eventsv1.FleetRolloutStarted{Revision: nextRevision(state), FromRevision: state.GetRevision(),
		Strategy: StrategyInWords(next.GetStrategy()), Reason: strings.Join(what, " and ") + " changed"}
}

// nextRevision is the number of a fleet's next revision.
func nextRevision(state *eventsv1.FleetState) int64 {
	n := state.GetRevision()
	for _, r := range state.GetRevisions() {
		n = max(n, r.GetRevision())
	}
	return n + 1
}

// previousRevision is the revision an undo goes back to: the one the
// current rollout came from, else the one kept before the current.
func previousRevision(state *eventsv1.FleetState) *eventsv1.FleetRevision {
	find := func(n int64) *eventsv1.FleetRevision {
		for _, r := range state.GetRevisions() {
			if r.GetRevision() == n {
				return r
			}
		}
		return nil
	}
	if ro := state.GetRollout(); ro != nil && ro.GetRevision() == state.GetRevision() {
		if r := find(ro.GetFromRevision()); r != nil && ro.GetFromRevision() != state.GetRevision() {
			return r
		}
	}
	revs := state.GetRevisions()
	for i := len(revs) - 1; i > 0; i-- {
		if revs[i].GetRevision() == state.GetRevision() {
			return revs[i-1]
		}
	}
	return nil
}

// decideRollout decides the rollout commands.
func decideRollout(name string, state *eventsv1.FleetState, cmd FleetCommand) ([]proto.Message, error) {
	ro := state.GetRollout()
	switch c := cmd.(type) {
	case PauseRollout:
		if ro.GetState() == eventsv1.RolloutState_ROLLOUT_STATE_PAUSED {
			return nil, nil
		}
		if !RolloutActive(state) {
			return nil, rolloutRefused(name, state, "pause")
		}
		return []proto.Message{&eventsv1.FleetRolloutPaused{Revision: ro.GetRevision(), RequestedBy: c.By}}, nil
	case ResumeRollout:
		if RolloutActive(state) {
			return nil, nil
		}
		if !RolloutOpen(state) {
			return nil, rolloutRefused(name, state, "resume")
		}
		return []proto.Message{&eventsv1.FleetRolloutResumed{Revision: ro.GetRevision(), RequestedBy: c.By}}, nil
	case UndoRollout:
		prev := previousRevision(state)
		if prev == nil {
			return nil, &TransitionError{Aggregate: name, From: fmt.Sprintf("revision %d, with no earlier revision kept", state.GetRevision()), Event: "UndoRollout"}
		}
		return []proto.Message{
			&eventsv1.FleetRolledBack{FromRevision: state.GetRevision(), ToRevision: prev.GetRevision(), RequestedBy: c.By},
			&eventsv1.FleetRolloutStarted{Revision: prev.GetRevision(), FromRevision: state.GetRevision(),
				Strategy: StrategyInWords(state.GetSpec().GetStrategy()), Reason: fmt.Sprintf("undo to revision %d", prev.GetRevision())},
		}, nil
	case RecordRolloutProgress:
		if !RolloutActive(state) {
			return nil, nil
		}
		if c.Outdated == 0 && c.UpdatedServing >= c.Need {
			return []proto.Message{&eventsv1.FleetRolloutCompleted{Revision: ro.GetRevision(), DurationSeconds: c.Elapsed}}, nil
		}
		if int(ro.GetUpdated()) == c.Updated && int(ro.GetUpdatedReady()) == c.UpdatedReady &&
			int(ro.GetOutdated()) == c.Outdated && int(ro.GetOutdatedBusy()) == c.OutdatedBusy {
			return nil, nil
		}
		return []proto.Message{&eventsv1.FleetRolloutProgressed{Revision: ro.GetRevision(), Updated: int32(c.Updated),
			UpdatedReady: int32(c.UpdatedReady), Outdated: int32(c.Outdated), OutdatedBusy: int32(c.OutdatedBusy)}}, nil
	case HaltRollout:
		if !RolloutActive(state) {
			return nil, nil
		}
		return []proto.Message{&eventsv1.FleetRolloutHalted{Revision: ro.GetRevision(), Reason: c.Reason,
			ConsecutiveFailures: c.Failures, LastError: c.LastError}}, nil
	}
	return nil, fmt.Errorf("events: unknown rollout command %T", cmd)
}

// setBaseline records, on a rollout that starts or resumes at at, the
// fleet's start failures in a row then: a halt counts only later ones.
func setBaseline(next *eventsv1.FleetState, at *timestamppb.Timestamp) {
	next.Rollout.BaselineFailures, next.Rollout.BaselineTime = next.GetStartFailing().GetConsecutiveFailures(), at
}

// FailuresSinceBaseline is how many of a fleet's start failures in a row
// came after its rollout started or last resumed: all of the current run
// if the run began after that, else those past the baseline.
func FailuresSinceBaseline(f *eventsv1.FleetState) int32 {
	fail, ro := f.GetStartFailing(), f.GetRollout()
	if fail == nil || ro == nil {
		return 0
	}
	if f.GetStartConditionTime().AsTime().After(ro.GetBaselineTime().AsTime()) {
		return fail.GetConsecutiveFailures()
	}
	return max(0, fail.GetConsecutiveFailures()-ro.GetBaselineFailures())
}

// rolloutRefused is the error of a rollout command with no rollout to act
// on.
func rolloutRefused(name string, state *eventsv1.FleetState, what string) error {
	st := "no rollout"
	if ro := state.GetRollout(); ro != nil {
		st = "rollout " + strings.ToLower(strings.TrimPrefix(ro.GetState().String(), "ROLLOUT_STATE_"))
	}
	return &TransitionError{Aggregate: name, From: st, Event: what + " rollout"}
}

// applyRollout folds the rollout events into next (a copy), at time at.
func applyRollout(next *eventsv1.FleetState, data proto.Message, at *timestamppb.Timestamp) {
	ro := next.GetRollout()
	switch d := data.(type) {
	case *eventsv1.FleetRolloutStarted:
		next.Revision = d.GetRevision()
		if !slices.ContainsFunc(next.GetRevisions(), func(r *eventsv1.FleetRevision) bool { return r.GetRevision() == d.GetRevision() }) {
			next.Revisions = append(next.Revisions, &eventsv1.FleetRevision{Revision: d.GetRevision(),
				Template: proto.CloneOf(next.GetSpec().GetTemplate()), Health: proto.CloneOf(next.GetSpec().GetHealth()), CreateTime: at})
			if over := len(next.Revisions) - MaxRevisions; over > 0 {
				next.Revisions = next.Revisions[over:]
			}
		}
		next.Rollout = &eventsv1.FleetRollout{Revision: d.GetRevision(), FromRevision: d.GetFromRevision(),
			State: eventsv1.RolloutState_ROLLOUT_STATE_PROGRESSING, Strategy: d.GetStrategy(), Reason: d.GetReason(), StartTime: at}
		setBaseline(next, at)
	case *eventsv1.FleetRolloutProgressed:
		ro.Updated, ro.UpdatedReady, ro.Outdated, ro.OutdatedBusy = d.GetUpdated(), d.GetUpdatedReady(), d.GetOutdated(), d.GetOutdatedBusy()
	case *eventsv1.FleetRolloutCompleted:
		ro.State, ro.Outdated, ro.OutdatedBusy, ro.Message = eventsv1.RolloutState_ROLLOUT_STATE_COMPLETED, 0, 0, ""
	case *eventsv1.FleetRolloutPaused:
		ro.State, ro.Message = eventsv1.RolloutState_ROLLOUT_STATE_PAUSED, "paused by "+d.GetRequestedBy()
	case *eventsv1.FleetRolloutResumed:
		ro.State, ro.Message = eventsv1.RolloutState_ROLLOUT_STATE_PROGRESSING, ""
		setBaseline(next, at)
	case *eventsv1.FleetRolloutHalted:
		ro.State, ro.Message = eventsv1.RolloutState_ROLLOUT_STATE_HALTED, d.GetReason()
	case *eventsv1.FleetRolledBack:
		for _, r := range next.GetRevisions() {
			if r.GetRevision() == d.GetToRevision() {
				next.Spec.Template, next.Spec.Health = proto.CloneOf(r.GetTemplate()), proto.CloneOf(r.GetHealth())
			}
		}
		if f := next.GetStartFailing(); f != nil {
			f.BackoffUntil = nil // what failed is undone: try at once
		}
	}
	if next.Rollout != nil {
		next.Rollout.UpdateTime = at
	}
}
