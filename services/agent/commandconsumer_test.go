package agent_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The host's command consumer keeps its state in memory, and a NATS
// server's restart loses it: here it is deleted. The agent makes it anew
// and carries out the next command. A consumer that delivers the host's
// commands again from the start (as one does that lost its state when every
// node holding it restarted) does not have them carried out twice.
func TestALostCommandConsumerIsMadeAnew(t *testing.T) {
	h := newHarness(t)
	sleep := &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}}
	stream, err := h.js.Stream(h.ctx, commands.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	settled := func(what string) {
		t.Helper()
		wait.For(t, 15*time.Second, what, func() bool {
			c, err := stream.Consumer(h.ctx, "agent-h1")
			if err != nil {
				return false
			}
			info := c.CachedInfo()
			return info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream > 0
		})
	}

	first := "fleets/arena/gameServers/gs-first"
	h.schedule(first, sleep)
	firstPid := int(h.waitEvent(first, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	settled("the first start acknowledged")
	if err := stream.DeleteConsumer(h.ctx, "agent-h1"); err != nil {
		t.Fatal(err)
	}
	second := "fleets/arena/gameServers/gs-second"
	h.schedule(second, sleep)
	h.waitEvent(second, "ProcessStarted")
	settled("the second start acknowledged")
	if !strings.Contains(h.logs.String(), "command consumer lost") {
		t.Fatalf("the agent did not say it made its consumer anew; its log:\n%s", h.logs.String())
	}

	// The first server ends (terminated by the controller), so a start
	// of it carried out again would read its history and be refused.
	hist := h.history(first)
	msgs, err := events.DecideGameServer(first, fold(t, hist), events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(h.ctx, events.MustSubject(first), hist[len(hist)-1].Sequence, events.New(first, time.Now(), msgs[0])); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 15*time.Second, "the agent to forget the terminated server", func() bool { return h.agent.ProcessToken(firstPid) == "" })

	// A consumer in its place that delivers every command again.
	wait.For(t, 30*time.Second, "a consumer delivering from the start in the agent's consumer's place", func() bool {
		if err := stream.DeleteConsumer(h.ctx, "agent-h1"); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatal(err)
		}
		_, err := stream.CreateConsumer(h.ctx, jetstream.ConsumerConfig{
			Durable: "agent-h1", FilterSubject: commands.Subject("h1"), AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 30 * time.Second, MaxDeliver: 10, MemoryStorage: true, DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		return err == nil
	})
	third := "fleets/arena/gameServers/gs-third"
	h.schedule(third, sleep)
	h.waitEvent(third, "ProcessStarted")
	settled("the three starts acknowledged")
	if strings.Contains(h.logs.String(), "not SCHEDULED") {
		t.Fatalf("a start delivered again was carried out again; the agent's log:\n%s", h.logs.String())
	}
}

// A command stored more than commands.Lookback ago, on the NATS server's
// clock, is moot and not carried out: here the agent's clock moves past it
// (the server's is read against it), as an agent away for longer, or a
// consumer that lost its state, finds the host's old commands.
func TestACommandOlderThanTheLookBackIsNotCarriedOut(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h := newHarnessOpts(t, func(o *agent.Options) { o.Clock = clk })
	spec := func() *eventsv1.FleetSpec {
		return &eventsv1.FleetSpec{
			Template: &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}},
			Health:   &eventsv1.HealthPolicy{Disabled: true},
		}
	}
	fresh := "fleets/arena/gameServers/gs-fresh"
	h.scheduleSpec(fresh, spec())
	h.waitEvent(fresh, "ProcessStarted") // the agent consumes its commands

	clk.Advance(commands.Lookback + time.Second)
	stale := "fleets/arena/gameServers/gs-stale"
	h.scheduleSpec(stale, spec())
	wait.For(t, 10*time.Second, "the agent to skip the stale start", func() bool {
		return strings.Contains(h.logs.String(), "command older than the look-back skipped")
	})
	for _, e := range h.history(stale) {
		if e.Type != "GameServerScheduled" {
			t.Fatalf("the stale start was carried out: %s", e.Type)
		}
	}
}
