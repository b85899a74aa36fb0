package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller/plan"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// webhookFleet is fleet arena with replicas, asking a webhook at url.
func webhookFleet(replicas int32, url string) []projections.FleetRow {
	f := &eventsv1.FleetState{Name: "fleets/arena", Spec: &eventsv1.FleetSpec{Replicas: replicas,
		Autoscaling: &eventsv1.FleetAutoscaling{MaxReplicas: 10, Webhook: &eventsv1.WebhookPolicy{Url: url}}}}
	return []projections.FleetRow{{Row: projections.Row[*eventsv1.FleetState]{State: f, Sequence: 1}}}
}

// arenaServer is game server id of fleet arena on host a, at sequence seq.
func arenaServer(id string, l eventsv1.Lifecycle, seq uint64) projections.Row[*eventsv1.GameServerState] {
	return projections.Row[*eventsv1.GameServerState]{State: &eventsv1.GameServerState{
		Name: "fleets/arena/gameServers/" + id, Lifecycle: l, Host: "hosts/a"}, Sequence: seq}
}

// The webhook is sent the fleet's status and its answer is kept; a
// failure is an answer too, with the error. Calls run off the pass.
func TestWebhooksAskAndKeepTheAnswer(t *testing.T) {
	var mu sync.Mutex // guards got, answer and status, shared with the handler
	var got webhookBody
	answer := `{"replicas": 7}`
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body webhookBody
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("decode: %v", err)
		}
		mu.Lock()
		got = body
		st, ans := status, answer
		mu.Unlock()
		w.WriteHeader(st)
		_, _ = w.Write([]byte(ans))
	}))
	defer srv.Close()
	w := newWebhooks(time.Millisecond, time.Now)
	fleets := webhookFleet(2, srv.URL)
	servers := []projections.Row[*eventsv1.GameServerState]{
		arenaServer("gs-1", eventsv1.Lifecycle_LIFECYCLE_ALLOCATED, 1), arenaServer("gs-2", eventsv1.Lifecycle_LIFECYCLE_READY, 2)}
	// ask forgets the answers so far, once the calls in flight have ended
	// (reset), so that the answer it waits for comes from a call made
	// after the server's answer last changed.
	ask := func() plan.WebhookAnswer {
		t.Helper()
		w.reset()
		var ans plan.WebhookAnswer
		wait.For(t, 5*time.Second, "an answer", func() bool {
			a, ok := w.poll(context.Background(), fleets, servers, time.Now())["fleets/arena"]
			ans = a
			return ok
		})
		return ans
	}
	if a := ask(); a.Err != nil || a.Replicas != 7 || a.URL != srv.URL {
		t.Fatalf("answer %+v, want 7", a)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.Fleet != "fleets/arena" || got.Replicas != 2 || got.AllocatedReplicas != 1 || got.ReadyReplicas != 1 || got.MaxReplicas != 10 {
		t.Fatalf("webhook was sent %+v", got)
	}
	for _, tc := range []struct {
		status int
		body   string
		err    string
	}{
		{http.StatusServiceUnavailable, `{}`, "503"},
		{http.StatusOK, `{"count": 3}`, `no "replicas"`},
		{http.StatusOK, `not json`, "not JSON"},
		{http.StatusOK, `{"replicas": -1}`, `no "replicas"`},
	} {
		status, answer = tc.status, tc.body
		mu.Unlock()
		a := ask()
		mu.Lock()
		if a.Err == nil || !strings.Contains(a.Err.Error(), tc.err) {
			t.Fatalf("answer to %d %s: %+v, want an error with %q", tc.status, tc.body, a, tc.err)
		}
	}
	w.reset()
}

// A webhook that cannot be reached fails the same way every time: the
// error names no port, so the run of failures is recorded once.
func TestWebhookErrorsAreSteady(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	w := newWebhooks(time.Millisecond, time.Now)
	hook := &eventsv1.WebhookPolicy{Url: url, TimeoutMs: 500}
	var errs []string
	for range 3 {
		_, err := w.ask(context.Background(), hook, webhookBody{})
		if err == nil {
			t.Fatal("a closed server answered")
		}
		errs = append(errs, err.Error())
	}
	if errs[0] != errs[1] || errs[1] != errs[2] || strings.Contains(errs[0], "127.0.0.1") {
		t.Fatalf("errors %q: want the same text, without addresses", errs)
	}
}
