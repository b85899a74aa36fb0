package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	"github.com/tetherhq/tether/services/nats/commands"
)

// retryLater is a command that failed for a reason that may pass (the
// stream could not be read): the command is redelivered, up to
// commandAttempts deliveries in all.
type retryLater struct{ err error }

func (r retryLater) Error() string { return r.err.Error() }
func (r retryLater) Unwrap() error { return r.err }

// A command that failed for a passing reason is redelivered after
// commandRetryDelay, commandAttempts times in all; the controller's start
// deadline covers what is left.
const (
	commandRetryDelay = time.Second
	commandAttempts   = 5
)

// commandHeartbeat is the idle heartbeat of the host's command pull: a
// pull lost with its NATS node is re-issued within two of them (10 s),
// and the pull itself is renewed every four. Every host has its own
// durable consumer, and each heartbeat and renewal wakes goroutines of the
// NATS server: at 10,000 hosts and 2 s, they filled the control plane's
// run queue (5,724 woken in half a second), and the projector and the API
// waited behind them; at 5 s the NATS server's CPU went from 0.32 to
// 0.17-0.22 cores and the control plane's scheduling waits from p99 59 ms
// to 5 ms (docs/scaling.md). Commands do not depend on it alone: the
// controller re-sends a start that was not acted on, and the agent reads
// every server's events again each SyncInterval (syncServers), which
// carries out a stop whose command was lost.
const commandHeartbeat = 5 * time.Second

// redeliverable reports whether m may be delivered again.
func redeliverable(m jetstream.Msg) bool {
	meta, err := m.Metadata()
	return err == nil && meta.NumDelivered < commandAttempts
}

// consumeCommands handles the host's commands until ctx ends. A command is
// acknowledged once handled; one that cannot be decoded is terminated so it
// is not redelivered forever.
func (a *Agent) consumeCommands(ctx context.Context, cons jetstream.Consumer) error {
	cc, err := cons.Consume(func(m jetstream.Msg) {
		cmd, err := commands.Decode(m.Data())
		if err != nil {
			a.log.Error("undecodable command dropped", "subject", m.Subject(), "err", err)
			if err := m.Term(); err != nil {
				a.log.Warn("terminate command", "err", err)
			}
			return
		}
		hctx, span := a.tracer.Start(commands.TraceContext(ctx, m.Headers()), "agent.command",
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(commandAttributes(cmd)...))
		err = a.handle(hctx, cmd)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		if _, later := errors.AsType[retryLater](err); later && redeliverable(m) {
			a.log.Warn("command failed; redelivered in a moment", "command", cmd.GetId(), "err", err)
			if err := m.NakWithDelay(commandRetryDelay); err != nil {
				a.log.Warn("nak command", "command", cmd.GetId(), "err", err)
			}
			return
		}
		if err != nil {
			a.log.Error("command failed", "command", cmd.GetId(), "err", err)
		}
		if err := m.Ack(); err != nil {
			a.log.Warn("ack command", "command", cmd.GetId(), "err", err)
		}
	}, natsjs.FailoverPull(commandHeartbeat)...)
	if err != nil {
		return fmt.Errorf("agent: consume commands: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

// commandAttributes describe a command in its span: what it asks and of
// which game server.
func commandAttributes(cmd *agentv1.Command) []attribute.KeyValue {
	var action, server string
	switch c := cmd.GetAction().(type) {
	case *agentv1.Command_Start:
		action, server = "start", c.Start.GetGameServer()
	case *agentv1.Command_Stop:
		action, server = "stop", c.Stop.GetGameServer()
	case *agentv1.Command_Refresh:
		action, server = "refresh", c.Refresh.GetGameServer()
	}
	return []attribute.KeyValue{attribute.String("tether.command", action), attribute.String("tether.game_server", server)}
}
