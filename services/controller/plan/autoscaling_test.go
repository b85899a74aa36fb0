package plan

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// autoscaled is fleet arena with replicas and an autoscaling policy.
func autoscaled(replicas int32, a *eventsv1.FleetAutoscaling) []projections.FleetRow {
	f := arena(replicas)
	f[0].State = proto.CloneOf(f[0].State)
	f[0].State.Spec.Autoscaling = a
	return f
}

func buffer(size string, lo, hi int32) *eventsv1.FleetAutoscaling {
	return &eventsv1.FleetAutoscaling{MinReplicas: lo, MaxReplicas: hi, Buffer: &eventsv1.BufferPolicy{BufferSize: size}}
}

const hookURL = "http://scaler.test/arena"

func TestPlanAutoscale(t *testing.T) {
	hook := &eventsv1.FleetAutoscaling{MaxReplicas: 6, Webhook: &eventsv1.WebhookPolicy{Url: hookURL}}
	tests := []struct {
		name     string
		snapshot func() Snapshot
		want     []string
		// wantTo is the replicas the FleetAutoscaled sets, if any, and
		// wantWhy its reason.
		wantTo  int32
		wantWhy string
	}{
		{
			name: "buffer 3 over 2 allocated: 5, the fleet's size first, then its servers",
			snapshot: func() Snapshot {
				return snap(autoscaled(3, buffer("3", 0, 10)), []projections.HostRow{hostRow("a", online, 10, 3, 5)},
					on("gs-1", allocated, "a", 10), on("gs-2", allocated, "a", 11), on("gs-3", ready, "a", 12))
			},
			want: []string{
				"autoscale fleets/arena@1 FleetAutoscaled",
				"  schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"  schedule " + gsPrefix + "new-2 GameServerScheduled → a",
			},
			wantTo: 5, wantWhy: "2 allocated + 0 reserved + buffer 3 (3) = 5",
		},
		{
			name: "never above max",
			snapshot: func() Snapshot {
				return snap(autoscaled(3, buffer("3", 0, 4)), []projections.HostRow{hostRow("a", online, 10, 3, 5)},
					on("gs-1", allocated, "a", 10), on("gs-2", allocated, "a", 11), on("gs-3", ready, "a", 12))
			},
			want: []string{
				"autoscale fleets/arena@1 FleetAutoscaled",
				"  schedule " + gsPrefix + "new-1 GameServerScheduled → a",
			},
			wantTo: 4, wantWhy: "2 allocated + 0 reserved + buffer 3 (3) = 5, bounded to 0..4",
		},
		{
			name: "a percentage of the allocated, rounded up",
			snapshot: func() Snapshot {
				held := on("gs-2", reserved, "a", 11)
				held.State.ReservedUntil = timestamppb.New(t0.Add(time.Minute))
				return snap(autoscaled(2, buffer("50%", 0, 10)), []projections.HostRow{hostRow("a", online, 10, 3, 5)},
					on("gs-1", allocated, "a", 10), held, on("gs-3", allocated, "a", 12))
			},
			want: []string{
				"autoscale fleets/arena@1 FleetAutoscaled",
				"  schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"  schedule " + gsPrefix + "new-2 GameServerScheduled → a",
			},
			wantTo: 5, wantWhy: "2 allocated + 1 reserved + buffer 2 (50%) = 5",
		},
		{
			name: "scale down: READY servers only, never below min",
			snapshot: func() Snapshot {
				return snap(autoscaled(5, buffer("1", 3, 10)), []projections.HostRow{hostRow("a", online, 10, 5, 5)},
					on("gs-1", allocated, "a", 10), on("gs-2", ready, "a", 11), on("gs-3", ready, "a", 12),
					on("gs-4", ready, "a", 13), on("gs-5", ready, "a", 14))
			},
			want: []string{
				"autoscale fleets/arena@1 FleetAutoscaled",
				"  shutdown " + gsPrefix + "gs-2@11 ShutdownRequested → a", // the newest READY first
				"  shutdown " + gsPrefix + "gs-3@12 ShutdownRequested → a",
			},
			wantTo: 3, wantWhy: "1 allocated + 0 reserved + buffer 1 (1) = 2, bounded to 3..10",
		},
		{
			name: "scale to zero with min 0",
			snapshot: func() Snapshot {
				return snap(autoscaled(1, buffer("0", 0, 10)), []projections.HostRow{hostRow("a", online, 10, 1, 5)},
					on("gs-1", ready, "a", 10))
			},
			want: []string{
				"autoscale fleets/arena@1 FleetAutoscaled",
				"  shutdown " + gsPrefix + "gs-1@10 ShutdownRequested → a",
			},
			wantTo: 0, wantWhy: "0 allocated + 0 reserved + buffer 0 (0) = 0",
		},
		{
			name: "the size already right: nothing",
			snapshot: func() Snapshot {
				return snap(autoscaled(4, buffer("3", 0, 10)), []projections.HostRow{hostRow("a", online, 10, 4, 5)},
					on("gs-1", allocated, "a", 10), on("gs-2", ready, "a", 11), on("gs-3", ready, "a", 12), on("gs-4", ready, "a", 13))
			},
		},
		{
			name: "webhook: its answer, within max",
			snapshot: func() Snapshot {
				s := snap(autoscaled(1, hook), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Webhooks = map[string]WebhookAnswer{"fleets/arena": {URL: hookURL, At: t0, Replicas: 9}}
				return s
			},
			want: []string{
				"autoscale fleets/arena@1 FleetAutoscaled",
				"  schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"  schedule " + gsPrefix + "new-2 GameServerScheduled → a",
				"  schedule " + gsPrefix + "new-3 GameServerScheduled → a",
				"  schedule " + gsPrefix + "new-4 GameServerScheduled → a",
				"  schedule " + gsPrefix + "new-5 GameServerScheduled → a",
			},
			wantTo: 6, wantWhy: "the webhook answered 9 replicas at " + t0.Format(time.RFC3339) + ", bounded to 0..6",
		},
		{
			name: "webhook failure: the size is kept and the failure recorded",
			snapshot: func() Snapshot {
				s := snap(autoscaled(1, hook), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Webhooks = map[string]WebhookAnswer{"fleets/arena": {URL: hookURL, At: t0, Err: errors.New("webhook: no answer within 1s")}}
				return s
			},
			want: []string{"autoscale fleets/arena@1 FleetAutoscaleFailed"},
		},
		{
			name: "webhook not answered yet: nothing",
			snapshot: func() Snapshot {
				return snap(autoscaled(1, hook), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPlanner().Plan(tt.snapshot())
			if len(p.Refused) > 0 {
				t.Fatalf("refused: %v", p.Refused)
			}
			if got := lines(p); !slices.Equal(got, tt.want) {
				t.Fatalf("decisions:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
			if tt.wantTo == 0 && tt.wantWhy == "" {
				return
			}
			e := p.Decisions[0].Events[0].(*eventsv1.FleetAutoscaled)
			if e.GetToReplicas() != tt.wantTo || e.GetReason() != tt.wantWhy {
				t.Fatalf("FleetAutoscaled to %d, %q; want %d, %q", e.GetToReplicas(), e.GetReason(), tt.wantTo, tt.wantWhy)
			}
		})
	}
}

// A policy in force that is neither a buffer nor a webhook (the API
// refuses one; a stored fleet could still hold it) is refused by name,
// and the fleet keeps its size: it is not taken for a buffer.
func TestPlanAutoscaleRefusesAnUnknownPolicy(t *testing.T) {
	schedule := &eventsv1.AutoscalingSchedule{Name: "launch", StartTime: timestamppb.New(t0.Add(-time.Hour)), EndTime: timestamppb.New(t0.Add(time.Hour))}
	for _, tc := range []struct {
		name   string
		policy *eventsv1.FleetAutoscaling
		want   string // in the refusal
	}{
		{"the fleet's own policy", &eventsv1.FleetAutoscaling{MaxReplicas: 6}, "autoscale fleets/arena: "},
		{"a schedule's policy", &eventsv1.FleetAutoscaling{MaxReplicas: 6, Buffer: &eventsv1.BufferPolicy{BufferSize: "3"},
			Schedules: []*eventsv1.AutoscalingSchedule{schedule}}, "autoscale fleets/arena: schedule launch: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlanner().Plan(snap(autoscaled(1, tc.policy), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10)))
			if got := lines(p); len(got) != 0 {
				t.Fatalf("decisions %v, want none: the fleet keeps its size", got)
			}
			if len(p.Refused) != 1 || !errors.Is(p.Refused[0], ErrUnknownPolicy) || !strings.Contains(p.Refused[0].Error(), tc.want) {
				t.Fatalf("refused %v, want the fleet's unknown policy", p.Refused)
			}
		})
	}
}
