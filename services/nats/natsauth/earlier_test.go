package natsauth_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/tetherhq/tether/events"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// An agent whose credentials an earlier version made (before agents took
// their commands on the wire, and before `tether nats-auth init` was run
// again) cannot subscribe to its commands. The server refuses that apart
// from the subscribe call, which succeeds: the agent says so at start-up,
// and still carries out its commands, from its durable consumer.
func TestAnAgentWithEarlierCredentialsSaysSoAndTakesCommandsFromItsConsumer(t *testing.T) {
	dir, srv := startAuthServer(t, "h1")
	rewriteClaims(t, dir, natsauth.HostPrincipal("h1"), func(uc *jwt.UserClaims) { uc.Sub.Allow.Remove(commands.Subject("h1")) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, setup := connectAs(t, dir, srv, natsauth.Admin)
	if err := migrate.NATS(ctx, setup, migrate.Options{}); err != nil {
		t.Fatal(err)
	}

	host := join(t, ctx, dir, srv, natsauth.HostPrincipal("h1"), nil)
	bus, err := commands.New(ctx, host.js)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	ports := freeport.Block(t, 2)
	ag, err := agent.New(agent.Options{
		HostID: "h1", JetStream: host.js, Store: host.store, Commands: bus, LogDir: t.TempDir(),
		SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0", PortMin: ports, PortMax: ports + 1,
		KillProcessesOnExit: true, Logger: slog.New(slog.NewTextHandler(logs, nil)), CommandBackstop: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ag.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	defer func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", logs)
		}
	}()
	wait.For(t, 15*time.Second, "the agent to say its credentials refuse its commands on the wire", func() bool {
		return strings.Contains(logs.String(), "do not allow this agent to take its commands on the wire")
	})
	if strings.Contains(logs.String(), "taking commands on the wire") {
		t.Error("the agent also said it takes its commands on the wire")
	}

	// The controller schedules a server on h1: the agent starts it.
	ctl := join(t, ctx, dir, srv, natsauth.Controller, nil)
	ctlBus, err := commands.New(ctx, ctl.js)
	if err != nil {
		t.Fatal(err)
	}
	const gs = "fleets/arena/gameServers/gs-earlier"
	spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}}}
	events.NormalizeFleetSpec(spec)
	msgs, err := events.DecideGameServer(gs, nil, events.ScheduleGameServer{Host: "hosts/h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.store.Append(ctx, events.MustSubject(gs), 0, events.New(gs, time.Now(), msgs[0])); err != nil {
		t.Fatal(err)
	}
	if err := ctlBus.Send(ctx, "h1", "tests", &agentv1.Command{Action: &agentv1.Command_Start{Start: &agentv1.StartGameServer{
		GameServer: gs, Template: spec.Template, Health: spec.Health,
	}}}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 15*time.Second, gs+" to be started", func() error {
		hist, err := ctl.store.History(ctx, events.MustSubject(gs), 0)
		if err != nil {
			return err
		}
		for _, e := range hist {
			if e.Type == "ProcessStarted" {
				return nil
			}
		}
		return fmt.Errorf("not started yet: %d events", len(hist))
	})
}
