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

// The ready deadline is the policy's ready timeout from the process's
// start, 300 s when the policy says 0 (a spec stored before the field) or
// the health contract's own span if longer, none when health checking is
// disabled; it is reported once.
func TestReadyDeadline(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		policy *eventsv1.HealthPolicy
		want   time.Duration // 0: no deadline
	}{
		{"set", &eventsv1.HealthPolicy{PeriodSeconds: 5, FailureThreshold: 3, ReadyTimeoutSeconds: 60}, time.Minute},
		{"0 is the default", &eventsv1.HealthPolicy{PeriodSeconds: 5, FailureThreshold: 3}, 300 * time.Second},
		{"disabled", &eventsv1.HealthPolicy{Disabled: true, ReadyTimeoutSeconds: 60}, 0},
		// A fleet whose servers load for longer than the default is not
		// timed out before its health contract would judge them at all.
		{"0 with a longer initial delay", &eventsv1.HealthPolicy{InitialDelaySeconds: 600, PeriodSeconds: 5, FailureThreshold: 3}, 615 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealthCheck(tc.policy, 30*time.Second, t0)
			if tc.want == 0 {
				if h.readyOverdue(t0.Add(24 * time.Hour)) {
					t.Fatal("overdue with no deadline")
				}
				return
			}
			if h.readyOverdue(t0.Add(tc.want - time.Millisecond)) {
				t.Fatalf("overdue a millisecond before %s", tc.want)
			}
			if !h.readyOverdue(t0.Add(tc.want)) {
				t.Fatalf("not overdue at %s", tc.want)
			}
			if h.readyOverdue(t0.Add(tc.want + time.Second)) {
				t.Fatal("overdue reported twice")
			}
		})
	}
}

// A connection a heartbeat proved before the disconnect that opened the
// grace window does not close it when folded after it; one proved after
// the disconnect does.
func TestAPendingConnectionOlderThanTheDisconnectIsDropped(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		beatAt     time.Time
		windowOpen bool
	}{
		{"proved before the disconnect", t0.Add(-time.Second), true},
		{"proved after it", t0.Add(time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := &gameServer{
				check: newHealthCheck(&eventsv1.HealthPolicy{Disabled: true}, 30*time.Second, t0.Add(-time.Minute)),
				// CONNECTED, so that a fold that closes the window records
				// nothing: the window alone is on trial.
				state: &eventsv1.GameServerState{Connection: eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED},
			}
			gs.check.disconnected(t0)
			gs.pendingConn.Store(&pendingConnect{transport: "grpc", at: tc.beatAt})
			gs.foldPendingLocked(t.Context())
			if open := !gs.check.disconnectedAt.IsZero(); open != tc.windowOpen {
				t.Fatalf("grace window open %v after the fold, want %v", open, tc.windowOpen)
			}
			if gs.pendingConn.Load() != nil {
				t.Fatal("the pending connection was not consumed")
			}
		})
	}
}
