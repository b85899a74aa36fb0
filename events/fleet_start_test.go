package events_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestStartBackoffDoublesUpToTheCap(t *testing.T) {
	b := events.StartBackoff{Base: time.Second, Cap: 5 * time.Minute}
	tests := []struct {
		name    string
		backoff events.StartBackoff
		n       int32
		want    time.Duration
	}{
		{name: "no failure", backoff: b, n: 0, want: 0},
		{name: "first failure waits base", backoff: b, n: 1, want: time.Second},
		{name: "second doubles", backoff: b, n: 2, want: 2 * time.Second},
		{name: "ninth", backoff: b, n: 9, want: 256 * time.Second},
		{name: "tenth is capped", backoff: b, n: 10, want: 5 * time.Minute},
		{name: "far past the cap", backoff: b, n: 1 << 30, want: 5 * time.Minute},
		{name: "cap below base", backoff: events.StartBackoff{Base: time.Minute, Cap: time.Second}, n: 3, want: time.Minute},
		{name: "huge cap does not overflow", backoff: events.StartBackoff{Base: time.Hour, Cap: 1<<63 - 1}, n: 200, want: 1<<63 - 1},
		{name: "no base, no wait", backoff: events.StartBackoff{Cap: time.Minute}, n: 4, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.backoff.After(tt.n); got != tt.want {
				t.Errorf("After(%d) = %s, want %s", tt.n, got, tt.want)
			}
		})
	}
}

// failure is a failure of game server gs-<n> at stream sequence seq.
func failure(n int, seq uint64) events.StartFailure {
	return events.StartFailure{GameServer: fleetName + "/gameServers/gs-" + string(rune('a'+n)), Reason: eventsv1.Reason_REASON_PROCESS_START_FAILED,
		Error: "fork/exec /nope: no such file or directory", Sequence: seq}
}

// fold applies msgs to state as events at time n, checked.
func fold(t *testing.T, state *eventsv1.FleetState, n int, msgs ...proto.Message) *eventsv1.FleetState {
	t.Helper()
	for _, m := range msgs {
		var err error
		if state, err = applyChecked(t, events.ApplyFleet, state, events.New(fleetName, at(n), m)); err != nil {
			t.Fatalf("ApplyFleet(%s): %v", events.TypeOf(m), err)
		}
	}
	return state
}

func TestDecideStartFailures(t *testing.T) {
	backoff := events.StartBackoff{Base: time.Second, Cap: time.Minute}
	fresh := createdFleet(t, minimalSpec())
	failing := fold(t, fresh, 5, &eventsv1.FleetStartFailing{ConsecutiveFailures: 3, FailureSequence: 40})
	tests := []struct {
		name      string
		state     *eventsv1.FleetState
		failures  []events.StartFailure
		want      *eventsv1.FleetStartFailing // nil: no event
		wantAfter time.Duration
	}{
		{name: "nothing seen", state: fresh},
		{name: "first failure", state: fresh, failures: []events.StartFailure{failure(0, 12)},
			want: &eventsv1.FleetStartFailing{ConsecutiveFailures: 1, GameServer: failure(0, 12).GameServer, FailureSequence: 12}, wantAfter: time.Second},
		{name: "three at once count three", state: fresh, failures: []events.StartFailure{failure(0, 12), failure(1, 15), failure(2, 14)},
			want: &eventsv1.FleetStartFailing{ConsecutiveFailures: 3, GameServer: failure(2, 14).GameServer, FailureSequence: 15}, wantAfter: 4 * time.Second},
		{name: "counted already", state: failing, failures: []events.StartFailure{failure(0, 39), failure(1, 40)}},
		{name: "adds to the run", state: failing, failures: []events.StartFailure{failure(0, 40), failure(1, 41)},
			want: &eventsv1.FleetStartFailing{ConsecutiveFailures: 4, GameServer: failure(1, 41).GameServer, FailureSequence: 41}, wantAfter: 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := events.DecideFleet(fleetName, tt.state, events.RecordStartFailures{Failures: tt.failures, At: at(100), Backoff: backoff})
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if len(out) != 0 {
					t.Fatalf("events = %v, want none", out)
				}
				return
			}
			if len(out) != 1 {
				t.Fatalf("events = %v, want one FleetStartFailing", types(out))
			}
			want := proto.CloneOf(tt.want)
			want.Reason, want.LastError = eventsv1.Reason_REASON_PROCESS_START_FAILED, "fork/exec /nope: no such file or directory"
			want.BackoffUntil = timestamppb.New(at(100).Add(tt.wantAfter))
			if !proto.Equal(out[0], want) {
				t.Errorf("event =\n%v\nwant\n%v", out[0], want)
			}
		})
	}
}

