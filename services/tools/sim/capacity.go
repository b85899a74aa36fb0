package sim

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Demand mode's figures come from the stream: the fleet's own events (the
// autoscaler's FleetAutoscaled, the rollout's) and its game servers'
// events, folded in stream order as the projector folds them. Counts of
// servers (READY, ALLOCATED, live) change only at event times, so their
// integrals over the steady phase are exact.

// fleetHistory is what the demand fleet's own events say.
type fleetHistory struct {
	replicas  steps       // the replicas the autoscaler set
	decisions []time.Time // when it changed them (FleetAutoscaled)

	revision         int64 // the revision rolled out; 0 if none
	started, ended   time.Time
	completed        bool
	halted           bool
	haltReason       string
	progressedEvents int
}

// readFleetHistory reads the fleet's events.
func readFleetHistory(hist []events.Envelope) fleetHistory {
	var f fleetHistory
	for _, e := range hist {
		switch d := e.Data.(type) {
		case *eventsv1.FleetAutoscaled:
			f.replicas.set(e.Time, float64(d.GetToReplicas()))
			f.decisions = append(f.decisions, e.Time)
		case *eventsv1.FleetRolloutStarted:
			if f.revision == 0 {
				f.revision, f.started = d.GetRevision(), e.Time
			}
		case *eventsv1.FleetRolloutProgressed:
			f.progressedEvents++
		case *eventsv1.FleetRolloutCompleted:
			if d.GetRevision() == f.revision && f.ended.IsZero() {
				f.completed, f.ended = true, e.Time
			}
		case *eventsv1.FleetRolloutHalted:
			if d.GetRevision() == f.revision && f.ended.IsZero() {
				f.halted, f.ended, f.haltReason = true, e.Time, d.GetReason()
			}
		}
	}
	return f
}

// during reports whether t falls within the rollout (until now if it has
// not ended).
func (f fleetHistory) during(t time.Time) bool {
	return f.revision != 0 && !t.Before(f.started) && (f.ended.IsZero() || !t.After(f.ended))
}

// serverHistory is what the demand fleet's game-server events say.
type serverHistory struct {
	ready, busy, live steps // READY; ALLOCATED or RESERVED; neither absent nor TERMINATED

	replaced         int      // servers the rollout stopped (FLEET_UPDATED)
	busyUpdated      []string // ALLOCATED or RESERVED servers the rollout stopped: a bug
	busyScaledDown   []string // ALLOCATED or RESERVED servers the autoscaler stopped: a bug
	outdatedAllocs   int      // allocations of older-revision servers during the rollout
	outdatedReadyEnd time.Time
	foldErrors       []string
}

// readServerHistory folds the fleet's game-server events.
func readServerHistory(hist []events.Envelope, f fleetHistory) serverHistory {
	var h serverHistory
	states := map[string]*eventsv1.GameServerState{}
	broken := map[string]bool{}
	var ready, busy, live []delta
	for _, e := range hist {
		if broken[e.Aggregate] {
			continue
		}
		prev := states[e.Aggregate]
		next, err := events.ApplyGameServer(prev, e)
		if err != nil {
			broken[e.Aggregate] = true
			h.foldErrors = append(h.foldErrors, fmt.Sprintf("%s at %d: %v", e.Aggregate, e.Sequence, err))
			continue
		}
		states[e.Aggregate] = next
		was, is := prev.GetLifecycle(), next.GetLifecycle()
		count := func(into *[]delta, in func(eventsv1.Lifecycle) bool) {
			switch a, b := in(was), in(is); {
			case !a && b:
				*into = append(*into, delta{e.Time, 1})
			case a && !b:
				*into = append(*into, delta{e.Time, -1})
			}
		}
		count(&ready, isReady)
		count(&busy, isBusy)
		count(&live, isLive)
		h.judge(e, prev, next, f)
	}
	h.ready, h.busy, h.live = sumDeltas(ready), sumDeltas(busy), sumDeltas(live)
	return h
}

// judge checks one event against the rules of autoscaling and rollouts:
// servers with a match are never stopped by either.
func (h *serverHistory) judge(e events.Envelope, prev, next *eventsv1.GameServerState, f fleetHistory) {
	was := prev.GetLifecycle()
	outdated := f.revision != 0 && prev.GetRevision() < f.revision
	if isReady(was) && !isReady(next.GetLifecycle()) && outdated && f.during(e.Time) {
		h.outdatedReadyEnd = e.Time
	}
	if _, ok := e.Data.(*eventsv1.GameServerAllocated); ok && outdated && f.during(e.Time) {
		h.outdatedAllocs++
	}
	// A server's stop is its ShutdownRequested, or its termination when
	// nothing asked it to stop first.
	var reason eventsv1.Reason
	switch d := e.Data.(type) {
	case *eventsv1.ShutdownRequested:
		reason = d.GetReason()
	case *eventsv1.GameServerTerminated:
		if was != eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN {
			reason = d.GetReason()
		}
	}
	switch reason {
	case eventsv1.Reason_REASON_FLEET_UPDATED:
		h.replaced++
		if isBusy(was) {
			h.busyUpdated = append(h.busyUpdated, e.Aggregate)
		}
	case eventsv1.Reason_REASON_FLEET_SCALED_DOWN:
		if isBusy(was) {
			h.busyScaledDown = append(h.busyScaledDown, e.Aggregate)
		}
	}
}

func isReady(l eventsv1.Lifecycle) bool { return l == eventsv1.Lifecycle_LIFECYCLE_READY }

func isBusy(l eventsv1.Lifecycle) bool {
	return l == eventsv1.Lifecycle_LIFECYCLE_ALLOCATED || l == eventsv1.Lifecycle_LIFECYCLE_RESERVED
}

func isLive(l eventsv1.Lifecycle) bool {
	return l != eventsv1.Lifecycle_LIFECYCLE_UNSPECIFIED && l != eventsv1.Lifecycle_LIFECYCLE_TERMINATED
}

// measureDemand fills rep.Demand from the stream and the matchmaker's
// record, and adds what broke the rules to rep.Failures.
func (w *world) measureDemand(ctx context.Context, rep *Report) error {
	o, d := w.opts, w.demand
	fleetHist, err := w.stack.Store.History(ctx, events.MustSubject(events.FleetName(demandFleet)), 0)
	if err != nil {
		return fmt.Errorf("sim: read the history of %s: %w", demandFleet, err)
	}
	serverHist, err := w.stack.Store.History(ctx, events.FleetGameServersSubject(demandFleet), 0)
	if err != nil {
		return fmt.Errorf("sim: read the game servers of %s: %w", demandFleet, err)
	}
	f := readFleetHistory(fleetHist)
	h := readServerHistory(serverHist, f)
	rolloutAt, attempts, rolloutErr := d.snapshot()
	a, b := d.steadyBegan, d.steadyEnded
	secs := b.Sub(a).Seconds()

	dr := &DemandReport{Curve: o.Demand.String(), Buffer: o.Buffer, MinReplicas: o.MinReplicas, MaxReplicas: o.MaxReplicas,
		ExpectedMatches: o.Demand.Matches(0, b.Sub(a)), MatchLength: o.MatchLength.Seconds()}
	for _, at := range attempts {
		dr.Attempted++
		switch at.result {
		case allocOK:
			dr.Succeeded++
		case allocNoReady:
			dr.NoReadyGameServer++
		default:
			dr.OtherFailures++
		}
	}
	if dr.Attempted > 0 {
		dr.NoReadyPercent = 100 * float64(dr.NoReadyGameServer) / float64(dr.Attempted)
	}
	dr.IdleReadyServerSeconds, dr.AllocatedServerSeconds = h.ready.integral(a, b), h.busy.integral(a, b)
	dr.MeanReady, dr.MeanAllocated = dr.IdleReadyServerSeconds/secs, dr.AllocatedServerSeconds/secs
	dr.PeakReady, dr.PeakAllocated = int(h.ready.peak(a, b)), int(h.busy.peak(a, b))
	dr.PeakReplicas, dr.PeakServers = int(f.replicas.peak(a, b)), int(h.live.peak(a, b))
	for _, t := range f.decisions {
		if !t.Before(a) && t.Before(b) {
			dr.ScaleDecisions++
		}
	}
	dr.AllocatedScaledDown = len(h.busyScaledDown)
	dr.MatchesInterrupted = w.mm.interrupted.Load()
	dr.AllocationLatency = w.mm.allocLatency.summary()
	dr.Rollout = rolloutReport(f, h, rolloutAt, rolloutErr, attempts, a)
	dr.Timeline = timeline(o.Demand, a, b, attempts, h, f)
	rep.Demand = dr

	fail := func(format string, args ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...)) }
	if len(h.foldErrors) > 0 {
		fail("the history of %s does not fold: %s", demandFleet, strings.Join(h.foldErrors[:min(3, len(h.foldErrors))], "; "))
	}
	if o.RolloutAt >= 0 {
		ro := dr.Rollout
		switch {
		case rolloutErr != nil:
			fail("rollout: the template change was refused: %v", rolloutErr)
		case !ro.Started:
			fail("rollout: no FleetRolloutStarted in the history of %s", demandFleet)
		case ro.Halted:
			fail("rollout: halted: %s", ro.HaltReason)
		case !ro.Completed:
			fail("rollout: not completed")
		}
	}
	if n := len(h.busyUpdated); n > 0 {
		fail("the rollout stopped %d servers that held a match (FLEET_UPDATED while ALLOCATED or RESERVED), e.g. %s", n, h.busyUpdated[0])
	}
	if n := len(h.busyScaledDown); n > 0 {
		fail("the autoscaler stopped %d servers that held a match (FLEET_SCALED_DOWN while ALLOCATED or RESERVED), e.g. %s", n, h.busyScaledDown[0])
	}
	if dr.MatchesInterrupted > 0 {
		fail("%d matches were cut short on servers the simulation gave no fault", dr.MatchesInterrupted)
	}
	return nil
}

