package agent

import (
	"testing"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestHealthCheck(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	policy := &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}
	type step struct {
		at         float64
		beat       bool
		disconnect bool
		connect    bool
		want       verdict
		resumed    bool
	}
	for _, tc := range []struct {
		name   string
		policy *eventsv1.HealthPolicy
		steps  []step
	}{
		{"no heartbeat at all: counting starts after the initial delay", policy, []step{
			{at: 9.9},
			{at: 10, want: verdict{missed: 1}},
			{at: 14.9},
			{at: 15, want: verdict{missed: 2}},
			{at: 20, want: verdict{missed: 3}},
			{at: 20.5},
		}},
		{"steady heartbeats never miss", policy, []step{
			{at: 1, beat: true}, {at: 5, beat: true}, {at: 9, beat: true}, {at: 13, beat: true}, {at: 17.9},
		}},
		{"a hang after heartbeats: periods count from the last one", policy, []step{
			{at: 6, beat: true},
			{at: 10.9},
			{at: 11, want: verdict{missed: 1}},
			{at: 21, want: verdict{missed: 3}},
		}},
		{"heartbeats return before the threshold", policy, []step{
			{at: 10, want: verdict{missed: 1}},
			{at: 12, beat: true, resumed: true},
			{at: 16},
			{at: 17, want: verdict{missed: 1}},
		}},
		{"a jump in time reports all missed periods at once", policy, []step{
			{at: 30, want: verdict{missed: 5}},
		}},
		{"disabled: never missed", &eventsv1.HealthPolicy{Disabled: true, InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}, []step{
			{at: 100},
		}},
		{"disconnect and reconnect inside the grace window", &eventsv1.HealthPolicy{Disabled: true}, []step{
			{at: 1, disconnect: true}, {at: 20, connect: true}, {at: 40},
		}},
		{"disconnected but still heartbeating over REST: no verdict", &eventsv1.HealthPolicy{Disabled: true}, []step{
			{at: 1, disconnect: true}, {at: 10, beat: true}, {at: 40},
		}},
		{"disconnected and silent past the grace window", &eventsv1.HealthPolicy{Disabled: true}, []step{
			{at: 1, disconnect: true}, {at: 30.9}, {at: 31, want: verdict{graceExpired: true}}, {at: 40},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealthCheck(tc.policy, 30*time.Second, t0)
			for _, s := range tc.steps {
				now := at(s.at)
				switch {
				case s.beat:
					if got := h.heartbeat(now); got != s.resumed {
						t.Fatalf("t=%v heartbeat resumed=%v, want %v", s.at, got, s.resumed)
					}
				case s.disconnect:
					h.disconnected(now)
				case s.connect:
					h.connected()
				}
				if got := h.due(now); got != s.want {
					t.Fatalf("t=%v: verdict %+v, want %+v", s.at, got, s.want)
				}
			}
		})
	}
}

// DESIGN.md §1 failure 1 on the injected clock: a process that drops and
// re-opens its SDK connection every 2 s for 60 s, heartbeating all along,
// never gets a verdict.
func TestFlappingConnectionWithHeartbeatsNeverFails(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	h := newHealthCheck(&eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}, 30*time.Second, t0)
	for ms := 0; ms <= 60_000; ms += 100 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		switch ms % 2000 {
		case 0:
			h.disconnected(now)
		case 300:
			h.connected()
		}
		if ms%1000 == 0 {
			h.heartbeat(now)
		}
		if v := h.due(now); v != (verdict{}) {
			t.Fatalf("t=%dms: verdict %+v for a heartbeating process", ms, v)
		}
	}
}
