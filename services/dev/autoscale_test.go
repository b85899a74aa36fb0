package dev_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// mostLive is the most game servers of a fleet live (not TERMINATED) at
// once, from the fleet's history (eachMoment).
func (s *stack) mostLive(fleet string) int {
	s.t.Helper()
	most := 0
	s.eachMoment(fleet, 0, func(states map[string]*eventsv1.GameServerState) {
		most = max(most, len(states)-countIn(states, endedStates...))
	})
	return most
}

// A fleet with a buffer of 3 keeps 3 READY servers above its allocated
// ones: 3 at first, and after 5 allocations 3 READY again with 5
// ALLOCATED, never more servers than maxReplicas (8, from the history),
// each change an event with its inputs that the fleet's explanation
// names.
func TestBufferPolicyKeepsReadyServersAboveAllocated(t *testing.T) {
	s := startStack(t, 2) // 2 hosts of 4 slots
	spec := fleetSpec(1, nil)
	spec["autoscaling"] = map[string]any{"minReplicas": 0, "maxReplicas": 8, "buffer": map[string]any{"bufferSize": "3"}}
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 20*time.Second, "3 READY servers", func() bool { return len(byState(s.gameServers("arena"), "READY")) == 3 })
	for i := range 5 {
		deadline := time.Now().Add(20 * time.Second)
		for {
			code := s.rest("POST", "/v1/fleets/arena/gameServers:allocate", map[string]any{}, nil)
			if code == http.StatusOK {
				break
			}
			if code != http.StatusTooManyRequests || time.Now().After(deadline) {
				t.Fatalf("allocation %d: %d", i+1, code)
			}
			wait.For(t, 10*time.Second, "a READY server to allocate", func() bool { return len(byState(s.gameServers("arena"), "READY")) > 0 })
		}
	}
	wait.For(t, 30*time.Second, "5 ALLOCATED and 3 READY", func() bool {
		list := s.gameServers("arena")
		return len(byState(list, "ALLOCATED")) == 5 && len(byState(list, "READY")) == 3
	})
	if most := s.mostLive("arena"); most > 8 {
		t.Fatalf("the fleet had %d servers at once, above maxReplicas 8", most)
	}
	var last *eventsv1.FleetAutoscaled
	for _, e := range s.history("fleets/arena") {
		if d, ok := e.Data.(*eventsv1.FleetAutoscaled); ok {
			if d.GetToReplicas() > 8 {
				t.Fatalf("autoscaled to %d, above maxReplicas 8", d.GetToReplicas())
			}
			last = d
		}
	}
	if last.GetToReplicas() != 8 || last.GetAllocated() != 5 || last.GetBuffer() != 3 || last.GetPolicy() != "buffer 3" {
		t.Fatalf("last decision %v, want 8 from 5 allocated and a buffer of 3", last)
	}
	var x struct {
		Summary   string   `json:"summary"`
		Decisions []string `json:"decisions"`
	}
	if code := s.rest("GET", "/v1/fleets/arena:explain", nil, &x); code != http.StatusOK || len(x.Decisions) == 0 {
		t.Fatalf("explain: %d %+v", code, x)
	}
	if want := "5 allocated + 0 reserved + buffer 3 (3) = 8"; !strings.Contains(x.Decisions[0], want) || !strings.Contains(x.Summary, want) {
		t.Fatalf("explanation %+v does not name the last decision (%s)", x, want)
	}
}

// A webhook that fails leaves the fleet at its size, and the failure is in
// the fleet's history and its AUTOSCALING_FAILED condition; once it
// answers, the fleet takes its count.
func TestWebhookFailureKeepsTheSize(t *testing.T) {
	healthy := make(chan bool, 1)
	healthy <- false
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := <-healthy
		healthy <- ok
		if !ok {
			http.Error(w, "scaler down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"replicas": 2}`))
	}))
	defer hook.Close()
	s := startStack(t, 1)
	spec := fleetSpec(1, nil)
	spec["autoscaling"] = map[string]any{"maxReplicas": 4, "webhook": map[string]any{"url": hook.URL, "timeoutMs": 500}}
	if code := s.rest("POST", "/v1/fleets?fleetId=hooked", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var failed *eventsv1.FleetAutoscaleFailed
	wait.For(t, 20*time.Second, "the webhook's failure in the fleet's history", func() bool {
		for _, e := range s.history("fleets/hooked") {
			if d, ok := e.Data.(*eventsv1.FleetAutoscaleFailed); ok {
				failed = d
			}
		}
		return failed != nil
	})
	if !strings.Contains(failed.GetError(), "503") || failed.GetReplicas() != 1 {
		t.Fatalf("failure %v, want the 503 and the kept size 1", failed)
	}
	wait.For(t, 20*time.Second, "1 READY server, the size kept", func() bool { return len(byState(s.gameServers("hooked"), "READY")) == 1 })
	var f struct {
		Replicas int `json:"replicas"`
		Status   struct{ Conditions []fleetCondition }
	}
	wait.For(t, 10*time.Second, "the AUTOSCALING_FAILED condition", func() bool {
		if code := s.rest("GET", "/v1/fleets/hooked", nil, &f); code != http.StatusOK {
			t.Fatalf("get fleet: %d", code)
		}
		for _, c := range f.Status.Conditions {
			if c.Type == "AUTOSCALING_FAILED" && c.Status == "True" && strings.Contains(c.Message, "503") {
				return true
			}
		}
		return false
	})
	if f.Replicas != 1 {
		t.Fatalf("replicas %d while the webhook fails, want 1 kept", f.Replicas)
	}
	<-healthy
	healthy <- true
	wait.For(t, 20*time.Second, "2 READY servers once the webhook answers", func() bool { return len(byState(s.gameServers("hooked"), "READY")) == 2 })
	types := map[string]int{}
	for _, e := range s.history("fleets/hooked") {
		types[e.Type]++
	}
	if types["FleetAutoscaleFailed"] != 1 || types["FleetAutoscaleRecovered"] != 1 || types["FleetAutoscaled"] != 1 {
		t.Fatalf("fleet events %v, want one failure (recorded once), one recovery, one scaling", types)
	}
}