// rolloutReport describes the rollout from the histories.
func rolloutReport(f fleetHistory, h serverHistory, askedAt time.Time, askErr error, attempts []attempt, began time.Time) RolloutReport {
	r := RolloutReport{Revision: f.revision, Started: f.revision != 0, Completed: f.completed, Halted: f.halted, HaltReason: f.haltReason,
		Replaced: h.replaced, AllocatedTouched: len(h.busyUpdated), OutdatedAllocations: h.outdatedAllocs, ProgressEvents: f.progressedEvents}
	if askErr != nil {
		r.Error = askErr.Error()
	}
	if !askedAt.IsZero() {
		r.RequestedAtSeconds = askedAt.Sub(began).Seconds()
	}
	if !r.Started {
		return r
	}
	r.StartedAtSeconds = f.started.Sub(began).Seconds()
	if f.completed {
		r.Seconds = f.ended.Sub(f.started).Seconds()
	}
	if !h.outdatedReadyEnd.IsZero() {
		r.OutdatedReadyGoneSeconds = h.outdatedReadyEnd.Sub(f.started).Seconds()
	}
	for _, at := range attempts {
		if f.during(at.at) {
			r.Attempts++
			if at.result == allocNoReady {
				r.NoReadyGameServer++
			}
		}
	}
	return r
}

