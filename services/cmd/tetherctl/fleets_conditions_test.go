package main

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func TestFleetTableShowsConditionsThatHold(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	failing := &tetherv1.FleetCondition{Type: "START_FAILING", Status: "True", Reason: "PROCESS_START_FAILED",
		Message: "fork/exec /nope: no such file or directory", LastTransitionTime: timestamppb.New(now.Add(-90 * time.Second)),
		BackoffUntil: timestamppb.New(now.Add(40 * time.Second)), ConsecutiveFailures: 7}
	recovered := &tetherv1.FleetCondition{Type: "START_FAILING", Status: "False", Reason: "READY", LastTransitionTime: timestamppb.New(now)}
	tests := []struct {
		name      string
		condition *tetherv1.FleetCondition
		want      string // the line under the table; "" for none
	}{
		{name: "failing", condition: failing,
			want: "arena: START_FAILING for 90s, 7 in a row, PROCESS_START_FAILED, next start in 40s: fork/exec /nope: no such file or directory\n"},
		{name: "recovered: no line", condition: recovered},
		{name: "no condition", condition: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &tetherv1.Fleet{Name: "fleets/arena", Replicas: 3, Status: &tetherv1.FleetStatus{}}
			if tt.condition != nil {
				f.Status.Conditions = []*tetherv1.FleetCondition{tt.condition}
			}
			a := &app{now: func() time.Time { return now }}
			var out bytes.Buffer
			a.fleetTable(&out, f)
			lines := bytes.SplitAfterN(out.Bytes(), []byte("\n"), 3)
			got := ""
			if len(lines) == 3 {
				got = string(lines[2])
			}
			if got != tt.want {
				t.Errorf("under the table: %q, want %q\nwhole output:\n%s", got, tt.want, out.String())
			}
		})
	}
}
