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
					if got := h.pinged(now); got != s.resumed {
						t.Fatalf("t=%v heartbeat resumed=%v, want %v", s.at, got, s.resumed)
					}
				case s.disconnect:
					h.disconnected(now)
				case s.connect:
					h.connected()
				}
				if got := h.due(now, nil); got != s.want {
					t.Fatalf("t=%v: verdict %+v, want %+v", s.at, got, s.want)
				}
			}
		})
	}
}

// The first failure of docs/architecture.md ("The failures it is built
// against") on the injected clock: a process that drops and
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
			h.pinged(now)
		}
		if v := h.due(now, nil); v != (verdict{}) {
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
				if h.readyOverdue(t0.Add(24*time.Hour), nil) {
					t.Fatal("overdue with no deadline")
				}
				return
			}
			if h.readyOverdue(t0.Add(tc.want-time.Millisecond), nil) {
				t.Fatalf("overdue a millisecond before %s", tc.want)
			}
			if !h.readyOverdue(t0.Add(tc.want), nil) {
				t.Fatalf("not overdue at %s", tc.want)
			}
			if h.readyOverdue(t0.Add(tc.want+time.Second), nil) {
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

// The agent's own pauses (stopped, suspended, starved: it took no
// heartbeat, whatever the process sent) count toward no health period, SDK
// disconnect grace or ready timeout; after one, nothing new is judged of a
// server until it has had a full period (the default 5 s with health
// checking off) to be heard from again. What ran out before the pause
// stays counted.
func TestHealthCheckLeavesOutTheAgentsPauses(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	policy := &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}
	off := &eventsv1.HealthPolicy{Disabled: true}
	type step struct {
		at         float64
		beat       bool
		disconnect bool
		want       verdict
	}
	for _, tc := range []struct {
		name   string
		policy *eventsv1.HealthPolicy
		pauses [][2]float64
		steps  []step
	}{
		{"a pause of 20 s after a heartbeat: no period missed, and the beats queued meanwhile arrive", policy, [][2]float64{{7, 27}}, []step{
			{at: 6, beat: true},
			{at: 27},
			{at: 27.5, beat: true},
			{at: 32.4},
			{at: 32.5, want: verdict{missed: 1}},
		}},
		{"silent after the pause: judged a full period after the resume, on the time the agent ran", policy, [][2]float64{{9, 29}}, []step{
			{at: 6, beat: true},
			{at: 29},
			// 3 s before the pause and 2 s after it make a period, but
			// the server has a period from the resume.
			{at: 31},
			{at: 33.9},
			{at: 34, want: verdict{missed: 1}},
			{at: 35.9},
			{at: 36, want: verdict{missed: 2}},
			{at: 40.9},
			{at: 41, want: verdict{missed: 3}},
		}},
		{"periods missed before the pause stay counted; the next waits a period after it", policy, [][2]float64{{17, 40}}, []step{
			{at: 6, beat: true},
			{at: 16, want: verdict{missed: 2}},
			{at: 40},
			{at: 44.9},
			{at: 45, want: verdict{missed: 3}},
		}},
		{"a pause inside the initial delay changes nothing", policy, [][2]float64{{1, 4}}, []step{
			{at: 9.9},
			{at: 10, want: verdict{missed: 1}},
		}},
		{"a pause across the end of the initial delay: counted from the resume", policy, [][2]float64{{3, 30}}, []step{
			{at: 30},
			{at: 34.9},
			{at: 35, want: verdict{missed: 1}},
		}},
		{"two pauses: neither counts", policy, [][2]float64{{7, 17}, {18, 28}}, []step{
			{at: 6, beat: true},
			{at: 28},
			// 2 s ran before and between them, and a period is due
			// from the resume.
			{at: 32.9},
			{at: 33, want: verdict{missed: 1}},
		}},
		{"a heartbeat noted inside a pause (the watch starved, not the SDK): counted from the resume", policy, [][2]float64{{7, 27}}, []step{
			{at: 6, beat: true},
			{at: 7.5, beat: true},
			{at: 31.9},
			{at: 32, want: verdict{missed: 1}},
		}},
		{"disconnect grace: the pause is not part of the window", off, [][2]float64{{10, 40}}, []step{
			{at: 1, disconnect: true},
			{at: 40},
			{at: 60.9},
			{at: 61, want: verdict{graceExpired: true}},
		}},
		{"disconnect grace ending in a pause: the server has the settle after it", off, [][2]float64{{30, 60}}, []step{
			{at: 1, disconnect: true},
			{at: 61},
			{at: 64.9},
			{at: 65, want: verdict{graceExpired: true}},
		}},
		{"disconnected before a pause, a heartbeat queued in it closes the window", off, [][2]float64{{30, 60}}, []step{
			{at: 1, disconnect: true},
			{at: 60.01, beat: true},
			{at: 100},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pauses []pause
			for _, p := range tc.pauses {
				pauses = append(pauses, pause{at(p[0]), at(p[1])})
			}
			h := newHealthCheck(tc.policy, 30*time.Second, t0)
			for _, s := range tc.steps {
				now := at(s.at)
				// The pauses the agent knows of at now: those over by then.
				var known []pause
				for _, p := range pauses {
					if !p.to.After(now) {
						known = append(known, p)
					}
				}
				switch {
				case s.beat:
					h.pinged(now)
				case s.disconnect:
					h.disconnected(now)
				}
				if got := h.due(now, known); got != s.want {
					t.Fatalf("t=%v: verdict %+v, want %+v", s.at, got, s.want)
				}
			}
		})
	}
}

