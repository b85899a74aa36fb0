package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// notYet is how long a test watches for an event that must not come yet.
// It proves little on its own; the event that must come right after the
// clock passes the boundary is the real check.
const notYet = 300 * time.Millisecond

// The health contract (initial delay, period, threshold) runs on the
// agent's clock: a silent process is degraded one period after its initial
// delay, a heartbeat recovers it, and three missed periods from that
// heartbeat make it unhealthy with the evidence. The test moves the clock;
// the 25 s the contract spans take no real time.
func TestHealthContractRunsOnTheAgentsClock(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	t0 := clk.Now()
	h := newHarnessOpts(t, func(o *agent.Options) { o.Clock = clk })
	name := "fleets/arena/gameServers/gs-silent"
	h.scheduleSpec(name, &eventsv1.FleetSpec{
		Template: &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}},
		Health:   &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3},
	})
	h.waitEvent(name, "ProcessStarted")
	sdk := sdkClient(t, h, name)

	// Counting starts after the initial delay: the first period ends at 10 s.
	clk.Advance(10*time.Second - time.Millisecond)
	wait.Holds(t, notYet, "no missed heartbeat before the first period ends", func() bool { return !h.has(name, "HealthDegraded") })
	clk.Advance(time.Millisecond)
	if d := h.waitEvent(name, "HealthDegraded").Data.(*eventsv1.HealthDegraded); d.GetMissedPeriods() != 1 {
		t.Fatalf("degraded with %d missed periods, want 1", d.GetMissedPeriods())
	}

	// A heartbeat ends the degradation; periods count from it.
	if _, err := sdk.Health(h.ctx, &sdkv1.HealthRequest{}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "HealthRecovered")
	beat := clk.Now()
	clk.Advance(15 * time.Second)
	u := h.waitEvent(name, "GameServerUnhealthy").Data.(*eventsv1.GameServerUnhealthy)
	ev := u.GetEvidence()
	if u.GetReason() != eventsv1.Reason_REASON_HEALTH_CHECK_FAILED || ev.GetMissedPeriods() != 3 ||
		!ev.GetLastHeartbeatTime().AsTime().Equal(beat) || !beat.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("unhealthy: %s, evidence %v; want HEALTH_CHECK_FAILED, 3 missed periods, last heartbeat at %s", u.GetReason(), ev, beat)
	}
}

// SDK disconnect grace runs on the agent's clock: a process whose SDK
// connection ends and that stays silent is unhealthy when the grace ends,
// not before.
func TestDisconnectGraceRunsOnTheAgentsClock(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h := newHarnessOpts(t, func(o *agent.Options) { o.Clock = clk })
	name := "fleets/arena/gameServers/gs-gone"
	const grace = 30
	h.scheduleSpec(name, &eventsv1.FleetSpec{
		Template:                  &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}},
		Health:                    &eventsv1.HealthPolicy{Disabled: true},
		SdkDisconnectGraceSeconds: grace,
	})
	h.waitEvent(name, "ProcessStarted")
	stream := connectSDK(t, h, name)
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	// The stream's heartbeats are all handled before its end is recorded.
	disc := h.waitEvent(name, "SdkDisconnected").Data.(*eventsv1.SdkDisconnected)
	if want := clk.Now().Add(grace * time.Second); !disc.GetGraceDeadline().AsTime().Equal(want) {
		t.Fatalf("grace deadline %s, want %s", disc.GetGraceDeadline().AsTime(), want)
	}

	clk.Advance(grace*time.Second - time.Millisecond)
	wait.Holds(t, notYet, "no verdict inside the grace window", func() bool { return !h.has(name, "GameServerUnhealthy") })
	clk.Advance(time.Millisecond)
	u := h.waitEvent(name, "GameServerUnhealthy").Data.(*eventsv1.GameServerUnhealthy)
	if u.GetReason() != eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED {
		t.Fatalf("unhealthy with %s, want SDK_DISCONNECT_GRACE_EXPIRED", u.GetReason())
	}
}

// connectSDK opens the server's heartbeat stream as its process would and
// waits until the agent recorded the connection.
func connectSDK(t *testing.T, h *harness, name string) grpc.ClientStreamingClient[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse] {
	t.Helper()
	stream, err := sdkClient(t, h, name).HealthStream(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&sdkv1.HealthStreamRequest{}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "SdkConnected")
	return stream
}

