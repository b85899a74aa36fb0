package plan

import (
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
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

// server is a game server of fleet arena created at t0+created seconds.
func server(id string, l eventsv1.Lifecycle, reason eventsv1.Reason, everReady bool, created int) *eventsv1.GameServerState {
	return &eventsv1.GameServerState{
		Name: "fleets/arena/gameServers/" + id, Lifecycle: l, Reason: reason, EverReady: everReady,
		Template: proto.CloneOf(template), HealthPolicy: proto.CloneOf(health),
		CreateTime: timestamppb.New(t0.Add(time.Duration(created) * time.Second)),
	}
}

const (
	terminated = eventsv1.Lifecycle_LIFECYCLE_TERMINATED
	unhealthy  = eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY
	ready      = eventsv1.Lifecycle_LIFECYCLE_READY
	starting   = eventsv1.Lifecycle_LIFECYCLE_STARTING
	scheduled  = eventsv1.Lifecycle_LIFECYCLE_SCHEDULED
)

func TestStartFailure(t *testing.T) {
	other := server("gs-1", terminated, eventsv1.Reason_REASON_PROCESS_START_FAILED, false, 0)
	other.Template = &eventsv1.GameServerTemplate{Command: "/opt/game/old"}
	otherHealth := server("gs-1", unhealthy, eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, false, 0)
	otherHealth.HealthPolicy = &eventsv1.HealthPolicy{Disabled: true}
	// A server started before its fleet's ready timeout was set to the
	// value its 0 stood for was judged by the same contract.
	timedOut := server("gs-1", terminated, eventsv1.Reason_REASON_READY_TIMEOUT, false, 0)
	timedOut.HealthPolicy.ReadyTimeoutSeconds = events.DefaultReadyTimeoutSeconds
	otherTimeout := server("gs-1", terminated, eventsv1.Reason_REASON_READY_TIMEOUT, false, 0)
	otherTimeout.HealthPolicy.ReadyTimeoutSeconds = 60
	tests := []struct {
		name   string
		server *eventsv1.GameServerState
		want   bool
	}{
		{name: "command not found", server: server("gs-1", terminated, eventsv1.Reason_REASON_PROCESS_START_FAILED, false, 0), want: true},
		{name: "crashed before ready", server: server("gs-1", terminated, eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY, false, 0), want: true},
		{name: "unhealthy before ready", server: server("gs-1", unhealthy, eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, false, 0), want: true},
		{name: "terminated unhealthy before ready", server: server("gs-1", terminated, eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED, false, 0), want: true},
		{name: "game shut itself down before ready", server: server("gs-1", terminated, eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, false, 0), want: true},
		{name: "exited after ready", server: server("gs-1", terminated, eventsv1.Reason_REASON_PROCESS_EXITED, true, 0)},
		{name: "unhealthy after ready", server: server("gs-1", unhealthy, eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, true, 0)},
		{name: "scaled down while starting", server: server("gs-1", terminated, eventsv1.Reason_REASON_FLEET_SCALED_DOWN, false, 0)},
		{name: "host lost while starting", server: server("gs-1", terminated, eventsv1.Reason_REASON_HOST_LOST, false, 0)},
		{name: "agent restarted while starting", server: server("gs-1", terminated, eventsv1.Reason_REASON_AGENT_RESTARTED, false, 0)},
		{name: "deleted by the API while starting", server: server("gs-1", terminated, eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API, false, 0)},
		{name: "still starting", server: server("gs-1", starting, eventsv1.Reason_REASON_UNSPECIFIED, false, 0)},
		{name: "shutting down", server: server("gs-1", eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN, eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, false, 0)},
		{name: "an earlier template", server: other},
		{name: "an earlier health policy", server: otherHealth},
		{name: "ready timeout of the default's value, the fleet's is 0", server: timedOut, want: true},
		{name: "an earlier ready timeout", server: otherTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := startFailure(tt.server, fleetState(time.Time{})); got != tt.want {
				t.Errorf("startFailure = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStartRecovery(t *testing.T) {
	since := t0.Add(10 * time.Second)
	tests := []struct {
		name   string
		fleet  *eventsv1.FleetState
		server *eventsv1.GameServerState
		want   bool
	}{
		{name: "scheduled after the failures began, ready", fleet: fleetState(since), server: server("gs-9", ready, 0, true, 12), want: true},
		{name: "ready then ended still counts", fleet: fleetState(since), server: server("gs-9", terminated, eventsv1.Reason_REASON_PROCESS_EXITED, true, 12), want: true},
		{name: "scheduled before the failures began", fleet: fleetState(since), server: server("gs-1", ready, 0, true, 5)},
		{name: "not ready yet", fleet: fleetState(since), server: server("gs-9", starting, 0, false, 12)},
		{name: "fleet not failing", fleet: fleetState(time.Time{}), server: server("gs-9", ready, 0, true, 12)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := startRecovery(tt.server, tt.fleet); got != tt.want {
				t.Errorf("startRecovery = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStartError(t *testing.T) {
	withEvidence := func(reason eventsv1.Reason, ev *eventsv1.Evidence) *eventsv1.GameServerState {
		s := server("gs-1", terminated, reason, false, 0)
		s.Evidence = ev
		return s
	}
	tests := []struct {
		name   string
		server *eventsv1.GameServerState
		want   string
	}{
		{name: "the agent's detail", server: withEvidence(eventsv1.Reason_REASON_PROCESS_START_FAILED,
			&eventsv1.Evidence{Detail: "fork/exec /nope: no such file or directory", StartAttempts: 1}), want: "fork/exec /nope: no such file or directory"},
		{name: "exit code", server: withEvidence(eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY,
			&eventsv1.Evidence{ExitCode: proto.Int32(3), StartAttempts: 3}), want: "exited with code 3 after 3 start attempts before Ready"},
		{name: "signal", server: withEvidence(eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY,
			&eventsv1.Evidence{Signal: "killed"}), want: "ended by signal killed before Ready"},
		{name: "missed heartbeats", server: withEvidence(eventsv1.Reason_REASON_HEALTH_CHECK_FAILED,
			&eventsv1.Evidence{MissedPeriods: 3, PeriodSeconds: 5}), want: "missed 3 heartbeat periods of 5 s before Ready"},
		{name: "nothing said", server: withEvidence(eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, nil), want: "SHUTDOWN_REQUESTED_BY_GAME before Ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := startError(tt.server); got != tt.want {
				t.Errorf("startError = %q, want %q", got, tt.want)
			}
		})
	}
}

func rows(servers ...any) []projections.Row[*eventsv1.GameServerState] {
	var out []projections.Row[*eventsv1.GameServerState]
	for i := 0; i < len(servers); i += 2 {
		out = append(out, projections.Row[*eventsv1.GameServerState]{State: servers[i].(*eventsv1.GameServerState), Sequence: servers[i+1].(uint64)})
	}
	return out
}

func TestClassify(t *testing.T) {
	since := t0.Add(10 * time.Second)
	failed := func(id string) *eventsv1.GameServerState {
		return server(id, terminated, eventsv1.Reason_REASON_PROCESS_START_FAILED, false, 11)
	}
	standalone := failed("x")
	standalone.Name = "fleets/-/gameServers/x"
	tests := []struct {
		name        string
		fleet       *eventsv1.FleetState
		rows        []projections.Row[*eventsv1.GameServerState]
		counted     map[string]bool
		wantFailed  []string
		wantReady   string
		wantCounted map[string]bool
	}{
		{name: "two failures", fleet: fleetState(time.Time{}), rows: rows(failed("gs-1"), uint64(60), failed("gs-2"), uint64(61)),
			wantFailed: []string{"fleets/arena/gameServers/gs-1", "fleets/arena/gameServers/gs-2"}},
		{name: "counted already by sequence", fleet: fleetState(since), rows: rows(failed("gs-1"), uint64(50), failed("gs-2"), uint64(51)),
			wantFailed: []string{"fleets/arena/gameServers/gs-2"}},
		{name: "unhealthy, then its termination, count once", fleet: fleetState(time.Time{}),
			rows:       rows(server("gs-1", unhealthy, eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, false, 0), uint64(60)),
			wantFailed: []string{"fleets/arena/gameServers/gs-1"}, wantCounted: map[string]bool{"fleets/arena/gameServers/gs-1": true}},
		{name: "termination of a server counted while unhealthy", fleet: fleetState(time.Time{}),
			rows:    rows(server("gs-1", terminated, eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, false, 0), uint64(70)),
			counted: map[string]bool{"fleets/arena/gameServers/gs-1": true}, wantCounted: map[string]bool{}},
		{name: "a probe became ready after the failures", fleet: fleetState(since),
			rows:      rows(failed("gs-1"), uint64(60), server("gs-2", ready, 0, true, 12), uint64(62)),
			wantReady: "fleets/arena/gameServers/gs-2", wantFailed: []string{"fleets/arena/gameServers/gs-1"}},
		{name: "an old server's change is no recovery", fleet: fleetState(since),
			rows: rows(server("gs-0", eventsv1.Lifecycle_LIFECYCLE_ALLOCATED, 0, true, 1), uint64(62))},
		{name: "other fleets and standalone servers are not counted", fleet: fleetState(time.Time{}),
			rows: rows(standalone, uint64(60), &eventsv1.GameServerState{Name: "fleets/duel/gameServers/g", Lifecycle: terminated,
				Reason: eventsv1.Reason_REASON_PROCESS_START_FAILED}, uint64(61))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counted := tt.counted
			if counted == nil {
				counted = map[string]bool{}
			}
			got := ClassifyStarts(tt.rows, map[string]*eventsv1.FleetState{"fleets/arena": tt.fleet}, counted)
			news := got["fleets/arena"]
			if news == nil {
				news = &StartNews{}
			}
			var names []string
			for _, f := range news.failures {
				names = append(names, f.GameServer)
			}
			if !slices.Equal(names, tt.wantFailed) || news.ready != tt.wantReady {
				t.Errorf("failures %v ready %q, want %v and %q", names, news.ready, tt.wantFailed, tt.wantReady)
			}
			if len(got) > 1 || got["fleets/duel"] != nil {
				t.Errorf("news for other fleets: %v", got)
			}
			if tt.wantCounted != nil && !maps.Equal(counted, tt.wantCounted) {
				t.Errorf("counted = %v, want %v", counted, tt.wantCounted)
			}
		})
	}
}

func TestStartNewsCommand(t *testing.T) {
	b := events.StartBackoff{Base: time.Second, Cap: time.Minute}
	fail := func(seq uint64) events.StartFailure { return events.StartFailure{GameServer: "g", Sequence: seq} }
	tests := []struct {
		name    string
		pending *StartNews
		news    *StartNews
		want    string // command type, "" for none
	}{
		{name: "nothing", want: ""},
		{name: "failures", news: &StartNews{failures: []events.StartFailure{fail(3)}}, want: "RecordStartFailures"},
		{name: "pending failures are retried", pending: &StartNews{failures: []events.StartFailure{fail(3)}}, news: &StartNews{}, want: "RecordStartFailures"},
		{name: "ready after every failure", news: &StartNews{failures: []events.StartFailure{fail(3)}, ready: "r", readySeq: 5}, want: "RecordStartRecovered"},
		{name: "a failure after the ready one", news: &StartNews{failures: []events.StartFailure{fail(7)}, ready: "r", readySeq: 5}, want: "RecordStartFailures"},
		{name: "pending recovery is retried", pending: &StartNews{ready: "r", readySeq: 5}, want: "RecordStartRecovered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := tt.pending.Merge(tt.news).command(t0, b)
			got := ""
			switch cmd.(type) {
			case events.RecordStartFailures:
				got = "RecordStartFailures"
			case events.RecordStartRecovered:
				got = "RecordStartRecovered"
			}
			if got != tt.want {
				t.Errorf("command = %T, want %s", cmd, tt.want)
			}
		})
	}
}

func TestStartsAllowed(t *testing.T) {
	since := t0.Add(10 * time.Second)
	lifted := fleetState(since)
	lifted.StartFailing.BackoffUntil = nil
	live := func(servers ...*eventsv1.GameServerState) []projections.Row[*eventsv1.GameServerState] {
		var out []projections.Row[*eventsv1.GameServerState]
		for _, s := range servers {
			out = append(out, projections.Row[*eventsv1.GameServerState]{State: s})
		}
		return out
	}
	tests := []struct {
		name  string
		fleet *eventsv1.FleetState
		live  []projections.Row[*eventsv1.GameServerState]
		now   time.Time
		want  int
	}{
		{name: "not failing: as many as wanted", fleet: fleetState(time.Time{}), now: since, want: 3},
		{name: "in backoff: none", fleet: fleetState(since), now: since.Add(9 * time.Second), want: 0},
		{name: "backoff passed: one", fleet: fleetState(since), now: since.Add(10 * time.Second), want: 1},
		{name: "a probe still starting: none", fleet: fleetState(since), now: since.Add(20 * time.Second),
			live: live(server("gs-9", starting, 0, false, 15)), want: 0},
		{name: "a probe still scheduled: none", fleet: fleetState(since), now: since.Add(20 * time.Second),
			live: live(server("gs-9", scheduled, 0, false, 15)), want: 0},
		{name: "a server from before the failures still starting does not block", fleet: fleetState(since), now: since.Add(20 * time.Second),
			live: live(server("gs-1", starting, 0, false, 2), server("gs-2", ready, 0, true, 15)), want: 1},
		{name: "backoff lifted by a template change: one at once", fleet: lifted, now: since, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := startsAllowed(tt.fleet, tt.live, tt.now); got != tt.want {
				t.Errorf("startsAllowed = %d, want %d", got, tt.want)
			}
		})
	}
}
