package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller/plan"
)

// A webhook autoscaling policy (docs/autoscaling.md) asks the studio's
// service for a fleet's replicas. The planner decides from the last answer
// (plan.WebhookAnswer, in the snapshot); the calls are made here, off the
// pass, so that a slow webhook never holds a pass up.

// webhookBody is what a webhook policy is sent: the fleet's status.
type webhookBody struct {
	Fleet             string `json:"fleet"`
	Replicas          int32  `json:"replicas"`
	ReadyReplicas     int    `json:"readyReplicas"`
	AllocatedReplicas int    `json:"allocatedReplicas"`
	ReservedReplicas  int    `json:"reservedReplicas"`
	StartingReplicas  int    `json:"startingReplicas"`
	MinReplicas       int32  `json:"minReplicas"`
	MaxReplicas       int32  `json:"maxReplicas"`
	Schedule          string `json:"schedule,omitempty"`
}

// webhookReply is what a webhook answers.
type webhookReply struct {
	Replicas *int `json:"replicas"`
}

// maxWebhookReply bounds a webhook's answer.
const maxWebhookReply = 64 << 10

// webhooks calls fleets' webhook policies off the passes: each pass asks
// for the fleets whose policy is a webhook (poll), a fleet's webhook is
// called when none of its calls is in flight and its last answer is older
// than the pass interval, and the pass plans with the last answer each
// fleet has.
type webhooks struct {
	client   *http.Client
	interval time.Duration
	now      func() time.Time

	mu       sync.Mutex
	answers  map[string]plan.WebhookAnswer // fleet → last answer
	inFlight map[string]bool
	wg       sync.WaitGroup
}

func newWebhooks(interval time.Duration, now func() time.Time) *webhooks {
	return &webhooks{client: &http.Client{}, interval: interval, now: now,
		answers: map[string]plan.WebhookAnswer{}, inFlight: map[string]bool{}}
}

// poll starts the calls due for fleets whose policy in force is a
// webhook, with the use the pass saw (servers, grouped by fleet only when
// a call is due), and returns the last answer of every such fleet. ctx
// bounds the calls (the leadership's).
func (w *webhooks) poll(ctx context.Context, fleets []projections.FleetRow, servers []projections.Row[*eventsv1.GameServerState], now time.Time) map[string]plan.WebhookAnswer {
	var byFleet map[string][]projections.Row[*eventsv1.GameServerState]
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]plan.WebhookAnswer{}
	wanted := map[string]bool{}
	for _, f := range fleets {
		a := f.State.GetSpec().GetAutoscaling()
		if a == nil {
			continue
		}
		policy := events.PolicyAt(a, now)
		if policy.Webhook == nil {
			continue
		}
		name := f.State.GetName()
		wanted[name] = true
		last, answered := w.answers[name]
		if answered {
			out[name] = last
		}
		if w.inFlight[name] || (answered && last.URL == policy.Webhook.GetUrl() && w.now().Sub(last.At) < w.interval) {
			continue
		}
		if byFleet == nil {
			byFleet = serversByFleet(servers)
		}
		use := plan.UseOf(byFleet[name])
		body := webhookBody{Fleet: name, Replicas: f.State.GetSpec().GetReplicas(), ReadyReplicas: use.Ready,
			AllocatedReplicas: use.Allocated, ReservedReplicas: use.Reserved, StartingReplicas: use.Starting,
			MinReplicas: policy.Min, MaxReplicas: policy.Max, Schedule: policy.Schedule}
		w.inFlight[name] = true
		w.wg.Add(1)
		go w.call(ctx, name, policy.Webhook, body)
	}
	for name := range w.answers {
		if !wanted[name] {
			delete(w.answers, name) // the fleet's policy is no webhook any more
		}
	}
	return out
}

// call asks one webhook and keeps its answer.
func (w *webhooks) call(ctx context.Context, fleet string, hook *eventsv1.WebhookPolicy, body webhookBody) {
	defer w.wg.Done()
	replicas, err := w.ask(ctx, hook, body)
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.inFlight, fleet)
	if ctx.Err() != nil {
		return // the leadership ended: not an answer
	}
	w.answers[fleet] = plan.WebhookAnswer{URL: hook.GetUrl(), At: w.now(), Replicas: replicas, Err: err}
}

// ask POSTs body to the webhook and reads its replica count.
func (w *webhooks) ask(ctx context.Context, hook *eventsv1.WebhookPolicy, body webhookBody) (int, error) {
	timeout := events.WebhookTimeout(hook)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.GetUrl(), bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return 0, fmt.Errorf("webhook: no answer within %s", timeout)
	}
	if err != nil {
		return 0, fmt.Errorf("webhook: %s", steadyError(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxWebhookReply+1))
	if err != nil {
		return 0, fmt.Errorf("webhook: read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("webhook: answered %s", resp.Status)
	}
	if len(raw) > maxWebhookReply {
		return 0, fmt.Errorf("webhook: answer larger than %d bytes", maxWebhookReply)
	}
	var reply webhookReply
	if err := json.Unmarshal(raw, &reply); err != nil {
		return 0, fmt.Errorf("webhook: answer is not JSON with replicas: %w", err)
	}
	if reply.Replicas == nil || *reply.Replicas < 0 {
		return 0, errors.New(`webhook: answer has no "replicas" of 0 or more`)
	}
	return *reply.Replicas, nil
}

// steadyError says a failed call the same way each time it fails the same
// way: a network error without its addresses (a connection's local port
// changes with every call), so that a run of failures is recorded once.
func steadyError(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op + ": " + op.Err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// reset forgets every answer, for a new leadership (after the calls of
// the last one ended).
func (w *webhooks) reset() {
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.answers, w.inFlight = map[string]plan.WebhookAnswer{}, map[string]bool{}
}
