package events

import (
	"fmt"
	"math"
	"net/url"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Autoscaling (docs/autoscaling.md): a fleet with a FleetAutoscaling gets
// its replicas from its use. The rules here are pure; the controller
// gathers the inputs (the webhook's answer among them) and records each
// change as FleetAutoscaled, with the inputs, so that history answers
// "why did my fleet scale to 40?".

// DefaultWebhookTimeout is a webhook policy's timeout when it gives none.
const DefaultWebhookTimeout = time.Second

// ScalingPolicy is the autoscaling policy in force at a time: the fleet's,
// or a schedule's for its window.
type ScalingPolicy struct {
	// Schedule names the schedule in force; "" for the fleet's own policy.
	Schedule string
	// Min and Max bound the replicas.
	Min, Max int32
	// Buffer or Webhook is the policy.
	Buffer  *eventsv1.BufferPolicy
	Webhook *eventsv1.WebhookPolicy
}

// PolicyAt returns the policy of a at time now: the first schedule whose
// window holds now, else the fleet's own.
func PolicyAt(a *eventsv1.FleetAutoscaling, now time.Time) ScalingPolicy {
	for _, s := range a.GetSchedules() {
		if now.Before(s.GetStartTime().AsTime()) || !now.Before(s.GetEndTime().AsTime()) {
			continue
		}
		p := ScalingPolicy{Schedule: s.GetName(), Min: a.GetMinReplicas(), Max: a.GetMaxReplicas(), Buffer: s.GetBuffer(), Webhook: s.GetWebhook()}
		if s.GetMaxReplicas() > 0 {
			p.Min, p.Max = s.GetMinReplicas(), s.GetMaxReplicas()
		}
		return p
	}
	return ScalingPolicy{Min: a.GetMinReplicas(), Max: a.GetMaxReplicas(), Buffer: a.GetBuffer(), Webhook: a.GetWebhook()}
}

// String says the policy in words: "buffer 3", "buffer 20%", "webhook
// http://…", after "schedule launch: " when a schedule's.
func (p ScalingPolicy) String() string {
	s := "buffer " + p.Buffer.GetBufferSize()
	if p.Webhook != nil {
		s = "webhook " + p.Webhook.GetUrl()
	}
	if p.Schedule != "" {
		s = "schedule " + p.Schedule + ": " + s
	}
	return s
}

// Clamp bounds n by the policy's min and max.
func (p ScalingPolicy) Clamp(n int) int {
	return min(max(n, int(p.Min)), int(p.Max))
}

// ParseBufferSize reads a buffer size: a count ("5") or a percentage of
// the allocated servers ("20%", at most 1000%).
func ParseBufferSize(s string) (n int, percent bool, err error) {
	n, percent, err = parseCountOrPercent(s, 1000)
	if err != nil {
		return 0, false, fmt.Errorf("buffer size %w", err)
	}
	return n, percent, nil
}

// BufferFor is the buffer a buffer size asks for above allocated servers:
// the count, or the percentage of allocated rounded up and at least 1 (a
// fleet with no match running would otherwise have no server to start
// one).
func BufferFor(size string, allocated int) (int, error) {
	n, percent, err := ParseBufferSize(size)
	if err != nil || !percent || n == 0 {
		return n, err
	}
	return max(1, int(math.Ceil(float64(allocated)*float64(n)/100))), nil
}

// validateAutoscaling checks a fleet's autoscaling; field paths are the
// API's.
func validateAutoscaling(a *eventsv1.FleetAutoscaling) error {
	if a == nil {
		return nil
	}
	const field = "fleet.autoscaling"
	if err := validateBounds(field, a.GetMinReplicas(), a.GetMaxReplicas(), true); err != nil {
		return err
	}
	if err := validatePolicy(field, a.GetBuffer(), a.GetWebhook()); err != nil {
		return err
	}
	if len(a.GetSchedules()) > maxSchedules {
		return Invalid(field+".schedules", "at most %d, got %d", maxSchedules, len(a.GetSchedules()))
	}
	for i, s := range a.GetSchedules() {
		f := fmt.Sprintf("%s.schedules[%d]", field, i)
		if s.GetStartTime() == nil || s.GetEndTime() == nil || !s.GetStartTime().AsTime().Before(s.GetEndTime().AsTime()) {
			return Invalid(f, "needs a start_time before its end_time")
		}
		if s.GetMinReplicas() != 0 || s.GetMaxReplicas() != 0 {
			if err := validateBounds(f, s.GetMinReplicas(), s.GetMaxReplicas(), true); err != nil {
				return err
			}
		}
		if err := validatePolicy(f, s.GetBuffer(), s.GetWebhook()); err != nil {
			return err
		}
		if len(s.GetName()) > MaxLabelValueBytes || !printable(s.GetName()) {
			return Invalid(f+".name", "must be at most %d bytes of printable UTF-8", MaxLabelValueBytes)
		}
	}
	return nil
}

// maxSchedules bounds a fleet's autoscaling schedules.
const maxSchedules = 32

func validateBounds(field string, lo, hi int32, needMax bool) error {
	switch {
	case lo < 0:
		return Invalid(field+".min_replicas", "must not be negative, got %d", lo)
	case needMax && hi < 1:
		return Invalid(field+".max_replicas", "is required: at least 1")
	case hi > MaxReplicas:
		return Invalid(field+".max_replicas", "at most %d, got %d", MaxReplicas, hi)
	case lo > hi:
		return Invalid(field+".min_replicas", "%d is above max_replicas %d", lo, hi)
	}
	return nil
}

func validatePolicy(field string, b *eventsv1.BufferPolicy, w *eventsv1.WebhookPolicy) error {
	switch {
	case (b == nil) == (w == nil):
		return Invalid(field, "needs exactly one policy: buffer or webhook")
	case b != nil:
		if _, _, err := ParseBufferSize(b.GetBufferSize()); err != nil {
			return Invalid(field+".buffer.buffer_size", "%v", err)
		}
	default:
		u, err := url.Parse(w.GetUrl())
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(w.GetUrl()) > 2048 {
			return Invalid(field+".webhook.url", "%q is not an http:// or https:// URL", w.GetUrl())
		}
		if w.GetTimeoutMs() < 0 || w.GetTimeoutMs() > 30_000 {
			return Invalid(field+".webhook.timeout_ms", "must be between 0 (1000) and 30000, got %d", w.GetTimeoutMs())
		}
	}
	return nil
}

// WebhookTimeout is a webhook policy's timeout.
func WebhookTimeout(w *eventsv1.WebhookPolicy) time.Duration {
	if w.GetTimeoutMs() <= 0 {
		return DefaultWebhookTimeout
	}
	return time.Duration(w.GetTimeoutMs()) * time.Millisecond
}

// RecordAutoscale records an autoscaling decision: the replicas it sets
// (Decision.ToReplicas) with its inputs. A decision that keeps the
// replicas produces no event, except FleetAutoscaleRecovered after
// failures.
type RecordAutoscale struct {
	// Decision is the decision with its inputs; FromReplicas is filled
	// from the fleet.
	Decision *eventsv1.FleetAutoscaled
}

// RecordAutoscaleFailure records that the policy gave no count; the same
// error as the run's last recorded one produces no event.
type RecordAutoscaleFailure struct {
	// Policy is the policy in force, in words.
	Policy string
	// Error is what went wrong.
	Error string
}

func (RecordAutoscale) fleetCommand()        {}
func (RecordAutoscaleFailure) fleetCommand() {}

// decideAutoscale decides RecordAutoscale and RecordAutoscaleFailure.
func decideAutoscale(state *eventsv1.FleetState, cmd FleetCommand) []proto.Message {
	var out []proto.Message
	switch c := cmd.(type) {
	case RecordAutoscale:
		if f := state.GetAutoscaleFailing(); f != nil {
			out = append(out, &eventsv1.FleetAutoscaleRecovered{Policy: c.Decision.GetPolicy()})
		}
		if c.Decision.GetToReplicas() != state.GetSpec().GetReplicas() {
			d := proto.CloneOf(c.Decision)
			d.FromReplicas = state.GetSpec().GetReplicas()
			out = append(out, d)
		}
	case RecordAutoscaleFailure:
		if f := state.GetAutoscaleFailing(); f != nil && f.GetError() == c.Error && f.GetPolicy() == c.Policy {
			return nil
		}
		out = append(out, &eventsv1.FleetAutoscaleFailed{Policy: c.Policy, Error: c.Error, Replicas: state.GetSpec().GetReplicas()})
	}
	return out
}
