package plan

import (
	"fmt"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

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
func (p Planner) planRollout(s Snapshot, f *eventsv1.FleetState, stay []projections.Row[*eventsv1.GameServerState], rev revisions, out *Plan) int {
	want := int(f.GetSpec().GetReplicas())
	use := UseOf(stay)
	_, unavailable := events.RolloutBounds(f.GetSpec().GetStrategy(), want, use.busy())
	canGo := use.serving() - (want - unavailable)
	if !rev.rolling || len(rev.outdated) == 0 {
		return canGo
	}
	detail := fmt.Sprintf("replaced by revision %d of its fleet", f.GetRevision())
	if f.GetSpec().GetStrategy().GetType() == eventsv1.FleetStrategy_RECREATE {
		for _, r := range rev.outdated {
			p.shutdown(s.Now, r, eventsv1.Reason_REASON_FLEET_UPDATED, detail, out)
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
		p.shutdown(s.Now, r, eventsv1.Reason_REASON_FLEET_UPDATED, detail, out)
	}
	return canGo
}

// rolloutStep is the rollout command of a fleet this pass, or nil: halt a
// progressing rollout whose new servers kept failing before READY (the
// fleet's start failures since it started or resumed reached the
// strategy's threshold), else record its counts (completing it when no
// outdated server is left and enough of the revision's serve: replicas,
// less max_unavailable for a rolling update).
func rolloutStep(s Snapshot, f *eventsv1.FleetState, rows []projections.Row[*eventsv1.GameServerState]) events.FleetCommand {
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
		_, unavailable := events.RolloutBounds(f.GetSpec().GetStrategy(), want, UseOf(rows).busy())
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
	c.Elapsed = int64(max(0, s.Now.Sub(ro.GetStartTime().AsTime()).Seconds()))
	return c
}
