package controller

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

var (
	t0       = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	template = &eventsv1.GameServerTemplate{Command: "/opt/game/server"}
	health   = &eventsv1.HealthPolicy{PeriodSeconds: 5, FailureThreshold: 3}
)

// fleetState is fleet "arena"; failingSince, if not zero, makes it failing
// since then with backoff until failingSince+10s, last counted failure at 50.
func fleetState(failingSince time.Time) *eventsv1.FleetState {
	f := &eventsv1.FleetState{Name: "fleets/arena", Spec: &eventsv1.FleetSpec{Replicas: 3, Template: template, Health: health}}
	if !failingSince.IsZero() {
		f.StartFailing = &eventsv1.FleetStartFailing{ConsecutiveFailures: 2, FailureSequence: 50,
			BackoffUntil: timestamppb.New(failingSince.Add(10 * time.Second))}
		f.StartConditionTime, f.CountedFailureSequence = timestamppb.New(failingSince), 50
	}
	return f
}

func TestFirstRead(t *testing.T) {
	failing := fleetState(t0)
	tests := []struct {
		name   string
		fleets []projections.FleetRow
		want   uint64
	}{
		{name: "no failing fleet: the checkpoint", fleets: []projections.FleetRow{{Row: projections.Row[*eventsv1.FleetState]{State: fleetState(time.Time{})}}}, want: 100},
		{name: "a failing fleet: its last failure counted", fleets: []projections.FleetRow{{Row: projections.Row[*eventsv1.FleetState]{State: failing}}}, want: 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstRead(tt.fleets, 100); got != tt.want {
				t.Errorf("firstRead = %d, want %d", got, tt.want)
			}
		})
	}
}
