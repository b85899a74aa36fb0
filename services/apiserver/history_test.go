package apiserver_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// appendAt appends events to one aggregate, each at its own time.
func (s *stack) appendAt(name string, at []time.Time, msgs ...proto.Message) []uint64 {
	s.t.Helper()
	var seqs []uint64
	for i, m := range msgs {
		seq, err := s.Store.Append(s.Ctx, events.MustSubject(name), events.AnySequence, events.New(name, at[i], m))
		if err != nil {
			s.t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

func times(start time.Time, n int, step time.Duration) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = start.Add(time.Duration(i) * step)
	}
	return out
}

// hungServer is the history of a server that hangs and is replaced.
func hungServer() []proto.Message {
	ev := &eventsv1.Evidence{MissedPeriods: 3, PeriodSeconds: 5, FailureThreshold: 3, LastHeartbeatTime: timestamppb.New(time.Date(2026, 11, 23, 10, 0, 4, 0, time.UTC))}
	return []proto.Message{
		&eventsv1.GameServerScheduled{Host: "hosts/h1"},
		&eventsv1.ProcessStarted{Pid: 42, Attempt: 1},
		&eventsv1.SdkConnected{Transport: "grpc-stream"},
		&eventsv1.GameServerReady{},
		&eventsv1.SdkDisconnected{Kind: eventsv1.DisconnectKind_DISCONNECT_KIND_RESET},
		&eventsv1.HealthDegraded{MissedPeriods: 1, FailureThreshold: 3, PeriodSeconds: 5},
		&eventsv1.HealthDegraded{MissedPeriods: 2, FailureThreshold: 3, PeriodSeconds: 5},
		&eventsv1.HealthDegraded{MissedPeriods: 3, FailureThreshold: 3, PeriodSeconds: 5},
		&eventsv1.GameServerUnhealthy{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, Evidence: ev},
		&eventsv1.ShutdownRequested{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, Evidence: ev},
		&eventsv1.ProcessExited{Signal: "terminated", Attempt: 1},
		&eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, Evidence: ev},
	}
}

func TestExplainNamesReasonEvidenceAndChain(t *testing.T) {
	s := newStack(t, stackOptions{})
	name := events.GameServerName("arena", "gs-hung")
	msgs := hungServer()
	s.appendAt(name, times(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), len(msgs), time.Second), msgs...)

	r := s.do(http.MethodGet, "/v1/"+name+":explain", nil)
	if r.status != http.StatusOK {
		t.Fatalf("explain: %d %v", r.status, r.body)
	}
	if r.str("state") != "TERMINATED" || r.str("reason") != "HEALTH_CHECK_FAILED" || int(r.num("historyLength")) != len(msgs) {
		t.Fatalf("explain: %v", r.body)
	}
	ev := r.body["evidence"].(map[string]any)
	if ev["missedPeriods"] != float64(3) || ev["periodSeconds"] != float64(5) || ev["lastHeartbeatTime"] == nil {
		t.Fatalf("evidence: %v", ev)
	}
	var got []string
	for _, e := range r.body["events"].([]any) {
		got = append(got, e.(map[string]any)["type"].(string))
	}
	want := "SdkDisconnected HealthDegraded HealthDegraded HealthDegraded GameServerUnhealthy ShutdownRequested ProcessExited GameServerTerminated"
	if strings.Join(got, " ") != want {
		t.Fatalf("chain %v, want %s", got, want)
	}
	if sum := r.str("summary"); !strings.Contains(sum, "HEALTH_CHECK_FAILED") || !strings.Contains(sum, "3 heartbeat periods of 5 s missed") {
		t.Fatalf("summary: %q", sum)
	}
	if r := s.do(http.MethodGet, "/v1/fleets/arena/gameServers/gs-nothing:explain", nil); r.status != http.StatusNotFound {
		t.Fatalf("explain of a server with no history: %d", r.status)
	}
}

