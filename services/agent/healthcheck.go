package agent

import (
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// healthCheck applies a fleet's health contract and SDK disconnect grace
// (docs/architecture.md, "The failures it is built against", 1 and 4) to
// one process. It is pure: every method takes the time, so tests drive it
// with a fake clock.
//
// Health periods are counted from the later of (process start + initial
// delay) and the last health ping; each whole period without a ping is one
// missed period. A disconnect opens a grace window; the window only
// matters if it ends with no health ping since the disconnect.
//
// Periods, the grace window and the ready timeout count only the time the
// agent ran: its own pauses (pause) are left out, and after one nothing new
// is judged until the server has had settle to be heard from again.
type healthCheck struct {
	disabled  bool
	period    time.Duration
	threshold int32
	grace     time.Duration

	countFrom      time.Time // start + initial delay
	lastPing       time.Time // zero: no health ping yet
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
// start, the agent's pauses not counted). The caller asks only while the
// server is STARTING.
func (h *healthCheck) readyOverdue(now time.Time, pauses []pause) bool {
	if h.readyBy.IsZero() || h.readyReported || ranFor(pauses, h.started, now) < h.readyBy.Sub(h.started) ||
		h.settling(pauses, h.started, now) {
		return false
	}
	h.readyReported = true
	return true
}

// pinged notes a health ping; it reports whether it ends a degradation.
// One older than the last noted (two calls that crossed) changes nothing.
func (h *healthCheck) pinged(now time.Time) (resumed bool) {
	if now.Before(h.lastPing) {
		return false
	}
	h.lastPing = now
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

// missed returns the whole periods missed at now, counting only the time
// the agent ran. Within a period of the end of a pause since the count
// began, it returns no more than had run out before that pause: the
// server has a full period to be heard from again.
func (h *healthCheck) missed(now time.Time, pauses []pause) int32 {
	if h.disabled || h.period <= 0 {
		return 0
	}
	from := h.countFrom
	if h.lastPing.After(from) {
		from = h.lastPing
	}
	if !now.After(from) {
		return 0
	}
	n := int32(ranFor(pauses, from, now) / h.period)
	if resumed := resumedAfter(pauses, from); !resumed.IsZero() && now.Before(resumed.Add(h.period)) {
		n = min(n, int32(ranFor(pauses, from, resumed)/h.period))
	}
	return n
}

// settle is how long a server has, after the agent resumed from a pause,
// before anything new is judged of it: a health period, or the default
// period when the policy has none.
func (h *healthCheck) settle() time.Duration {
	if h.period > 0 {
		return h.period
	}
	return events.DefaultPeriodSeconds * time.Second
}

// settling reports whether now is within settle of the end of a pause
// that ended after since.
func (h *healthCheck) settling(pauses []pause, since, now time.Time) bool {
	resumed := resumedAfter(pauses, since)
	return !resumed.IsZero() && now.Before(resumed.Add(h.settle()))
}

// graceOver reports whether the disconnect window, not reported yet, has
// ended with no health ping since the disconnect: grace of the agent's
// running since the disconnect, and settle since its last pause.
func (h *healthCheck) graceOver(now time.Time, pauses []pause) bool {
	if h.disconnectedAt.IsZero() || h.graceReported || h.lastPing.After(h.disconnectedAt) || now.Before(h.disconnectedAt) {
		return false
	}
	return ranFor(pauses, h.disconnectedAt, now) >= h.grace && !h.settling(pauses, h.disconnectedAt, now)
}

// verdict is what the contract says at a moment.
type verdict struct {
	// missed is the number of missed periods to report (0: nothing new).
	missed int32
	// graceExpired is true once: the disconnect window ended with no
	// health ping since the disconnect.
	graceExpired bool
}

// due evaluates the contract at now, the agent's pauses being pauses, and
// marks what it returns as reported.
func (h *healthCheck) due(now time.Time, pauses []pause) verdict {
	var v verdict
	if m := h.missed(now, pauses); m > h.reported {
		v.missed, h.reported = m, m
	}
	if h.graceOver(now, pauses) {
		v.graceExpired, h.graceReported = true, true
	}
	return v
}
