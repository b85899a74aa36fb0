package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// appendHeld holds the appends of an event type until release is closed,
// as an append does while NATS is too busy to answer for seconds.
type appendHeld struct {
	*natsjs.Store
	typ     string
	once    sync.Once
	held    chan struct{} // closed when the first append is being held
	release chan struct{}
}

func (s *appendHeld) Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	if len(evs) > 0 && evs[0].Type == s.typ {
		s.once.Do(func() { close(s.held) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return s.Store.Append(ctx, subject, expected, evs...)
}

// heldHarness starts an agent, on clk unless it is nil, whose appends of
// typ are held until the store's release is closed.
func heldHarness(t *testing.T, typ string, clk clockwork.Clock) (*harness, *appendHeld) {
	t.Helper()
	store := &appendHeld{typ: typ, held: make(chan struct{}), release: make(chan struct{})}
	h := newHarnessOpts(t, func(o *agent.Options) {
		if clk != nil {
			o.Clock = clk
		}
		store.Store = o.Store.(*natsjs.Store)
		o.Store = store
	})
	return h, store
}

// startSleeper schedules name with spec, running /bin/sleep 600, and waits
// for its process to start.
func startSleeper(h *harness, name string, spec *eventsv1.FleetSpec) {
	spec.Template = &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}}
	h.scheduleSpec(name, spec)
	h.waitEvent(name, "ProcessStarted")
}

// waitHeld waits until an append is being held.
func (s *appendHeld) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-s.held:
	case <-time.After(10 * time.Second):
		t.Fatalf("the %s append never began", s.typ)
	}
}

// readyAsync calls Ready as the process would, on a goroutine; the
// channel gets its answer.
func readyAsync(ctx context.Context, sdk sdkv1.SDKServiceClient) <-chan error {
	readied := make(chan error, 1)
	go func() {
		_, err := sdk.Ready(ctx, &sdkv1.ReadyRequest{})
		readied <- err
	}()
	return readied
}

