package dev_test

import (
	"context"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/platform/telemetry"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// TestJunkOnAServerStopsNothing: one undecodable message on a game
// server's subject (which a host's credentials could once publish there,
// and an admin's still can) stops none of its readers. Its agent still
// records the process's end, the controller replaces it, the projector
// dead-letters the message and goes on, allocation takes the fleet's other
// poisoned server and no dead one, and the server's history, explain and
// state answer. Before, the agent's writes retried for ever behind it, the
// dead server stayed READY and was allocated, and its history answered 500.
func TestJunkOnAServerStopsNothing(t *testing.T) {
	tel, err := telemetry.New(telemetry.Options{ServiceName: "tether-dev-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	s := startStack(t, 1, func(o *dev.Options) { o.MeterProvider, o.MetricsHandler = tel.MeterProvider, tel.MetricsHandler })
	if code := s.rest("POST", "/v1/fleets?fleetId=poison", fleetWithHealth(2, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var ready []gameServer
	wait.For(t, 30*time.Second, "2 servers READY", func() bool {
		ready = byState(s.gameServers("poison"), "READY")
		return len(ready) == 2
	})
	for _, g := range ready {
		if _, err := s.js.Publish(s.ctx, serverSubject(t, s.ctx, s.store, g.Name), []byte("not an envelope")); err != nil {
			t.Fatal(err)
		}
	}
	killed, kept := ready[0], ready[1]
	if err := syscall.Kill(killed.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, killed.Name+" TERMINATED with PROCESS_EXITED and replaced", func() bool {
		var ended, readyNow int
		for _, g := range s.gameServers("poison") {
			switch {
			case g.Name == killed.Name && g.State == "TERMINATED" && g.Reason == "PROCESS_EXITED":
				ended++
			case g.State == "READY" && g.Name != killed.Name:
				readyNow++
			}
		}
		return ended == 1 && readyNow == 2
	})

	// Every READY server is allocated once, the poisoned one too, and no
	// more: the dead one is not among them.
	allocated := map[string]bool{}
	for range 2 {
		a := s.allocate("poison")
		if a.GameServer.Name == killed.Name || allocated[a.GameServer.Name] {
			t.Fatalf("allocated %s (killed %s, allocated before %v)", a.GameServer.Name, killed.Name, allocated)
		}
		allocated[a.GameServer.Name] = true
	}
	if !allocated[kept.Name] {
		t.Fatalf("allocated %v, want the poisoned READY server %s among them", allocated, kept.Name)
	}
	if code := s.rest("POST", "/v1/fleets/poison/gameServers:allocate", map[string]any{}, nil); code != http.StatusTooManyRequests {
		t.Fatalf("a third allocation of 2 servers: %d, want 429", code)
	}

	var hist struct {
		Events []struct {
			Sequence string `json:"sequence"`
			Type     string `json:"type"`
		} `json:"events"`
	}
	if code := s.rest("GET", "/v1/"+killed.Name+"/events", nil, &hist); code != http.StatusOK {
		t.Fatalf("history of the poisoned server: %d", code)
	}
	for _, e := range hist.Events {
		if e.Type == events.UndecodableType || e.Type == "" {
			t.Fatalf("history lists the undecodable message: %+v", hist.Events)
		}
	}
	var x explanation
	if code := s.rest("GET", "/v1/"+killed.Name+":explain", nil, &x); code != http.StatusOK || x.State != "TERMINATED" || x.Reason != "PROCESS_EXITED" {
		t.Fatalf("explain the poisoned server: %d %+v", code, x)
	}
	last := hist.Events[len(hist.Events)-1].Sequence
	if _, err := strconv.ParseUint(last, 10, 64); err != nil {
		t.Fatalf("last sequence %q: %v", last, err)
	}
	if code := s.rest("GET", "/v1/"+killed.Name+":stateAt?sequence="+last, nil, nil); code != http.StatusOK {
		t.Fatalf("state of the poisoned server at %s: %d", last, code)
	}
	// The API's reads of the poisoned servers skipped the messages, and
	// counted them.
	skipped := 0.0
	for _, m := range find(s.scrape(), "tether_events_undecodable_skipped_total", nil) {
		v, err := strconv.ParseFloat(m.Value, 64)
		if err != nil {
			t.Fatal(err)
		}
		skipped += v
	}
	if skipped < 1 {
		t.Errorf("tether_events_undecodable_skipped_total = %v, want the messages the API's reads skipped", skipped)
	}
	var dead struct {
		DeadLetters []struct {
			Subject string `json:"subject"`
		} `json:"deadLetters"`
	}
	if code := s.rest("GET", "/v1/projections/deadLetters", nil, &dead); code != http.StatusOK || len(dead.DeadLetters) != 2 {
		t.Fatalf("dead letters: %d %+v, want the 2 messages", code, dead)
	}
}