// sdkClient is an SDK client that calls as the server's process: with the
// token it is handed.
func sdkClient(t *testing.T, h *harness, name string) sdkv1.SDKServiceClient {
	t.Helper()
	var pid int32
	for _, e := range h.history(name) {
		if p, ok := e.Data.(*eventsv1.ProcessStarted); ok {
			pid = p.GetPid()
		}
	}
	token := h.agent.ProcessToken(int(pid))
	conn, err := grpc.NewClient(h.agent.SDKAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), desc, cc, method, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sdkv1.NewSDKServiceClient(conn)
}

// has reports whether the server's history has an event of a type.
func (h *harness) has(name, typ string) bool {
	h.t.Helper()
	for _, e := range h.history(name) {
		if e.Type == typ {
			return true
		}
	}
	return false
}

// A process still STARTING when the fleet's ready timeout ends, counted on
// the agent's clock from the process's start, is made UNHEALTHY with
// READY_TIMEOUT, not before; one that said Ready in time, and one whose
// health checking is off, are left alone.
func TestReadyTimeoutRunsOnTheAgentsClock(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h := newHarnessOpts(t, func(o *agent.Options) { o.Clock = clk })
	tmpl := &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}}
	// Heartbeats count only after the initial delay, past the timeout: the
	// ready deadline alone is on trial.
	policy := &eventsv1.HealthPolicy{InitialDelaySeconds: 600, PeriodSeconds: 5, FailureThreshold: 3, ReadyTimeoutSeconds: 60}
	stuck, ready, unchecked := "fleets/arena/gameServers/gs-stuck", "fleets/arena/gameServers/gs-ready", "fleets/arena/gameServers/gs-unchecked"
	h.scheduleSpec(stuck, &eventsv1.FleetSpec{Template: tmpl, Health: policy})
	h.scheduleSpec(ready, &eventsv1.FleetSpec{Template: tmpl, Health: policy})
	h.scheduleSpec(unchecked, &eventsv1.FleetSpec{Template: tmpl, Health: &eventsv1.HealthPolicy{Disabled: true, ReadyTimeoutSeconds: 60}})
	for _, name := range []string{stuck, ready, unchecked} {
		h.waitEvent(name, "ProcessStarted")
	}
	started := clk.Now()
	if _, err := sdkClient(t, h, ready).Ready(h.ctx, &sdkv1.ReadyRequest{}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(ready, "GameServerReady")

	clk.Advance(time.Minute - time.Millisecond)
	wait.Holds(t, notYet, "no ready timeout before it ends", func() bool { return !h.has(stuck, "GameServerUnhealthy") })
	clk.Advance(time.Millisecond)
	u := h.waitEvent(stuck, "GameServerUnhealthy").Data.(*eventsv1.GameServerUnhealthy)
	if u.GetReason() != eventsv1.Reason_REASON_READY_TIMEOUT || !strings.Contains(u.GetEvidence().GetDetail(), started.Format(time.RFC3339)) {
		t.Fatalf("unhealthy: %s, evidence %v; want READY_TIMEOUT, saying when the process started", u.GetReason(), u.GetEvidence())
	}
	clk.Advance(time.Minute)
	wait.Holds(t, notYet, "the READY server and the unchecked one left alone", func() bool {
		return !h.has(ready, "GameServerUnhealthy") && !h.has(unchecked, "GameServerUnhealthy")
	})
}

