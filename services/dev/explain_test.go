package dev_test

import (
	"net/http"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/wait"
)

// explanation is the REST shape of :explain that tests read.
type explanation struct {
	State    string         `json:"state"`
	Reason   string         `json:"reason"`
	Evidence map[string]any `json:"evidence"`
	Summary  string         `json:"summary"`
	Events   []struct {
		Sequence string `json:"sequence"`
		Type     string `json:"type"`
	} `json:"events"`
}

// After a crash, a hang and a scale-down, explain names each terminated
// server's reason and evidence, and its chain is the end of its history in
// the stream.
func TestExplainCrashHangAndScaleDown(t *testing.T) {
	s := startStack(t, 2)
	for fleet, spec := range map[string]map[string]any{
		"crash": fleetWithHealth(1, nil),
		"hang":  fleetWithHealth(1, map[string]string{"TETHER_EXAMPLE_STOP_HEARTBEAT_AFTER": "1500ms"}),
		"scale": fleetWithHealth(2, nil),
	} {
		if code := s.rest("POST", "/v1/fleets?fleetId="+fleet, spec, nil); code != http.StatusOK {
			t.Fatalf("create fleet %s: %d", fleet, code)
		}
	}
	wait.For(t, 20*time.Second, "the crash and scale fleets READY", func() bool {
		return len(byState(s.gameServers("crash"), "READY")) == 1 && len(byState(s.gameServers("scale"), "READY")) == 2
	})
	crashed := byState(s.gameServers("crash"), "READY")[0]
	if err := syscall.Kill(crashed.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := s.rest("PATCH", "/v1/fleets/scale?updateMask=replicas", map[string]any{"replicas": 1}, nil); code != http.StatusOK {
		t.Fatalf("scale down: %d", code)
	}
	terminated := func(fleet, reason string) string {
		var name string
		wait.For(t, 30*time.Second, fleet+" server terminated with "+reason, func() bool {
			for _, g := range byState(s.gameServers(fleet), "TERMINATED") {
				if g.Reason == reason {
					name = g.Name
					return true
				}
			}
			return false
		})
		return name
	}
	tests := []struct {
		fleet, reason string
		evidence      func(map[string]any) bool
		chain         []string // types the chain must hold, in order
	}{
		{"crash", "PROCESS_EXITED", func(e map[string]any) bool { return e["signal"] == "killed" },
			[]string{"ProcessExited", "GameServerTerminated"}},
		{"hang", "HEALTH_CHECK_FAILED", func(e map[string]any) bool { return e["missedPeriods"] == float64(2) && e["lastHeartbeatTime"] != nil },
			[]string{"HealthDegraded", "HealthDegraded", "GameServerUnhealthy", "ShutdownRequested", "ProcessExited", "GameServerTerminated"}},
		{"scale", "FLEET_SCALED_DOWN", func(e map[string]any) bool { r, _ := e["requestedBy"].(string); return len(r) > len("controllers/") },
			[]string{"ShutdownRequested", "ProcessExited", "GameServerTerminated"}},
	}
	for _, tt := range tests {
		t.Run(tt.fleet, func(t *testing.T) {
			name := terminated(tt.fleet, tt.reason)
			var x explanation
			if code := s.rest("GET", "/v1/"+name+":explain", nil, &x); code != http.StatusOK {
				t.Fatalf("explain: %d", code)
			}
			if x.State != "TERMINATED" || x.Reason != tt.reason || !tt.evidence(x.Evidence) {
				t.Fatalf("explain: state %s reason %s evidence %v", x.State, x.Reason, x.Evidence)
			}
			var types []string
			for _, e := range x.Events {
				types = append(types, e.Type)
			}
			at := 0
			for _, want := range tt.chain {
				i := slices.Index(types[at:], want)
				if i < 0 {
					t.Fatalf("chain %v lacks %v in order", types, tt.chain)
				}
				at += i + 1
			}
			// The chain is the end of the server's history in the stream.
			h := s.history(name)
			if len(x.Events) == 0 || len(x.Events) > len(h) {
				t.Fatalf("chain of %d events, history of %d", len(x.Events), len(h))
			}
			tail := h[len(h)-len(x.Events):]
			for i, e := range x.Events {
				if e.Sequence != itoa(tail[i].Sequence) || e.Type != tail[i].Type {
					t.Fatalf("chain event %d is %s@%s, stream has %s@%d", i, e.Type, e.Sequence, tail[i].Type, tail[i].Sequence)
				}
			}
			if h[len(h)-len(x.Events)-1].Type == "ProcessExited" {
				t.Fatalf("the chain starts in the middle of the failure: %v", types)
			}
		})
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