// The ready timeout counts only the time the agent ran since the process
// started, and one ending in a pause waits a period after it.
func TestReadyTimeoutLeavesOutTheAgentsPauses(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	policy := &eventsv1.HealthPolicy{InitialDelaySeconds: 600, PeriodSeconds: 5, FailureThreshold: 3, ReadyTimeoutSeconds: 60}
	for _, tc := range []struct {
		name      string
		pause     pause
		notBefore float64 // overdue at this time, not a millisecond before
	}{
		{"a pause inside the timeout lengthens it", pause{at(30), at(90)}, 120},
		{"a timeout that ends in a pause waits a period after it", pause{at(59), at(100)}, 105},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealthCheck(policy, 30*time.Second, t0)
			pauses := []pause{tc.pause}
			if h.readyOverdue(at(tc.notBefore-0.001), pauses) {
				t.Fatalf("overdue before %vs", tc.notBefore)
			}
			if !h.readyOverdue(at(tc.notBefore), pauses) {
				t.Fatalf("not overdue at %vs", tc.notBefore)
			}
		})
	}
}

// The run watch takes a run later than its interval and a second for a
// pause, from its last run to this one on the agent's clock; the
// evaluation, asking before the watch has run since the agent resumed,
// sees the pause under way; and only the latest pauses are kept.
func TestRunWatchFindsPauses(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// The run clock is offset from the agent's to tell them apart.
	run := func(d time.Duration) time.Time { return t0.Add(time.Hour + d) }
	clk := func(d time.Duration) time.Time { return t0.Add(d) }
	w := &runWatch{late: 200*time.Millisecond + minPause}
	if _, late := w.ran(run(0), clk(0)); late {
		t.Fatal("the first run is a pause")
	}
	for d := 200 * time.Millisecond; d <= 2*time.Second; d += 200 * time.Millisecond {
		if _, late := w.ran(run(d), clk(d)); late {
			t.Fatalf("a run on time at %s is a pause", d)
		}
	}
	if _, late := w.ran(run(3200*time.Millisecond), clk(3200*time.Millisecond)); late {
		t.Fatal("a run 1.2 s after the last taken for a pause")
	}
	if got := w.pausesAt(run(23*time.Second), clk(23*time.Second)); len(got) != 1 || got[0] != (pause{clk(3200 * time.Millisecond), clk(23 * time.Second)}) {
		t.Fatalf("pauses asked 19.8 s after the last run: %v, want the one under way", got)
	}
	p, late := w.ran(run(23*time.Second+time.Millisecond), clk(23*time.Second+time.Millisecond))
	if want := (pause{clk(3200 * time.Millisecond), clk(23*time.Second + time.Millisecond)}); !late || p != want {
		t.Fatalf("the late run found %v (%v), want %v", p, late, want)
	}
	if got := w.pausesAt(run(23100*time.Millisecond), clk(23100*time.Millisecond)); len(got) != 1 || got[0] != p {
		t.Fatalf("pauses after the late run: %v, want only %v", got, p)
	}
	next := 23 * time.Second
	for range 2 * maxPauses {
		next += 10 * time.Second
		w.ran(run(next), clk(next))
	}
	if got := w.pausesAt(run(next), clk(next)); len(got) != maxPauses || got[maxPauses-1].to != clk(next) {
		t.Fatalf("%d pauses kept, the last ending at %v; want %d, the last ending at %v", len(got), got[len(got)-1].to, maxPauses, clk(next))
	}
}