// A pause of the agent (stopped with SIGSTOP, its VM suspended: its clock
// moved and it did not run) counts toward no health period, SDK disconnect
// grace or ready timeout. The agent's watch runs on the fake clock too, so
// a move of the clock is a pause unless the watch is seen to run at each
// step (runFor). After a 30 s pause, a silent server whose periods would
// all have run out, one disconnected a whole grace earlier and one past
// its ready timeout are left alone; each is judged only once it has had
// the time again, counted from the resume: a period, the grace, the
// timeout.
func TestAPauseOfTheAgentCountsTowardNoHealthPeriod(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h := newHarnessOpts(t, func(o *agent.Options) { o.Clock, o.RunClock = clk, clk })
	silent, gone, stuck := "fleets/arena/gameServers/gs-silent", "fleets/arena/gameServers/gs-gone", "fleets/arena/gameServers/gs-stuck"
	tmpl := &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}}
	h.scheduleSpec(silent, &eventsv1.FleetSpec{Template: tmpl, Health: &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}})
	const grace = 30
	h.scheduleSpec(gone, &eventsv1.FleetSpec{Template: tmpl, Health: &eventsv1.HealthPolicy{Disabled: true}, SdkDisconnectGraceSeconds: grace})
	h.scheduleSpec(stuck, &eventsv1.FleetSpec{Template: tmpl,
		Health: &eventsv1.HealthPolicy{InitialDelaySeconds: 600, PeriodSeconds: 5, FailureThreshold: 3, ReadyTimeoutSeconds: 20}})
	for _, name := range []string{silent, gone, stuck} {
		h.waitEvent(name, "ProcessStarted")
	}
	stream := connectSDK(t, h, gone)
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(gone, "SdkDisconnected")
	wait.For(t, 10*time.Second, "the agent's watch to run", func() bool { return h.agent.WatchedAt().Equal(clk.Now()) })

	clk.Advance(30 * time.Second)
	resumed := clk.Now()
	wait.For(t, 10*time.Second, "the pause to be logged", func() bool {
		return strings.Contains(h.logs.String(), "agent did not run for a while")
	})
	judged := func() bool {
		return h.has(silent, "HealthDegraded") || h.has(gone, "GameServerUnhealthy") || h.has(stuck, "GameServerUnhealthy")
	}
	wait.Holds(t, notYet, "no verdict for the pause", func() bool { return !judged() })

	// A period from the resume for the silent server: it had run none
	// before the pause (its initial delay ended in it).
	runFor(t, h, clk, resumed.Add(5*time.Second-time.Millisecond))
	wait.Holds(t, notYet, "no verdict within a period of the resume", func() bool { return !judged() })
	runFor(t, h, clk, resumed.Add(5*time.Second))
	if d := h.waitEvent(silent, "HealthDegraded").Data.(*eventsv1.HealthDegraded); d.GetMissedPeriods() != 1 {
		t.Fatalf("degraded with %d missed periods, want 1", d.GetMissedPeriods())
	}
	// The ready timeout (20 s, none of it run before the pause) and the
	// grace (30 s, likewise) from the resume.
	runFor(t, h, clk, resumed.Add(20*time.Second-time.Millisecond))
	wait.Holds(t, notYet, "no ready timeout before 20 s have run", func() bool { return !h.has(stuck, "GameServerUnhealthy") })
	runFor(t, h, clk, resumed.Add(20*time.Second))
	if u := h.waitEvent(stuck, "GameServerUnhealthy").Data.(*eventsv1.GameServerUnhealthy); u.GetReason() != eventsv1.Reason_REASON_READY_TIMEOUT {
		t.Fatalf("unhealthy with %s, want READY_TIMEOUT", u.GetReason())
	}
	runFor(t, h, clk, resumed.Add(grace*time.Second-time.Millisecond))
	wait.Holds(t, notYet, "no grace expiry before the grace has run", func() bool { return !h.has(gone, "GameServerUnhealthy") })
	runFor(t, h, clk, resumed.Add(grace*time.Second))
	if u := h.waitEvent(gone, "GameServerUnhealthy").Data.(*eventsv1.GameServerUnhealthy); u.GetReason() != eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED {
		t.Fatalf("unhealthy with %s, want SDK_DISCONNECT_GRACE_EXPIRED", u.GetReason())
	}
}

// runFor moves clk, which the agent's run watch ticks on, to until in
// steps the watch is seen to take: time the agent ran, not a pause. After
// each step the watch has run less than a step ago (a step that reaches
// none of its ticks needs no run), so its runs are never more than two
// steps apart, under a pause (its interval and a second).
func runFor(t *testing.T, h *harness, clk *clockwork.FakeClock, until time.Time) {
	t.Helper()
	const step = 500 * time.Millisecond
	for clk.Now().Before(until) {
		clk.Advance(min(step, until.Sub(clk.Now())))
		wait.For(t, 10*time.Second, "the agent's watch to run", func() bool { return clk.Now().Sub(h.agent.WatchedAt()) < step })
	}
}
