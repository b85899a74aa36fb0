package plan

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Autoscaling (docs/autoscaling.md) is a planning step: for a fleet with a
// FleetAutoscaling, planAutoscale turns the policy in force and the
// fleet's servers into a replica count, recorded as FleetAutoscaled with
// its inputs before planFleet brings the fleet there in the same pass.
// Each policy is a function of its own, chosen by an explicit switch: a
// policy the planner does not know is refused, never taken for another.
// A webhook policy's answer is in the snapshot: the controller calls the
// studio's service off the pass (a slow webhook never holds a pass up)
// and keeps the last answer for the planner.

// ErrUnknownPolicy is why the planner refuses to autoscale a fleet whose
// policy in force is neither a buffer nor a webhook: the fleet keeps its
// size, and the executor logs the refusal.
var ErrUnknownPolicy = errors.New("the autoscaling policy in force is none the planner knows (buffer or webhook)")

// WebhookAnswer is a webhook policy's last answer.
type WebhookAnswer struct {
	// URL is the webhook asked.
	URL string
	// At is when the answer came.
	At time.Time
	// Replicas is the count it answered, if Err is nil.
	Replicas int
	// Err is why the call failed: no answer in time, an HTTP error, an
	// answer without a replica count.
	Err error
}

// planAutoscale decides a fleet's replicas from its autoscaling policy and
// returns the decided events with the fleet as they leave it (f itself
// when nothing changes).
func (p Planner) planAutoscale(s Snapshot, f *eventsv1.FleetState, rows []projections.Row[*eventsv1.GameServerState], out *Plan) ([]proto.Message, *eventsv1.FleetState) {
	a := f.GetSpec().GetAutoscaling()
	if a == nil {
		return nil, f
	}
	name := f.GetName()
	policy := events.PolicyAt(a, s.Now)
	use := UseOf(rows)
	d := &eventsv1.FleetAutoscaled{Policy: policy.String(), Allocated: int32(use.Allocated), Reserved: int32(use.Reserved),
		Ready: int32(use.Ready), Starting: int32(use.Starting), MinReplicas: policy.Min, MaxReplicas: policy.Max}
	var (
		cmd events.FleetCommand
		err error
	)
	switch {
	case policy.Webhook != nil:
		ans, ok := s.Webhooks[name]
		cmd = webhookReplicas(policy, ans, ok, d)
	case policy.Buffer != nil:
		cmd, err = bufferReplicas(policy, use, d)
	case policy.Schedule != "":
		err = fmt.Errorf("schedule %s: %w", policy.Schedule, ErrUnknownPolicy)
	default:
		err = ErrUnknownPolicy
	}
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("autoscale %s: %w", name, err))
		return nil, f
	}
	return p.decideFleetSteps(s, f, cmd, out)
}

// webhookReplicas is a webhook policy's command: the replicas of its last
// answer (ans, if answered) within the policy's bounds, recorded in d, or
// its failure; nil while it has not answered (the fleet keeps its size).
func webhookReplicas(policy events.ScalingPolicy, ans WebhookAnswer, answered bool, d *eventsv1.FleetAutoscaled) events.FleetCommand {
	if !answered || ans.URL != policy.Webhook.GetUrl() {
		return nil // no answer yet: the fleet keeps its size
	}
	if ans.Err != nil {
		return events.RecordAutoscaleFailure{Policy: policy.String(), Error: ans.Err.Error()}
	}
	to := policy.Clamp(ans.Replicas)
	d.WebhookReplicas, d.ToReplicas = int32(ans.Replicas), int32(to)
	d.Reason = fmt.Sprintf("the webhook answered %d replicas at %s", ans.Replicas, ans.At.Format(time.RFC3339))
	if to != ans.Replicas {
		d.Reason += fmt.Sprintf(", bounded to %d..%d", policy.Min, policy.Max)
	}
	return events.RecordAutoscale{Decision: d}
}

// bufferReplicas is a buffer policy's command: the servers holding a
// match (use) and the buffer above them, within the policy's bounds,
// recorded in d. A buffer size it cannot read is an error.
func bufferReplicas(policy events.ScalingPolicy, use FleetUse, d *eventsv1.FleetAutoscaled) (events.FleetCommand, error) {
	buffer, err := events.BufferFor(policy.Buffer.GetBufferSize(), use.Allocated+use.Reserved)
	if err != nil {
		return nil, err
	}
	want := use.Allocated + use.Reserved + buffer
	to := policy.Clamp(want)
	d.Buffer, d.ToReplicas = int32(buffer), int32(to)
	d.Reason = fmt.Sprintf("%d allocated + %d reserved + buffer %d (%s) = %d", use.Allocated, use.Reserved, buffer, policy.Buffer.GetBufferSize(), want)
	if to != want {
		d.Reason += fmt.Sprintf(", bounded to %d..%d", policy.Min, policy.Max)
	}
	return events.RecordAutoscale{Decision: d}, nil
}
