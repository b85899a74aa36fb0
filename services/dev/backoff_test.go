package dev_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// fleetState folds a fleet's events from the stream.
func (s *stack) fleetState(id string) *eventsv1.FleetState {
	s.t.Helper()
	var st *eventsv1.FleetState
	for _, e := range s.history(events.FleetName(id)) {
		var err error
		if st, err = events.ApplyFleet(st, e); err != nil {
			s.t.Fatal(err)
		}
	}
	return st
}

// scheduled counts the game servers ever scheduled for a fleet.
func (s *stack) scheduled(fleet string) int {
	s.t.Helper()
	h, err := s.store.History(s.ctx, events.FleetGameServersSubject(fleet), 0)
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, e := range h {
		if e.Type == "GameServerScheduled" {
			n++
		}
	}
	return n
}

// A fleet whose command does not exist used to get a new server for every
// one that failed, each pass, for ever (60 servers in 30 s). Now its
// replacements back off: with a backoff longer than the test, the fleet
// keeps the servers it scheduled first, shows START_FAILING with the real
// agent's exec error, and fixing the template starts it at once.
func TestCommandNotFoundBacksOffAndRecoversWhenFixed(t *testing.T) {
	s := startStack(t, 1, func(o *dev.Options) {
		o.ControllerOptions = func(c *controller.Options) { c.StartBackoffBase, c.StartBackoffCap = time.Minute, time.Minute }
	})
	broken := fleetSpec(3, nil)
	broken["template"].(map[string]any)["command"] = "/nonexistent/tether-test-game"
	if code := s.rest("POST", "/v1/fleets?fleetId=broken", broken, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}

	var failing *eventsv1.FleetStartFailing
	wait.For(t, 15*time.Second, "the fleet to show its start failures", func() bool {
		failing = s.fleetState("broken").GetStartFailing()
		return failing.GetConsecutiveFailures() == 3
	})
	if failing.GetReason() != eventsv1.Reason_REASON_PROCESS_START_FAILED ||
		!strings.Contains(failing.GetLastError(), "/nonexistent/tether-test-game") || !strings.Contains(failing.GetLastError(), "no such file or directory") {
		t.Fatalf("fleet failing: %v, want PROCESS_START_FAILED with the exec error", failing)
	}
	// The API says so, as a condition of the fleet, once its views have the
	// events (the state above was folded from the stream).
	type condition struct{ Type, Status, Reason, Message string }
	var conds []condition
	wait.For(t, 10*time.Second, "the API to show the fleet's condition", func() bool {
		var fleet struct {
			Status struct{ Conditions []condition }
		}
		if code := s.rest("GET", "/v1/fleets/broken", nil, &fleet); code != http.StatusOK {
			t.Fatalf("get fleet: %d", code)
		}
		conds = fleet.Status.Conditions
		return len(conds) > 0
	})
	if c := conds; len(c) != 1 || c[0].Type != "START_FAILING" || c[0].Status != "True" ||
		c[0].Reason != "PROCESS_START_FAILED" || !strings.Contains(c[0].Message, "no such file or directory") {
		t.Fatalf("fleet conditions over REST %+v, want START_FAILING True with the exec error", c)
	}
	// Each controller pass (1 s) used to replace all three.
	wait.Holds(t, 5*time.Second, "no server scheduled during the backoff", func() bool { return s.scheduled("broken") == 3 })

	// Fixing the template lifts the backoff: a probe starts, is READY, and
	// the fleet recovers and fills up.
	fixed := fleetSpec(3, nil)
	if code := s.rest("PATCH", "/v1/fleets/broken?updateMask=template", map[string]any{"template": fixed["template"]}, nil); code != http.StatusOK {
		t.Fatalf("fix the template: %d", code)
	}
	wait.For(t, 20*time.Second, "3 READY servers after the fix", func() bool {
		return len(byState(s.gameServers("broken"), "READY")) == 3
	})
	st := s.fleetState("broken")
	if st.GetStartFailing() != nil || st.GetStartRecovered().GetConsecutiveFailures() != 3 {
		t.Fatalf("after the fix: failing %v, recovered %v", st.GetStartFailing(), st.GetStartRecovered())
	}
	if n := s.scheduled("broken"); n != 6 {
		// Seen once in CI under load (7): say what was scheduled, with
		// which command, and what the fleet went through.
		t.Errorf("%d servers scheduled in all, want 6 (3 broken, a probe, 2 more)", n)
		h, err := s.store.History(s.ctx, events.FleetGameServersSubject("broken"), 0)
		if err != nil {
			t.Fatal(err)
		}
		// Every event of the fleet's servers: whether one ended (and was
		// rightly replaced) or the controller started one more than it
		// needed, and on which views (the kept rows' sequence, below).
		for _, e := range h {
			if sc, ok := e.Data.(*eventsv1.GameServerScheduled); ok {
				t.Logf("seq %d %s scheduled at %s by %s, command %q, revision %d", e.Sequence, e.Aggregate, e.Time.Format(time.RFC3339Nano), e.Producer,
					sc.GetTemplate().GetCommand(), sc.GetRevision())
				continue
			}
			t.Logf("seq %d %s %s at %s by %s", e.Sequence, e.Aggregate, e.Type, e.Time.Format(time.RFC3339Nano), e.Producer)
		}
		for _, e := range s.history(events.FleetName("broken")) {
			t.Logf("fleet seq %d %s at %s", e.Sequence, e.Type, e.Time.Format(time.RFC3339Nano))
		}
	}
}