func TestStartFailingRunAndRecovery(t *testing.T) {
	backoff := events.StartBackoff{Base: time.Second, Cap: time.Minute}
	state := createdFleet(t, minimalSpec())
	decide := func(n int, cmd events.FleetCommand) {
		t.Helper()
		out, err := events.DecideFleet(fleetName, state, cmd)
		if err != nil {
			t.Fatal(err)
		}
		state = fold(t, state, n, out...)
	}
	decide(2, events.RecordStartFailures{Failures: []events.StartFailure{failure(0, 10)}, At: at(2), Backoff: backoff})
	decide(3, events.RecordStartFailures{Failures: []events.StartFailure{failure(1, 20)}, At: at(3), Backoff: backoff})
	f := state.GetStartFailing()
	if f.GetConsecutiveFailures() != 2 || !f.GetBackoffUntil().AsTime().Equal(at(5)) || state.GetCountedFailureSequence() != 20 {
		t.Fatalf("after two failures: %v (counted %d)", f, state.GetCountedFailureSequence())
	}
	if !state.GetStartConditionTime().AsTime().Equal(at(2)) {
		t.Errorf("condition time = %v, want the first failure's %v", state.GetStartConditionTime().AsTime(), at(2))
	}

	// A replicas change keeps the backoff; a template change lifts it.
	upd := func(n int, spec *eventsv1.FleetSpec, path string) {
		t.Helper()
		decide(n, events.UpdateFleet{Spec: spec, Paths: []string{path}})
	}
	upd(4, &eventsv1.FleetSpec{Replicas: 5}, "replicas")
	if state.GetStartFailing().GetBackoffUntil() == nil {
		t.Fatal("a replicas change lifted the backoff")
	}
	// So does a ready timeout set to the value its 0 stood for: the same
	// health contract, nothing that failed changed.
	upd(5, &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{ReadyTimeoutSeconds: events.DefaultReadyTimeoutSeconds}}, "health.ready_timeout_seconds")
	if state.GetStartFailing().GetBackoffUntil() == nil || state.GetSpec().GetHealth().GetReadyTimeoutSeconds() != events.DefaultReadyTimeoutSeconds {
		t.Fatalf("a ready timeout set to its default's value: backoff %v, spec's timeout %d; want the backoff kept, the spec changed",
			state.GetStartFailing().GetBackoffUntil(), state.GetSpec().GetHealth().GetReadyTimeoutSeconds())
	}
	fixed := minimalSpec()
	fixed.Template.Command = "/opt/game/fixed"
	upd(6, fixed, "template")
	if state.GetStartFailing() == nil || state.GetStartFailing().GetBackoffUntil() != nil {
		t.Fatalf("after a template change: %v, want still failing, no backoff", state.GetStartFailing())
	}

	decide(7, events.RecordStartRecovered{GameServer: "fleets/arena/gameServers/gs-ok"})
	want := &eventsv1.FleetStartRecovered{GameServer: "fleets/arena/gameServers/gs-ok", ConsecutiveFailures: 2}
	if state.GetStartFailing() != nil || !proto.Equal(state.GetStartRecovered(), want) || !state.GetStartConditionTime().AsTime().Equal(at(7)) {
		t.Fatalf("after recovery: failing %v, recovered %v, since %v", state.GetStartFailing(), state.GetStartRecovered(), state.GetStartConditionTime().AsTime())
	}
	if out, err := events.DecideFleet(fleetName, state, events.RecordStartRecovered{GameServer: "x"}); err != nil || len(out) != 0 {
		t.Fatalf("recovered twice: %v %v, want no event", types(out), err)
	}

	// Failures counted before are never counted again; a new one starts at 1.
	decide(8, events.RecordStartFailures{Failures: []events.StartFailure{failure(1, 20), failure(2, 30)}, At: at(8), Backoff: backoff})
	if f := state.GetStartFailing(); f.GetConsecutiveFailures() != 1 || f.GetFailureSequence() != 30 || state.GetStartRecovered() != nil ||
		!state.GetStartConditionTime().AsTime().Equal(at(8)) {
		t.Fatalf("a new run: %v, recovered %v", f, state.GetStartRecovered())
	}
}
