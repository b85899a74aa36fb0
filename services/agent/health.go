package agent

import (
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// healthCheck applies a fleet's health contract (DESIGN.md §1 failure 4) and
// SDK disconnect grace to one process. It is pure: every method takes the
// time, so tests drive it with a fake clock.
//
// Heartbeat periods are counted from the later of (process start + initial
// delay) and the last heartbeat; each whole period without a heartbeat is
// one missed period. A disconnect opens a grace window; the window only
// matters if it ends with no heartbeat since the disconnect.
type healthCheck struct {
	disabled  bool
	period    time.Duration
	threshold int32
	grace     time.Duration

	countFrom      time.Time // start + initial delay
	lastBeat       time.Time // zero: no heartbeat yet
	reported       int32     // missed periods already reported
	disconnectedAt time.Time // zero while connected
	graceReported  bool

	started       time.Time // the process's start
	readyBy       time.Time // the process must have said Ready by then; zero: no deadline
	readyReported bool
}

func newHealthCheck(policy *eventsv1.HealthPolicy, grace time.Duration, started time.Time) *healthCheck {
	h := &healthCheck{
		disabled:  policy.GetDisabled(),
		period:    time.Duration(policy.GetPeriodSeconds()) * time.Second,
		threshold: policy.GetFailureThreshold(),
		grace:     grace,
		started:   started,
		countFrom: started.Add(time.Duration(policy.GetInitialDelaySeconds()) * time.Second),
	}
	if !h.disabled {
		h.readyBy = started.Add(events.ReadyTimeout(policy))
	}
	return h
}

// readyOverdue reports, once, that a process still starting has not said
// Ready by its deadline (the policy's ready timeout from the process's
// start). The caller asks only while the server is STARTING.
func (h *healthCheck) readyOverdue(now time.Time) bool {
	if h.readyBy.IsZero() || h.readyReported || now.Before(h.readyBy) {
		return false
	}
	h.readyReported = true
	return true
}

// heartbeat notes a heartbeat; it reports whether it ends a degradation.
// One older than the last noted (two calls that crossed) changes nothing.
func (h *healthCheck) heartbeat(now time.Time) (resumed bool) {
	if now.Before(h.lastBeat) {
		return false
	}
	h.lastBeat = now
	resumed = h.reported > 0
	h.reported = 0
	return resumed
}

// disconnected opens the grace window.
func (h *healthCheck) disconnected(now time.Time) {
	h.disconnectedAt, h.graceReported = now, false
}

// connected closes the grace window.
func (h *healthCheck) connected() { h.disconnectedAt = time.Time{} }

// missed returns the whole periods missed at now.
func (h *healthCheck) missed(now time.Time) int32 {
	if h.disabled || h.period <= 0 {
		return 0
	}
	from := h.countFrom
	if h.lastBeat.After(from) {
		from = h.lastBeat
	}
	if !now.After(from) {
		return 0
	}
	return int32(now.Sub(from) / h.period)
}

// verdict is what the contract says at a moment.
type verdict struct {
	// missed is the number of missed periods to report (0: nothing new).
	missed int32
	// graceExpired is true once: the disconnect window ended with no
	// heartbeat since the disconnect.
	graceExpired bool
}

// due evaluates the contract at now and marks what it returns as reported.
func (h *healthCheck) due(now time.Time) verdict {
	var v verdict
	if m := h.missed(now); m > h.reported {
		v.missed, h.reported = m, m
	}
	if !h.disconnectedAt.IsZero() && !h.graceReported && !now.Before(h.disconnectedAt.Add(h.grace)) &&
		!h.lastBeat.After(h.disconnectedAt) {
		v.graceExpired, h.graceReported = true, true
	}
	return v
}
