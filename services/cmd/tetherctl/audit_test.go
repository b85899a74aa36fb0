package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func TestAuditHistoryExplainState(t *testing.T) {
	s := newStack(t)
	const name = "fleets/arena/gameServers/gs-crash"
	ev := &eventsv1.Evidence{Signal: "killed", StartAttempts: 1, LastHeartbeatTime: timestamppb.New(time.Now())}
	s.appendEvents(name, &eventsv1.GameServerScheduled{Host: "hosts/h1"}, &eventsv1.ProcessStarted{Pid: 9, Attempt: 1})
	ready := s.appendEvents(name, &eventsv1.GameServerReady{})
	s.appendEvents(name, &eventsv1.ProcessExited{Signal: "killed", Attempt: 1},
		&eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_EXITED, Evidence: ev})

	out := s.ok("audit", "history", "arena/gs-crash")
	for _, want := range []string{"GameServerScheduled", "ProcessStarted", "GameServerReady", "ProcessExited", "GameServerTerminated", "+0.000s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("history lacks %q:\n%s", want, out)
		}
	}
	if out := s.ok("audit", "history", name, "--type", "ProcessExited"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "ProcessExited") {
		t.Fatalf("history --type ProcessExited:\n%s", out)
	}

	out = s.ok("audit", "explain", "arena/gs-crash")
	for _, want := range []string{"is TERMINATED", ">> PROCESS_EXITED <<", `signal = "killed"`, "ProcessExited", "GameServerTerminated", "+0.000s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("explain lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "GameServerReady") {
		t.Fatalf("the chain starts after the server was last fine:\n%s", out)
	}
	var x struct {
		Reason string `json:"reason"`
		Events []any  `json:"events"`
	}
	if err := json.Unmarshal([]byte(s.ok("-o", "json", "audit", "explain", name)), &x); err != nil || x.Reason != "PROCESS_EXITED" || len(x.Events) != 2 {
		t.Fatalf("explain -o json: %+v %v", x, err)
	}

	out = s.ok("audit", "state", name, "--sequence", ready)
	if !strings.Contains(out, "after 3 events") || !strings.Contains(out, "lifecycle: READY") {
		t.Fatalf("state --sequence:\n%s", out)
	}
	if out := s.ok("audit", "state", name, "--at", "1h"); !strings.Contains(out, "did not exist yet") {
		t.Fatalf("state an hour ago:\n%s", out)
	}
	for _, args := range [][]string{{"audit", "state", name}, {"audit", "explain", "nonsense"}, {"audit", "history", name, "--from", "yesterday"}} {
		if r := s.run(args...); r.code != 1 || !strings.HasPrefix(r.stderr, "error: ") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// An explanation without a reason (a fleet's, say) says so in words, not
// as an empty verdict set off: `Reason: >> - <<` before.
func TestExplainWithoutAReasonSaysNone(t *testing.T) {
	var b strings.Builder
	explainText(&b, &tetherv1.Explanation{Name: "fleets/lobby", State: "ACTIVE", HistoryLength: 1}, true)
	out := b.String()
	if !strings.Contains(out, "Reason:    none\n") || strings.Contains(out, ">>") {
		t.Errorf("explanation without a reason:\n%s", out)
	}
	b.Reset()
	explainText(&b, &tetherv1.Explanation{Name: "fleets/arena/gameServers/gs-1", State: "TERMINATED", Reason: "PROCESS_EXITED"}, false)
	if !strings.Contains(b.String(), "Reason:    >> PROCESS_EXITED <<\n") {
		t.Errorf("explanation with a reason:\n%s", b.String())
	}
}