// stateAt at a time between two events returns the state after the first
// and before the second; by sequence likewise.
func TestStateAtBetweenTwoEvents(t *testing.T) {
	s := newStack(t, stackOptions{})
	name := events.GameServerName("arena", "gs-1")
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	seqs := s.appendAt(name, times(t0, 3, 10*time.Second),
		&eventsv1.GameServerScheduled{Host: "hosts/h1"}, &eventsv1.ProcessStarted{Pid: 7, Attempt: 1}, &eventsv1.GameServerReady{})
	tests := []struct {
		name, query, lifecycle string
		count                  int
	}{
		{"before the first event", "time=" + url.QueryEscape(t0.Add(-time.Second).Format(time.RFC3339)), "", 0},
		{"between scheduled and started", "time=" + url.QueryEscape(t0.Add(5*time.Second).Format(time.RFC3339)), "SCHEDULED", 1},
		{"at the start exactly", "time=" + url.QueryEscape(t0.Add(10*time.Second).Format(time.RFC3339)), "STARTING", 2},
		{"between started and ready", "time=" + url.QueryEscape(t0.Add(15*time.Second).Format(time.RFC3339)), "STARTING", 2},
		{"by sequence", fmt.Sprintf("sequence=%d", seqs[1]), "STARTING", 2},
		{"after all", fmt.Sprintf("sequence=%d", seqs[2]), "READY", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(http.MethodGet, "/v1/"+name+":stateAt?"+tt.query, nil)
			if r.status != http.StatusOK {
				t.Fatalf("stateAt: %d %v", r.status, r.body)
			}
			state, _ := r.body["state"].(map[string]any)
			if got, _ := state["lifecycle"].(string); got != tt.lifecycle || int(r.num("eventCount")) != tt.count {
				t.Fatalf("lifecycle %q after %v events; want %q after %d", got, r.body["eventCount"], tt.lifecycle, tt.count)
			}
		})
	}
	if r := s.do(http.MethodGet, "/v1/"+name+":stateAt", nil); r.status != http.StatusBadRequest {
		t.Fatalf("stateAt without time or sequence: %d", r.status)
	}
}

// What a history read cannot answer as asked is refused, naming the field
// (issue 39, item 5): a state at both a time and a sequence (the sequence
// won, silently), and a type filter naming no event type (an empty list,
// where events:watch refused it).
func TestHistoryRefusesQueriesItCannotAnswer(t *testing.T) {
	s := newStack(t, stackOptions{})
	name := events.GameServerName("arena", "gs-1")
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	seqs := s.appendAt(name, times(t0, 2, 10*time.Second), &eventsv1.GameServerScheduled{Host: "hosts/h1"}, &eventsv1.ProcessStarted{Pid: 7, Attempt: 1})
	at := url.QueryEscape(t0.Add(5 * time.Second).Format(time.RFC3339))
	for _, tc := range []struct{ name, path, field string }{
		{"a state at a time and a sequence", fmt.Sprintf("/v1/%s:stateAt?time=%s&sequence=%d", name, at, seqs[1]), "sequence"},
		{"events of an unknown type", "/v1/" + name + "/events?types=GameServerReady&types=GameServerReadied", "types"},
		{"events of an empty type", "/v1/" + name + "/events?types=", "types"},
		{"a watch of an unknown type", "/v1/events:watch?types=GameServerReadied", "types"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodGet, tc.path, nil)
			if streamed, ok := r.body["error"].(map[string]any); ok { // a watch's error, as a stream's
				r.body = streamed
			}
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tc.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %v", r.status, r.reason(), r.fieldViolation(), tc.field, r.body)
			}
		})
	}
	if r := s.do(http.MethodGet, "/v1/"+name+"/events?types=ProcessStarted", nil); r.status != http.StatusOK || len(r.body["events"].([]any)) != 1 {
		t.Fatalf("events of a known type: %d %v", r.status, r.body)
	}
}

