package events_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// readyServer folds a server that is READY with the default health policy.
func readyServer(t *testing.T, name string) *eventsv1.GameServerState {
	t.Helper()
	spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(spec)
	var s *eventsv1.GameServerState
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, cmd := range []events.GameServerCommand{
		events.ScheduleGameServer{Host: "hosts/h1", Spec: spec},
		events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: 1, Attempt: 1}},
		events.MarkReady{},
	} {
		msgs, err := events.DecideGameServer(name, s, cmd)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if s, err = events.ApplyGameServer(s, events.New(name, at, m)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s
}

func TestMissedHeartbeatsDegradeThenFail(t *testing.T) {
	const name = "fleets/arena/gameServers/gs-1"
	last := time.Date(2026, 11, 1, 0, 0, 7, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		missed    int32
		wantTypes []string
	}{
		{"first miss", 1, []string{"HealthDegraded"}},
		{"below threshold", 2, []string{"HealthDegraded"}},
		{"threshold", 3, []string{"HealthDegraded", "GameServerUnhealthy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, err := events.DecideGameServer(name, readyServer(t, name), events.RecordMissedHeartbeats{Missed: tc.missed, LastHeartbeat: last})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range msgs {
				got = append(got, events.TypeOf(m))
			}
			if len(got) != len(tc.wantTypes) || got[0] != tc.wantTypes[0] || got[len(got)-1] != tc.wantTypes[len(tc.wantTypes)-1] {
				t.Fatalf("events %v, want %v", got, tc.wantTypes)
			}
			d := msgs[0].(*eventsv1.HealthDegraded)
			if d.GetMissedPeriods() != tc.missed || d.GetFailureThreshold() != 3 || d.GetPeriodSeconds() != 5 || !d.GetLastHeartbeatTime().AsTime().Equal(last) {
				t.Fatalf("degraded %v", d)
			}
			if len(msgs) == 2 {
				u := msgs[1].(*eventsv1.GameServerUnhealthy)
				ev := u.GetEvidence()
				if u.GetReason() != eventsv1.Reason_REASON_HEALTH_CHECK_FAILED || ev.GetMissedPeriods() != 3 ||
					ev.GetPeriodSeconds() != 5 || !ev.GetLastHeartbeatTime().AsTime().Equal(last) {
					t.Fatalf("unhealthy %v", u)
				}
			}
		})
	}
}

func TestHeartbeatsResumedRecoversOnlyWhenDegraded(t *testing.T) {
	const name = "fleets/arena/gameServers/gs-1"
	s := readyServer(t, name)
	at := time.Date(2026, 11, 1, 0, 1, 0, 0, time.UTC)
	msgs, err := events.DecideGameServer(name, s, events.RecordHeartbeatsResumed{At: at})
	if err != nil || len(msgs) != 0 {
		t.Fatalf("healthy server: %v, %v; want no event", msgs, err)
	}
	msgs, err = events.DecideGameServer(name, s, events.RecordMissedHeartbeats{Missed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s, err = events.ApplyGameServer(s, events.New(name, at, msgs[0])); err != nil {
		t.Fatal(err)
	}
	msgs, err = events.DecideGameServer(name, s, events.RecordHeartbeatsResumed{At: at})
	if err != nil || len(msgs) != 1 || events.TypeOf(msgs[0]) != "HealthRecovered" {
		t.Fatalf("degraded server: %v, %v; want HealthRecovered", msgs, err)
	}
	if s, err = events.ApplyGameServer(s, events.New(name, at, msgs[0])); err != nil {
		t.Fatal(err)
	}
	if s.GetHealth() != eventsv1.HealthState_HEALTH_STATE_HEALTHY || s.GetMissedPeriods() != 0 || s.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_READY {
		t.Fatalf("after recovery: %v", s)
	}
}

func TestMissedHeartbeatsAfterTerminationAreRefused(t *testing.T) {
	const name = "fleets/arena/gameServers/gs-1"
	s := readyServer(t, name)
	msgs, err := events.DecideGameServer(name, s, events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST})
	if err != nil {
		t.Fatal(err)
	}
	if s, err = events.ApplyGameServer(s, events.New(name, time.Now(), msgs[0])); err != nil {
		t.Fatal(err)
	}
	_, err = events.DecideGameServer(name, s, events.RecordMissedHeartbeats{Missed: 1})
	var te *events.TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("missed heartbeats on a terminated server: %v, want a TransitionError", err)
	}
}
