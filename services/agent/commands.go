package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
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
// and from any consumer made anew after it is lost
// (ensureCommandConsumer). A command is acknowledged once handled; one
// that cannot be decoded is terminated so it is not redelivered forever.
func (a *Agent) consumeCommands(ctx context.Context, cons jetstream.Consumer) error {
	var cursor commandCursor
	cursor.setServerTime(cons.CachedInfo().TimeStamp, a.opts.Clock.Now())
	// gone is signalled when a pull says the consumer may be gone: the
	// server says it was deleted, or no server answers for it (a NATS
	// server that restarted has no memory-stored consumer).
	gone := make(chan struct{}, 1)
	opts := append(jsclient.FailoverPull(commandHeartbeat), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !consumerMayBeGone(err) {
			a.log.Debug("command pull", "err", err)
			return
		}
		select {
		case gone <- struct{}{}:
		default:
		}
	}))
	// handling is held while a command is handled; generation counts the
	// consumes, so a handler of a stopped one that starts late does nothing
	// (its command comes again from the consumer in use).
	var (
		handling   sync.Mutex
		generation int
	)
	handler := func(gen int) jetstream.MessageHandler {
		return func(m jetstream.Msg) {
			handling.Lock()
			defer handling.Unlock()
			if gen == generation {
				a.handleCommand(ctx, m, &cursor)
			}
		}
	}
	var cc jetstream.ConsumeContext // nil while not consuming
	defer func() {
		if cc != nil {
			cc.Stop()
		}
	}()
	for {
		if cc == nil {
			var err error
			if cc, err = cons.Consume(handler(generation), opts...); err != nil {
				cc = nil
				a.log.Warn("consume commands; retrying", "err", err, "retry_in", commandHeartbeat)
				if !sleepCtx(ctx, jittered(commandHeartbeat)) {
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
		// Every agent hears of a NATS restart at once: spread their
		// look-ups.
		if !sleepCtx(ctx, jittered(commandHeartbeat)/4) {
			return nil
		}
		next, err := a.ensureCommandConsumer(ctx, cons, &cursor)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The next failed pull (or the stopped consume) brings the
			// agent back here: NATS may be away still.
			a.log.Warn("look up the command consumer; retrying", "err", err)
			continue
		}
		if next == cons && !isClosed(cc.Closed()) {
			continue
		}
		// A consume that stopped on its own, or a consumer made anew: wait
		// for the handler in hand, then consume again.
		cc.Stop()
		handling.Lock()
		generation++
		handling.Unlock()
		cons, cc = next, nil
	}
}

// jittered returns a duration between d/2 and 3d/2.
func jittered(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// ensureCommandConsumer looks the host's command consumer up, making it
// anew if it is gone, from the first command the agent has not settled.
func (a *Agent) ensureCommandConsumer(ctx context.Context, cons jetstream.Consumer, cursor *commandCursor) (jetstream.Consumer, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*commandHeartbeat)
	defer cancel()
	from := cursor.from()
	next, err := a.opts.Commands.Consumer(lctx, a.opts.HostID, from)
	if err != nil {
		return nil, err
	}
	cursor.setServerTime(next.CachedInfo().TimeStamp, a.opts.Clock.Now())
	if next.CachedInfo().Created.Equal(cons.CachedInfo().Created) {
		return cons, nil
	}
	a.log.Info("command consumer lost (a NATS restart loses it); made anew", "from_sequence", from)
	return next, nil
}

// consumerMayBeGone reports whether a pull's error says its consumer may
// no longer exist: deleted while a pull waited, or no server answering for
// it.
func consumerMayBeGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders)
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
// once handled (or found settled before, or moot), terminated if
// undecodable, or redelivered later if it failed for a reason that may
// pass.
func (a *Agent) handleCommand(ctx context.Context, m jetstream.Msg, cursor *commandCursor) {
	meta, err := m.Metadata()
	if err != nil {
		a.log.Error("command without its stream metadata dropped", "subject", m.Subject(), "err", err)
		if err := m.Term(); err != nil {
			a.log.Warn("terminate command", "err", err)
		}
		return
	}
	seq := meta.Sequence.Stream
	if !cursor.receive(seq, meta.Timestamp) {
		// Delivered again by a consumer that lost its state (every NATS
		// node holding it restarted): the agent carried it out before.
		a.log.Debug("command settled before; acknowledged again", "sequence", seq)
		a.ack(m, "")
		return
	}
	if age := cursor.age(meta.Timestamp, a.opts.Clock.Now()); age > commands.Lookback {
		// Moot (commands.Lookback): a consumer that lost its state
		// delivers the host's last hour again, and an agent away longer
		// finds its servers' starts re-sent and their stops in their
		// histories.
		a.log.Info("command older than the look-back skipped", "sequence", seq, "age", age.Round(time.Second), "lookback", commands.Lookback)
		a.ack(m, "")
		cursor.settle(seq)
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
// (receive). A command below the highest received but stored after it
// comes from a stream made anew, whose sequences start again: the cursor
// starts again with it.
//
// It also keeps how far the NATS server's clock is ahead of the agent's,
// so a command's age is read on the server's clock, which stored it: a
// host whose clock is off does not take every command for a stale one.
type commandCursor struct {
	mu          sync.Mutex
	next        uint64              // one past the highest sequence received; 0 before the first
	newest      time.Time           // when the highest sequence received was stored
	held        map[uint64]struct{} // received and not settled: being handled, or to be retried
	serverAhead time.Duration       // the NATS server's clock less the agent's
}

// setServerTime records the NATS server's time (as it answered a request;
// zero if it did not say) against the agent's clock at the answer.
func (c *commandCursor) setServerTime(server, local time.Time) {
	if server.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.serverAhead = server.Sub(local)
}

// age is how long ago, on the server's clock, a command was stored.
func (c *commandCursor) age(stored, local time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return local.Add(c.serverAhead).Sub(stored)
}

// receive records a command's delivery (its stream sequence and the time
// the stream stored it); it reports false for one settled before, which
// is not to be handled again.
func (c *commandCursor) receive(seq uint64, stored time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq < c.next && stored.After(c.newest) { // a stream made anew
		c.next, c.held = 0, nil
	}
	if _, held := c.held[seq]; seq < c.next && !held {
		return false
	}
	if c.held == nil {
		c.held = map[uint64]struct{}{}
	}
	c.held[seq] = struct{}{}
	if seq >= c.next {
		c.next, c.newest = seq+1, stored
	}
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
