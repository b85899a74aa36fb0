package plan

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// rolling is fleet arena at revision 2 with a rollout in state st (from
// revision 1, started at t0-1m) and a strategy.
func rolling(replicas int32, strategy *eventsv1.FleetStrategy, st eventsv1.RolloutState) []projections.FleetRow {
	f := arena(replicas)
	f[0].State = proto.CloneOf(f[0].State)
	f[0].State.Spec.Strategy = strategy
	f[0].State.Revision = 2
	f[0].State.Rollout = &eventsv1.FleetRollout{Revision: 2, FromRevision: 1, State: st, StartTime: timestamppb.New(t0.Add(-time.Minute))}
	return f
}

// rev is on(...) at a revision.
func rev(r projections.Row[*eventsv1.GameServerState], revision int64) projections.Row[*eventsv1.GameServerState] {
	r.State.Revision = revision
	return r
}

// tenServers is a fleet of 10 at revision 1: 4 ALLOCATED, 6 READY.
func tenServers() []projections.Row[*eventsv1.GameServerState] {
	var out []projections.Row[*eventsv1.GameServerState]
	for i := range 10 {
		l := ready
		if i < 4 {
			l = allocated
		}
		out = append(out, rev(on("gs-"+string(rune('a'+i)), l, "a", uint64(10+i)), 1))
	}
	return out
}

func TestPlanRollout(t *testing.T) {
	rollingUpdate := &eventsv1.FleetStrategy{Type: eventsv1.FleetStrategy_ROLLING_UPDATE, MaxSurge: "25%", MaxUnavailable: "25%", FailureThreshold: 3}
	progressing := eventsv1.RolloutState_ROLLOUT_STATE_PROGRESSING
	tests := []struct {
		name     string
		snapshot func() Snapshot
		want     []string
	}{
		{
			// Surge 3 (25 % of 10, up), unavailable 1 (25 % of the 6 without
			// a match, down): 3 new, and 1 READY outdated goes at once since
			// 10 serve and 9 must. The 4 ALLOCATED stay.
			name: "rolling update: within the surge and unavailability bounds, matches untouched",
			snapshot: func() Snapshot {
				return snap(rolling(10, rollingUpdate, progressing), []projections.HostRow{hostRow("a", online, 20, 10, 5)}, tenServers()...)
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-2 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-3 GameServerScheduled → a",
				"shutdown " + gsPrefix + "gs-e@14 ShutdownRequested → a",
				"rollout fleets/arena@1 FleetRolloutProgressed",
			},
		},
		{
			name: "recreate: every outdated server without a match at once",
			snapshot: func() Snapshot {
				recreate := &eventsv1.FleetStrategy{Type: eventsv1.FleetStrategy_RECREATE, FailureThreshold: 3}
				return snap(rolling(10, recreate, progressing), []projections.HostRow{hostRow("a", online, 20, 10, 5)}, tenServers()...)
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-2 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-3 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-4 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-5 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-6 GameServerScheduled → a",
				"shutdown " + gsPrefix + "gs-e@14 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-f@15 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-g@16 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-h@17 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-i@18 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-j@19 ShutdownRequested → a",
				"rollout fleets/arena@1 FleetRolloutProgressed",
			},
		},
		{
			name: "paused: the outdated servers stay",
			snapshot: func() Snapshot {
				return snap(rolling(10, rollingUpdate, eventsv1.RolloutState_ROLLOUT_STATE_PAUSED), []projections.HostRow{hostRow("a", online, 20, 10, 5)}, tenServers()...)
			},
		},
		{
			name: "every server on the revision: completed",
			snapshot: func() Snapshot {
				return snap(rolling(2, rollingUpdate, progressing), []projections.HostRow{hostRow("a", online, 20, 2, 5)},
					rev(on("gs-1", ready, "a", 10), 2), rev(on("gs-2", allocated, "a", 11), 2))
			},
			want: []string{"rollout fleets/arena@1 FleetRolloutCompleted"},
		},
		{
			name: "new servers failing past the threshold: halted, the outdated ones stay",
			snapshot: func() Snapshot {
				f := rolling(2, rollingUpdate, progressing)
				f[0].State.StartFailing = &eventsv1.FleetStartFailing{ConsecutiveFailures: 3, Reason: eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY,
					BackoffUntil: timestamppb.New(t0.Add(time.Minute))}
				f[0].State.StartConditionTime = timestamppb.New(t0.Add(-30 * time.Second))
				return snap(f, []projections.HostRow{hostRow("a", online, 20, 2, 5)},
					rev(on("gs-1", ready, "a", 10), 1), rev(on("gs-2", ready, "a", 11), 1))
			},
			want: []string{"rollout fleets/arena@1 FleetRolloutHalted"},
		},
		{
			name: "resumed after a halt: the failures before it do not halt it again",
			snapshot: func() Snapshot {
				f := rolling(2, rollingUpdate, progressing)
				f[0].State.StartFailing = &eventsv1.FleetStartFailing{ConsecutiveFailures: 3, Reason: eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY,
					BackoffUntil: timestamppb.New(t0.Add(time.Minute))}
				f[0].State.StartConditionTime = timestamppb.New(t0.Add(-30 * time.Second))
				f[0].State.Rollout.BaselineFailures, f[0].State.Rollout.BaselineTime = 3, timestamppb.New(t0.Add(-10*time.Second))
				return snap(f, []projections.HostRow{hostRow("a", online, 20, 2, 5)},
					rev(on("gs-1", ready, "a", 10), 1), rev(on("gs-2", ready, "a", 11), 1))
			},
			want: []string{"rollout fleets/arena@1 FleetRolloutProgressed"},
		},
		{
			// Replicas 4, unavailable 1: 4 serve (n-1 and 3 outdated), so
			// one outdated READY may go; the surplus new server is one not
			// ready yet, never n-1, which serves.
			name: "scaled down mid-rollout: the unavailability budget holds",
			snapshot: func() Snapshot {
				return snap(rolling(4, rollingUpdate, progressing), []projections.HostRow{hostRow("a", online, 20, 8, 5)},
					rev(on("n-1", ready, "a", 10), 2), rev(on("n-2", starting, "a", 11), 2), rev(on("n-3", starting, "a", 12), 2),
					rev(on("n-4", starting, "a", 13), 2), rev(on("n-5", starting, "a", 14), 2),
					rev(on("o-1", ready, "a", 15), 1), rev(on("o-2", ready, "a", 16), 1), rev(on("o-3", ready, "a", 17), 1))
			},
			want: []string{
				"shutdown " + gsPrefix + "o-1@15 ShutdownRequested → a",
				"shutdown " + gsPrefix + "n-2@11 ShutdownRequested → a",
				"rollout fleets/arena@1 FleetRolloutProgressed",
			},
		},
		{
			name: "recreate: not completed before servers of the revision serve",
			snapshot: func() Snapshot {
				recreate := &eventsv1.FleetStrategy{Type: eventsv1.FleetStrategy_RECREATE, FailureThreshold: 3}
				return snap(rolling(2, recreate, progressing), []projections.HostRow{hostRow("a", online, 20, 2, 5)},
					rev(on("gs-1", starting, "a", 10), 2), rev(on("gs-2", starting, "a", 11), 2))
			},
			want: []string{"rollout fleets/arena@1 FleetRolloutProgressed"},
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
		})
	}
}
