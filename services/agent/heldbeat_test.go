package agent_test

import (
	"context"
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

// readyHeld holds the append of GameServerReady until release is closed,
// as an append does while NATS is too busy to answer for seconds.
type readyHeld struct {
	*natsjs.Store
	held    chan struct{} // closed when the append is being held
	release chan struct{}
}

func (s *readyHeld) Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	if len(evs) > 0 && evs[0].Type == "GameServerReady" {
		close(s.held)
		select {
		case <-s.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return s.Store.Append(ctx, subject, expected, evs...)
}

// A heartbeat never waits for the server's own appends. While the agent
// appends the server's GameServerReady for longer than three health
// periods (NATS busy), the process goes on heartbeating: each heartbeat
// call is answered at once, and none of those periods counts as missed.
// Before, a heartbeat waited for the server's lock behind the append, the
// game could not beat again meanwhile, and the agent judged a healthy
// server FAILED for periods it was itself too busy to take the beats in
// (false terminations at 100,000 simulated servers).
func TestHeartbeatsAreTakenWhileTheServersAppendWaits(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	store := &readyHeld{held: make(chan struct{}), release: make(chan struct{})}
	h := newHarnessOpts(t, func(o *agent.Options) {
		o.Clock = clk
		store.Store = o.Store.(*natsjs.Store)
		o.Store = store
	})
	name := "fleets/arena/gameServers/gs-beating"
	h.scheduleSpec(name, &eventsv1.FleetSpec{
		Template: &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}},
		Health:   &eventsv1.HealthPolicy{PeriodSeconds: 5, FailureThreshold: 3},
	})
	h.waitEvent(name, "ProcessStarted")
	sdk := sdkClient(t, h, name)
	if _, err := sdk.Health(h.ctx, &sdkv1.HealthRequest{}); err != nil {
		t.Fatal(err)
	}

	readied := make(chan error, 1)
	go func() {
		_, err := sdk.Ready(h.ctx, &sdkv1.ReadyRequest{})
		readied <- err
	}()
	select {
	case <-store.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the Ready append never began")
	}
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
	// The evaluation that waited behind the append judges now, and the
	// ones after it: with the beats taken, none may report a missed period.
	for range 3 {
		clk.Advance(time.Second)
		if _, err := sdk.Health(h.ctx, &sdkv1.HealthRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(4 * time.Second) // one more evaluation, inside a period of the last beat
	wait.Holds(t, notYet, "no missed heartbeat reported", func() bool {
		return !h.has(name, "HealthDegraded") && !h.has(name, "GameServerUnhealthy")
	})
}
