package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"
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

// consumeCommands handles the host's commands until ctx ends, from cons
// and from any consumer made anew after it is lost (watchCommandConsumer).
// A command is acknowledged once handled; one that cannot be decoded is
// terminated so it is not redelivered forever.
func (a *Agent) consumeCommands(ctx context.Context, cons jetstream.Consumer) error {
	var cursor commandCursor
	// gone is signalled when a pull says the consumer may be gone: the
	// server says it was deleted, or no server answers for it (a NATS
	// server that restarted has no memory-stored consumer).
	gone := make(chan struct{}, 1)
	opts := append(natsjs.FailoverPull(commandHeartbeat), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if consumerMayBeGone(err) {
			select {
			case gone <- struct{}{}:
			default:
			}
		}
	}))
	var cc jetstream.ConsumeContext // nil while not consuming
	defer func() {
		if cc != nil {
			cc.Stop()
		}
	}()
	for {
		if cc == nil {
			var err error
			if cc, err = cons.Consume(func(m jetstream.Msg) { a.handleCommand(ctx, m, &cursor) }, opts...); err != nil {
				a.log.Warn("consume commands; retrying", "err", err, "retry_in", commandHeartbeat)
				cc = nil
				if !sleepCtx(ctx, commandHeartbeat) {
					return nil
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-gone:
		case <-cc.Closed():
		}
		next, err := a.ensureCommandConsumer(ctx, cons, &cursor)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The next failed pull (or the stopped consume) brings the
			// agent back here: NATS may be away still.
			a.log.Warn("look up the command consumer; retrying", "err", err, "retry_in", commandHeartbeat)
			if !sleepCtx(ctx, commandHeartbeat) {
				return nil
			}
			continue
		}
		if next != cons || isClosed(cc.Closed()) {
			cc.Stop()
			cons, cc = next, nil
		}
	}
}

// ensureCommandConsumer looks the host's command consumer up, creating it
// if it is gone, from the first command the agent has not settled.
func (a *Agent) ensureCommandConsumer(ctx context.Context, cons jetstream.Consumer, cursor *commandCursor) (jetstream.Consumer, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*commandHeartbeat)
	defer cancel()
	from := cursor.from()
	next, err := a.opts.Commands.Consumer(lctx, a.opts.HostID, from)
	if err != nil {
		return nil, err
	}
	if next.CachedInfo().Created.Equal(cons.CachedInfo().Created) {
		return cons, nil
	}
	a.log.Info("command consumer lost (a NATS restart loses it); made anew", "from_sequence", from)
	return next, nil
}

// consumerMayBeGone reports whether a pull's error says its consumer may
// no longer exist.
func consumerMayBeGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders)
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// handleCommand handles one command message and settles it: acknowledged
// once handled (or found settled before), terminated if undecodable, or
// redelivered later if it failed for a reason that may pass.
func (a *Agent) handleCommand(ctx context.Context, m jetstream.Msg, cursor *commandCursor) {
	var seq uint64
	if meta, err := m.Metadata(); err == nil {
		seq = meta.Sequence.Stream
	}
	if seq > 0 && !cursor.receive(seq) {
		// Delivered again by a consumer that lost its state (every NATS
		// node holding it restarted): the agent carried it out before.
		a.log.Debug("command settled before; acknowledged again", "sequence", seq)
		a.ack(m, "")
		return
	}
	cmd, err := commands.Decode(m.Data())
	if err != nil {
		a.log.Error("undecodable command dropped", "subject", m.Subject(), "err", err)
		if err := m.Term(); err != nil {
			a.log.Warn("terminate command", "err", err)
		}
		cursor.settle(seq)
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
		return // still held: a consumer made anew starts at it
	}
	if err != nil {
		a.log.Error("command failed", "command", cmd.GetId(), "err", err)
	}
	a.ack(m, cmd.GetId())
	cursor.settle(seq)
}

// ack acknowledges a command message, logging a failure: the command is
// then delivered again after the consumer's AckWait, and found settled.
func (a *Agent) ack(m jetstream.Msg, id string) {
	if err := m.Ack(); err != nil {
		a.log.Warn("ack command", "command", id, "err", err)
	}
}

// commandCursor is how far the agent has handled its host's commands, by
// stream sequence. A consumer delivers a host's commands in stream order
// (a command held for a retry comes again later), so every command below
// the highest one received was received: it is settled, or held for a
// retry. A consumer made anew starts at the first command not settled
// (from), and a command received again that was settled is skipped
// (receive).
type commandCursor struct {
	mu   sync.Mutex
	next uint64              // one past the highest sequence received; 0 before the first
	held map[uint64]struct{} // received and not settled: being handled, or to be retried
}

// receive records a command's delivery; it reports false for one settled
// before, which is not to be handled again.
func (c *commandCursor) receive(seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, held := c.held[seq]; seq < c.next && !held {
		return false
	}
	if c.held == nil {
		c.held = map[uint64]struct{}{}
	}
	c.held[seq] = struct{}{}
	c.next = max(c.next, seq+1)
	return true
}

// settle records that a command was carried out (or dropped) for good.
func (c *commandCursor) settle(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, seq)
}

// from is the stream sequence a consumer made anew starts at: the first
// command held, or the one after the last received; 0 if none was.
func (c *commandCursor) from() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	from := c.next
	for seq := range c.held {
		from = min(from, seq)
	}
	return from
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