func TestListEventsFiltersAndPages(t *testing.T) {
	s := newStack(t, stackOptions{})
	name := events.GameServerName("arena", "gs-hung")
	msgs := hungServer()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	s.appendAt(name, times(t0, len(msgs), time.Second), msgs...)

	var all []string
	token := ""
	for page := 0; page < 10; page++ {
		r := s.do(http.MethodGet, "/v1/"+name+"/events?pageSize=5&pageToken="+url.QueryEscape(token), nil)
		if r.status != http.StatusOK {
			t.Fatalf("page %d: %d %v", page, r.status, r.body)
		}
		for _, e := range r.body["events"].([]any) {
			all = append(all, e.(map[string]any)["type"].(string))
		}
		if token = r.str("nextPageToken"); token == "" {
			break
		}
	}
	if len(all) != len(msgs) || all[0] != "GameServerScheduled" || all[len(all)-1] != "GameServerTerminated" {
		t.Fatalf("paged history: %v", all)
	}
	r := s.do(http.MethodGet, "/v1/"+name+"/events?types=HealthDegraded&types=GameServerUnhealthy", nil)
	if n := len(r.body["events"].([]any)); n != 4 {
		t.Fatalf("type filter: %d events", n)
	}
	from, to := t0.Add(4*time.Second).Format(time.RFC3339), t0.Add(6*time.Second).Format(time.RFC3339)
	r = s.do(http.MethodGet, "/v1/"+name+"/events?startTime="+url.QueryEscape(from)+"&endTime="+url.QueryEscape(to), nil)
	if n := len(r.body["events"].([]any)); n != 2 {
		t.Fatalf("time range [4 s, 6 s): %d events, want 2", n)
	}
}

// A player session's history is the part of its game session's that
// concerns it.
func TestPlayerSessionHistory(t *testing.T) {
	s := newStack(t, stackOptions{})
	gsess := events.GameSessionName("gsess-h")
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	s.appendAt(gsess, times(t0, 5, time.Second),
		&eventsv1.GameSessionCreated{GameServer: "fleets/arena/gameServers/gs-1", Policy: &eventsv1.GameSessionPolicy{ReconnectWindowSeconds: 60},
			Players: []*eventsv1.PlayerSeat{{PlayerSession: "ps-a", PlayerId: "a"}, {PlayerSession: "ps-b", PlayerId: "b", Slot: 1}}},
		&eventsv1.PlayerAccepted{PlayerSession: "ps-a"},
		&eventsv1.PlayerAccepted{PlayerSession: "ps-b"},
		&eventsv1.PlayerDisconnected{PlayerSession: "ps-b", ReconnectDeadline: timestamppb.New(t0.Add(time.Minute))},
		&eventsv1.PlayerSessionCompleted{PlayerSession: "ps-b", Reason: eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_RECONNECT_WINDOW_EXPIRED},
	)
	r := s.do(http.MethodGet, "/v1/"+gsess+"/playerSessions/ps-b/events", nil)
	var got []string
	for _, e := range r.body["events"].([]any) {
		got = append(got, e.(map[string]any)["type"].(string))
	}
	if strings.Join(got, " ") != "GameSessionCreated PlayerAccepted PlayerDisconnected PlayerSessionCompleted" {
		t.Fatalf("ps-b history: %v", got)
	}
	x := s.do(http.MethodGet, "/v1/"+gsess+"/playerSessions/ps-b:explain", nil)
	if x.str("state") != "COMPLETED" || x.str("reason") != "RECONNECT_WINDOW_EXPIRED" {
		t.Fatalf("explain ps-b: %v", x.body)
	}
}

// Every event the API writes names its actor in the history: until the
// API authenticates callers, the replica that wrote it, as its producer.
func TestHistoryNamesTheActor(t *testing.T) {
	s := newStack(t, stackOptions{})
	if r := s.do(http.MethodPost, "/v1/fleets?fleetId=arena", arenaFleet(1)); r.status != http.StatusOK {
		t.Fatalf("create fleet: %d %v", r.status, r.body)
	}
	r := s.do(http.MethodGet, "/v1/fleets/arena/events", nil)
	evs, _ := r.body["events"].([]any)
	if r.status != http.StatusOK || len(evs) == 0 {
		t.Fatalf("history: %d %v", r.status, r.body)
	}
	for _, e := range evs {
		ev := e.(map[string]any)
		producer, _ := ev["producer"].(string)
		if !strings.HasPrefix(producer, "apiservers/") || ev["actor"] != producer {
			t.Errorf("%v: producer %q, actor %v", ev["type"], producer, ev["actor"])
		}
	}
}
