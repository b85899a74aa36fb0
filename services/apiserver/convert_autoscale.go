package apiserver

import (
	"fmt"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// autoscalingFromAPI maps a fleet's autoscaling to its event form.
func autoscalingFromAPI(a *tetherv1.FleetAutoscaling) *eventsv1.FleetAutoscaling {
	if a == nil {
		return nil
	}
	out := &eventsv1.FleetAutoscaling{MinReplicas: a.GetMinReplicas(), MaxReplicas: a.GetMaxReplicas(),
		Buffer: bufferFromAPI(a.GetBuffer()), Webhook: webhookFromAPI(a.GetWebhook())}
	for _, s := range a.GetSchedules() {
		out.Schedules = append(out.Schedules, &eventsv1.AutoscalingSchedule{Name: s.GetName(), StartTime: s.GetStartTime(), EndTime: s.GetEndTime(),
			MinReplicas: s.GetMinReplicas(), MaxReplicas: s.GetMaxReplicas(), Buffer: bufferFromAPI(s.GetBuffer()), Webhook: webhookFromAPI(s.GetWebhook())})
	}
	return out
}

func bufferFromAPI(b *tetherv1.BufferPolicy) *eventsv1.BufferPolicy {
	if b == nil {
		return nil
	}
	return &eventsv1.BufferPolicy{BufferSize: b.GetBufferSize()}
}

func webhookFromAPI(w *tetherv1.WebhookPolicy) *eventsv1.WebhookPolicy {
	if w == nil {
		return nil
	}
	return &eventsv1.WebhookPolicy{Url: w.GetUrl(), TimeoutMs: w.GetTimeoutMs()}
}

// autoscalingToAPI maps a fleet's autoscaling to the API's form.
func autoscalingToAPI(a *eventsv1.FleetAutoscaling) *tetherv1.FleetAutoscaling {
	if a == nil {
		return nil
	}
	out := &tetherv1.FleetAutoscaling{MinReplicas: a.GetMinReplicas(), MaxReplicas: a.GetMaxReplicas(),
		Buffer: bufferToAPI(a.GetBuffer()), Webhook: webhookToAPI(a.GetWebhook())}
	for _, s := range a.GetSchedules() {
		out.Schedules = append(out.Schedules, &tetherv1.AutoscalingSchedule{Name: s.GetName(), StartTime: s.GetStartTime(), EndTime: s.GetEndTime(),
			MinReplicas: s.GetMinReplicas(), MaxReplicas: s.GetMaxReplicas(), Buffer: bufferToAPI(s.GetBuffer()), Webhook: webhookToAPI(s.GetWebhook())})
	}
	return out
}

func bufferToAPI(b *eventsv1.BufferPolicy) *tetherv1.BufferPolicy {
	if b == nil {
		return nil
	}
	return &tetherv1.BufferPolicy{BufferSize: b.GetBufferSize()}
}

func webhookToAPI(w *eventsv1.WebhookPolicy) *tetherv1.WebhookPolicy {
	if w == nil {
		return nil
	}
	return &tetherv1.WebhookPolicy{Url: w.GetUrl(), TimeoutMs: w.GetTimeoutMs()}
}

// scalingInWords says an autoscaling decision in one line: "2 → 5 at …
// by buffer 3: 2 allocated + 0 reserved + buffer 3 (3) = 5".
func scalingInWords(d *eventsv1.FleetAutoscaled, at time.Time) string {
	if d == nil {
		return ""
	}
	s := fmt.Sprintf("%d → %d", d.GetFromReplicas(), d.GetToReplicas())
	if !at.IsZero() {
		s += " at " + at.UTC().Format(time.RFC3339)
	}
	return s + " by " + d.GetPolicy() + ": " + d.GetReason()
}
