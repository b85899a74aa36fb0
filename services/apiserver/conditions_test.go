package apiserver

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func TestFleetConditions(t *testing.T) {
	since := timestamppb.New(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	until := timestamppb.New(time.Date(2026, 12, 1, 10, 0, 8, 0, time.UTC))
	const gs = "fleets/arena/gameServers/gs-1"
	tests := []struct {
		name  string
		state *eventsv1.FleetState
		want  []*tetherv1.FleetCondition
	}{
		{name: "never failed: no condition", state: &eventsv1.FleetState{Name: "fleets/arena"}},
		{name: "failing", state: &eventsv1.FleetState{Name: "fleets/arena", StartConditionTime: since,
			StartFailing: &eventsv1.FleetStartFailing{ConsecutiveFailures: 4, GameServer: gs, Reason: eventsv1.Reason_REASON_PROCESS_START_FAILED,
				LastError: "fork/exec /nope: no such file or directory", BackoffUntil: until, FailureSequence: 99}},
			want: []*tetherv1.FleetCondition{{Type: "START_FAILING", Status: "True", Reason: "PROCESS_START_FAILED",
				Message: "fork/exec /nope: no such file or directory", LastTransitionTime: since, BackoffUntil: until,
				ConsecutiveFailures: 4, GameServer: gs}}},
		{name: "failing, backoff lifted by a template change", state: &eventsv1.FleetState{Name: "fleets/arena", StartConditionTime: since,
			StartFailing: &eventsv1.FleetStartFailing{ConsecutiveFailures: 2, GameServer: gs, Reason: eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY}},
			want: []*tetherv1.FleetCondition{{Type: "START_FAILING", Status: "True", Reason: "PROCESS_CRASHED_BEFORE_READY",
				LastTransitionTime: since, ConsecutiveFailures: 2, GameServer: gs}}},
		{name: "recovered", state: &eventsv1.FleetState{Name: "fleets/arena", StartConditionTime: since,
			StartRecovered: &eventsv1.FleetStartRecovered{GameServer: gs, ConsecutiveFailures: 4}},
			want: []*tetherv1.FleetCondition{{Type: "START_FAILING", Status: "False", Reason: "READY",
				Message: gs + " became READY", LastTransitionTime: since, GameServer: gs}}},
		{name: "nil state", state: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fleetConditions(tt.state)
			if len(got) != len(tt.want) {
				t.Fatalf("conditions = %v, want %v", got, tt.want)
			}
			for i := range got {
				if !proto.Equal(got[i], tt.want[i]) {
					t.Errorf("condition %d =\n%v\nwant\n%v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