// A heartbeat never waits for the server's own appends. A degraded server
// says Ready, and the agent appends its GameServerReady for longer than
// three health periods (NATS busy) while the process goes on heartbeating:
// each heartbeat call is answered at once, none of those periods counts as
// missed, and the degradation the first of them ended is recorded
// (HealthRecovered) once the append is done. Before, a heartbeat waited
// for the server's lock behind the append, the game could not beat again
// meanwhile, and the agent judged a healthy server FAILED for periods it
// was itself too busy to take the beats in (false terminations at 100,000
// simulated servers).
func TestHeartbeatsAreTakenWhileTheServersAppendWaits(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h, store := heldHarness(t, "GameServerReady", clk)
	name := "fleets/arena/gameServers/gs-beating"
	startSleeper(h, name, &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}})
	sdk := sdkClient(t, h, name)
	// The first call proves the connection; its record is the background
	// fold's.
	if _, err := sdk.Health(h.ctx, &sdkv1.HealthRequest{}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "SdkConnected")
	clk.Advance(10 * time.Second) // one period missed after the initial delay
	h.waitEvent(name, "HealthDegraded")

	readied := readyAsync(h.ctx, sdk)
	store.waitHeld(t)
	// 20 s of the agent's clock, a heartbeat every 2 s, all while the
	// append is held: four periods, over the threshold of three.
	for range 10 {
		clk.Advance(2 * time.Second)
		ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
		_, err := sdk.Health(ctx, &sdkv1.HealthRequest{})
		cancel()
		if err != nil {
			t.Fatalf("a heartbeat call while the server's append waits: %v; want it answered at once", err)
		}
	}
	close(store.release)
	if err := <-readied; err != nil {
		t.Fatalf("Ready: %v", err)
	}
	h.waitEvent(name, "GameServerReady")
	h.waitEvent(name, "HealthRecovered")
	// The evaluations that waited behind the append judge now, and the
	// ones after: with the beats taken, none may report a missed period.
	for range 3 {
		clk.Advance(time.Second)
		if _, err := sdk.Health(h.ctx, &sdkv1.HealthRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(4 * time.Second) // one more evaluation, inside a period of the last beat
	wait.Holds(t, notYet, "no period missed while the append was held", func() bool {
		degraded := 0
		for _, e := range h.history(name) {
			if e.Type == "HealthDegraded" {
				degraded++
			}
		}
		return degraded == 1 && !h.has(name, "GameServerUnhealthy")
	})
}

// A heartbeat's connection left pending while the server's append waits
// does not undo a disconnect recorded after it: the stream's end, then the
// grace window, make the silent server unhealthy as they would have with
// no heartbeat pending. (Whether the stream's end or the pending fold
// takes the server's lock first is the scheduler's choice; either order
// must give this history.)
func TestAPendingConnectionDoesNotUndoALaterDisconnect(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h, store := heldHarness(t, "GameServerReady", clk)
	name := "fleets/arena/gameServers/gs-leaving"
	const grace = 30
	startSleeper(h, name, &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{Disabled: true}, SdkDisconnectGraceSeconds: grace})
	stream := connectSDK(t, h, name)
	sdk := sdkClient(t, h, name)

	readied := readyAsync(h.ctx, sdk)
	store.waitHeld(t)
	// A unary heartbeat while the append waits leaves its connection
	// pending; then the stream ends, and its end waits for the lock too.
	if _, err := sdk.Health(h.ctx, &sdkv1.HealthRequest{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	closed := make(chan error, 1)
	go func() { // the stream's status comes once its end is recorded
		_, err := stream.CloseAndRecv()
		closed <- err
	}()
	close(store.release)
	if err := <-readied; err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "SdkDisconnected")
	clk.Advance(grace * time.Second)
	u := h.waitEvent(name, "GameServerUnhealthy").Data.(*eventsv1.GameServerUnhealthy)
	if u.GetReason() != eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED {
		t.Fatalf("unhealthy with %s, want SDK_DISCONNECT_GRACE_EXPIRED", u.GetReason())
	}
	var steps []string
	for _, e := range h.history(name) {
		if e.Type == "SdkConnected" || e.Type == "SdkDisconnected" {
			steps = append(steps, e.Type)
		}
	}
	if got := strings.Join(steps, " "); got != "SdkConnected SdkDisconnected" {
		t.Fatalf("connection history %s, want SdkConnected SdkDisconnected", got)
	}
}

// An agent stopped while a heartbeat's fold waits behind an append stops:
// the fold records nothing once the agent stops and drops what is pending
// (it used to find its pending connection again and again, and the agent
// waited for it for ever).
func TestAnAgentStoppingWithAHeartbeatPendingStops(t *testing.T) {
	h, store := heldHarness(t, "GameServerReady", nil)
	name := "fleets/arena/gameServers/gs-stopping"
	startSleeper(h, name, &eventsv1.FleetSpec{})
	sdk := sdkClient(t, h, name)
	_ = readyAsync(h.ctx, sdk) // its answer is the agent's stop
	store.waitHeld(t)
	if _, err := sdk.Health(h.ctx, &sdkv1.HealthRequest{}); err != nil { // left pending: the lock is held
		t.Fatal(err)
	}
	h.crash()
	close(store.release)
	select {
	case err := <-h.done:
		h.done <- err // for the harness's cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop with a heartbeat's fold pending")
	}
}

// A Ready that came before the ready timeout ended is not timed out while
// it waits for the server's lock. A heartbeat's fold holds the lock (its
// SdkConnected append is held) past the timeout; the health evaluation
// queues for the lock, then the process's Ready does. The evaluation, first
// in the queue, used to time the server out (and the Ready was refused);
// now it leaves a server with a Ready under way alone, and it is READY.
func TestAReadyUnderWayIsNotTimedOut(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h, store := heldHarness(t, "SdkConnected", clk)
	name := "fleets/arena/gameServers/gs-late"
	startSleeper(h, name, &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{InitialDelaySeconds: 600, PeriodSeconds: 5, FailureThreshold: 3, ReadyTimeoutSeconds: 10}})
	sdk := sdkClient(t, h, name)
	// The first heartbeat proves the connection: its fold holds the lock.
	if _, err := sdk.Health(h.ctx, &sdkv1.HealthRequest{}); err != nil {
		t.Fatal(err)
	}
	store.waitHeld(t)
	clk.Advance(20 * time.Second) // past the timeout: an evaluation queues for the lock
	readied := readyAsync(h.ctx, sdk)
	wait.For(t, 10*time.Second, "the Ready to be under way", func() bool { return h.agent.ReadyCallsUnderWay(name) == 1 })
	close(store.release)
	if err := <-readied; err != nil {
		t.Fatalf("a Ready under way when the timeout ended: %v", err)
	}
	h.waitEvent(name, "GameServerReady")
	if h.has(name, "GameServerUnhealthy") {
		t.Fatal("the server was timed out with its Ready under way")
	}
}

// An SDK stream opened while the server's append waits is not held up
// behind it: its heartbeats are noted as they come, and once the append is
// done the connection is recorded and no period counts as missed. Before,
// the stream's opening waited for the server's lock to record the
// connection, and its heartbeats were read only after (the simulator's
// processes missed their first periods so, waiting to connect).
func TestAStreamOpenedWhileTheServersAppendWaitsIsNotHeldUp(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h, store := heldHarness(t, "GameServerReady", clk)
	name := "fleets/arena/gameServers/gs-streaming"
	startSleeper(h, name, &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}})
	sdk := sdkClient(t, h, name)
	readied := readyAsync(h.ctx, sdk)
	store.waitHeld(t)
	stream, err := sdk.HealthStream(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		clk.Advance(2 * time.Second)
		if err := stream.Send(&sdkv1.HealthStreamRequest{}); err != nil {
			t.Fatal(err)
		}
		at := clk.Now()
		wait.For(t, 5*time.Second, "the stream's heartbeat noted while the append waits", func() bool {
			return !h.agent.LastHealthPing(name).Before(at)
		})
	}
	close(store.release)
	if err := <-readied; err != nil {
		t.Fatalf("Ready: %v", err)
	}
	h.waitEvent(name, "GameServerReady")
	h.waitEvent(name, "SdkConnected")
	clk.Advance(time.Second)
	if err := stream.Send(&sdkv1.HealthStreamRequest{}); err != nil {
		t.Fatal(err)
	}
	wait.Holds(t, notYet, "no period missed while the append was held", func() bool {
		return !h.has(name, "HealthDegraded") && !h.has(name, "GameServerUnhealthy")
	})
}