// timeline cuts the steady phase into about a dozen windows of whole
// seconds. An attempt is counted in the window it began in (one that
// began a moment after the phase ended, in the last).
func timeline(c Curve, a, b time.Time, attempts []attempt, h serverHistory, f fleetHistory) []DemandWindow {
	width := max(time.Second, time.Duration(math.Ceil(b.Sub(a).Seconds()/12))*time.Second)
	var out []DemandWindow
	for from := a; from.Before(b); from = from.Add(width) {
		to := from.Add(width)
		if to.After(b) {
			to = b
		}
		secs := to.Sub(from).Seconds()
		out = append(out, DemandWindow{FromSeconds: from.Sub(a).Seconds(), ToSeconds: to.Sub(a).Seconds(),
			Demand:    c.Matches(from.Sub(a), to.Sub(a)) / secs,
			MeanReady: h.ready.integral(from, to) / secs, MeanAllocated: h.busy.integral(from, to) / secs,
			PeakReplicas: int(f.replicas.peak(from, to)),
			Rollout:      f.revision != 0 && f.started.Before(to) && (f.ended.IsZero() || f.ended.After(from))})
	}
	for _, at := range attempts {
		if len(out) == 0 {
			break
		}
		i := min(max(int(at.at.Sub(a)/width), 0), len(out)-1)
		out[i].Attempts++
		if at.result == allocNoReady {
			out[i].NoReadyGameServer++
		}
	}
	return out
}
