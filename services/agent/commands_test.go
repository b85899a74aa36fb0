package agent_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/commands"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// commandsTaken reads the agent's tether_agent_commands counter: the
// commands it carried out, by where it took them from.
func commandsTaken(t *testing.T, h *harness, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(h.ctx, &rm); err != nil {
		t.Fatal(err)
	}
	taken := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "tether_agent_commands" {
				for _, dp := range sum.DataPoints {
					via, _ := dp.Attributes.Value("via")
					taken[via.AsString()] += dp.Value
				}
			}
		}
	}
	return taken
}

// waitCommandSubscription waits until the agent of h says the NATS server
// has its subscription to its commands: commands published from then on
// reach it on the wire.
func waitCommandSubscription(t *testing.T, h *harness) {
	t.Helper()
	wait.For(t, 15*time.Second, "the agent's subscription to its commands", func() bool {
		return strings.Contains(h.logs.String(), "taking commands on the wire")
	})
}

// A command reaches the agent on the wire, without its durable consumer:
// here the consumer is paused, so it delivers nothing, and the agent reads
// it only at start-up. Before, the agent took commands only from the
// consumer, and this start never happened.
func TestCommandsArriveOnTheWire(t *testing.T) {
	k := kit.New(t, kit.WithCommands())
	reader := sdkmetric.NewManualReader()
	h := &harness{t: t, ctx: k.Ctx, js: k.JS, store: k.Store, bus: k.Commands}
	h.startAgent(func(o *agent.Options) {
		o.CommandBackstop = time.Hour
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	waitCommandSubscription(t, h)
	if _, err := k.JS.PauseConsumer(k.Ctx, commands.StreamName, "agent-h1", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	name := "fleets/arena/gameServers/gs-wire"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	h.waitEvent(name, "ProcessStarted")
	// Counted once the start returns, which may be after ProcessStarted.
	waitTaken(t, h, reader, "the start once, on the wire", func(taken map[string]int64) bool {
		return taken["wire"] == 1 && taken["consumer"] == 0
	})
}

// waitTaken waits until the agent's commands counter satisfies ok.
func waitTaken(t *testing.T, h *harness, reader *sdkmetric.ManualReader, want string, ok func(map[string]int64) bool) {
	t.Helper()
	wait.Until(t, 10*time.Second, "commands taken: "+want, func() error {
		if taken := commandsTaken(t, h, reader); !ok(taken) {
			return fmt.Errorf("commands taken %v", taken)
		}
		return nil
	})
}

// A command published while the agent was cut off from NATS never reaches
// it on the wire; it waits in the consumer, which the agent reads as soon
// as its connection is back, not at its next periodic read (here an hour
// away).
func TestCommandsMissedOnTheWireAreReadFromTheConsumer(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h, link := newCutHostOpts(t, func(o *agent.Options) {
		o.CommandBackstop = time.Hour
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	first := "fleets/arena/gameServers/gs-before"
	h.schedule(first, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	h.waitEvent(first, "ProcessStarted")

	link.cut()
	missed := "fleets/arena/gameServers/gs-missed"
	h.schedule(missed, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	link.heal()
	h.waitEvent(missed, "ProcessStarted")
	waitTaken(t, h, reader, "2 in all, the one sent during the cut from the consumer", func(taken map[string]int64) bool {
		return taken["wire"]+taken["consumer"] == 2 && taken["consumer"] >= 1
	})
}

// Every command comes twice, on the wire and from the consumer; it is
// carried out once, and the consumer's copy is acknowledged. (The wire
// brings at least one of them first: the consumer is read 50-150 ms
// apart, the wire's copy arrives as the command is published.)
func TestACommandIsCarriedOutOnce(t *testing.T) {
	k := kit.New(t, kit.WithCommands())
	reader := sdkmetric.NewManualReader()
	h := &harness{t: t, ctx: k.Ctx, js: k.JS, store: k.Store, bus: k.Commands}
	h.startAgent(func(o *agent.Options) {
		o.CommandBackstop = 100 * time.Millisecond
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	waitCommandSubscription(t, h)
	const servers = 4
	for i := range servers {
		name := fmt.Sprintf("fleets/arena/gameServers/gs-once-%d", i)
		h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
		h.waitEvent(name, "ProcessStarted")
	}
	wait.Until(t, 15*time.Second, "the consumer to have delivered and seen acknowledged every command", func() error {
		c, err := k.JS.Consumer(k.Ctx, commands.StreamName, "agent-h1")
		if err != nil {
			return err
		}
		info, err := c.Info(k.Ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || info.Delivered.Consumer < servers {
			return fmt.Errorf("%d pending, %d unacknowledged, %d delivered", info.NumPending, info.NumAckPending, info.Delivered.Consumer)
		}
		return nil
	})
	if taken := commandsTaken(t, h, reader); taken["wire"]+taken["consumer"] != servers || taken["wire"] < 1 {
		t.Fatalf("commands taken %v, want each of the %d starts once, some on the wire", taken, servers)
	}
}
