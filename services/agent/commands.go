package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	"github.com/tetherhq/tether/services/nats/commands"
)

// retryLater is a command that failed for a reason that may pass (the
// stream could not be read): the command is carried out again from the
// consumer, up to commandAttempts deliveries in all.
type retryLater struct{ err error }

func (r retryLater) Error() string { return r.err.Error() }
func (r retryLater) Unwrap() error { return r.err }

// A command that failed for a passing reason is tried again after
// commandRetryDelay, commandAttempts times in all; the controller's start
// deadline covers what is left. The consumer is read again
// commandRetryRead after such a failure: once the server delivers the
// command again, not at the same moment.
const (
	commandRetryDelay = time.Second
	commandRetryRead  = commandRetryDelay + commandRetryDelay/4
	commandAttempts   = 5
)

// How the agent takes its host's commands (docs/architecture.md, "Commands
// to agents"). Every command is published to the TETHER_COMMANDS stream,
// where the host's durable consumer keeps it; the agent also subscribes to
// the command subject with core NATS, and so gets each command on the wire
// as it is published, without the consumer. The consumer is the backstop:
// the agent reads it at start-up, every DefaultCommandBackstop, at once
// after its connection to NATS comes back, and when the client dropped
// commands from the wire that the agent did not take in time. What the wire missed (the agent
// was cut off, or the NATS node it is connected to was) waits there.
//
// Until 2026-11-27 the agent held a pull open on its consumer, which the
// NATS server heartbeat every 5 s and renewed every 20 s: at 10,000 hosts,
// 10,000 such pulls were the largest item of the NATS server's work, with
// nothing to deliver (docs/scaling.md). A read every 10 s that finds
// nothing costs the server one request, and the subscription of its reply
// inbox and its removal; it keeps no state between reads.
const (
	// DefaultCommandBackstop is how often, on average, the agent reads its
	// consumer for commands the wire did not bring. One and a half of it
	// bounds how late a command published while this agent's NATS node was
	// cut off from the publisher's, without the agent's connection
	// dropping, is carried out.
	DefaultCommandBackstop = 10 * time.Second
	// commandWire bounds the commands waiting on the wire to be carried
	// out; more are dropped by the client (and then read from the
	// consumer).
	commandWire = 1024
	// commandFetch is how many commands one read of the consumer takes.
	commandFetch = 256
	// commandRemembered is how long the agent remembers a command it
	// carried out, so that the consumer's copy is acknowledged without
	// being carried out again: the stream's duplicate window (a retried
	// publish of the same command comes again on the wire within it). A
	// consumer that cannot be read for longer gets the command carried
	// out again when it can, as does a new agent on the host. At most
	// commandRememberedMax are kept; one forgotten early is carried out
	// twice, which every command allows (a start of a running server, a
	// stop of a stopping one and a refresh are no-ops).
	commandRemembered    = 10 * time.Minute
	commandRememberedMax = 1 << 16
)

// Where a command was taken from, in the tether_agent_commands counter.
const (
	viaWire     = "wire"
	viaConsumer = "consumer"
)

// redeliverable reports whether m may be delivered again.
func redeliverable(m jetstream.Msg) bool {
	meta, err := m.Metadata()
	return err == nil && meta.NumDelivered < commandAttempts
}

// carriedOut remembers the commands the agent carried out, by id.
type carriedOut map[string]time.Time

// forget drops what is older than commandRemembered at now, and more if
// the map is still over commandRememberedMax.
func (c carriedOut) forget(now time.Time) {
	for id, at := range c {
		if now.Sub(at) > commandRemembered {
			delete(c, id)
		}
	}
	for id := range c {
		if len(c) <= commandRememberedMax {
			break
		}
		delete(c, id)
	}
}

// commandReader is the agent's loop over its host's commands: the wire's
// and, as a backstop, the durable consumer's. One goroutine runs it, so
// commands are carried out one at a time, as before.
type commandReader struct {
	a    *Agent
	cons jetstream.Consumer
	done carriedOut
	due  time.Time // when the consumer is read next
}

// consumeCommands carries out the host's commands until ctx ends. A
// command from the consumer is acknowledged once carried out; one that
// cannot be decoded is terminated so it is not redelivered forever.
func (a *Agent) consumeCommands(ctx context.Context, cons jetstream.Consumer) error {
	nc := a.opts.JetStream.Conn()
	wire := make(chan *nats.Msg, commandWire)
	sub, err := nc.ChanSubscribe(commands.Subject(a.opts.HostID), wire)
	if err != nil {
		return fmt.Errorf("agent: subscribe to commands: %w", err)
	}
	defer func() {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			a.log.Warn("unsubscribe from commands", "err", err)
		}
	}()
	a.confirmSubscription(ctx, nc, sub.Subject)
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	r := &commandReader{a: a, cons: cons, done: carriedOut{}}
	backstop := time.NewTimer(0) // at once: what waited while the agent was away
	defer backstop.Stop()
	dropped := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-wire:
			if errors.Is(r.take(ctx, m.Data, m.Header, viaWire), errRetry) {
				r.soon(backstop, commandRetryRead)
			}
			// The client drops what the channel has no room for while a
			// command is carried out. (Dropped fails only once the
			// connection is closed, and then nothing more comes.)
			if d, err := sub.Dropped(); err == nil && d != dropped {
				a.log.Warn("commands dropped on the wire while others were carried out; reading the consumer", "dropped", d-dropped)
				dropped = d
				r.soon(backstop, 0)
			}
		case <-reconnected:
			// Within a second, at random: every agent on a NATS node that
			// restarted reconnects at once.
			a.log.Info("reconnected to NATS; reading the command consumer for what the wire missed")
			r.soon(backstop, rand.N(time.Second))
		case <-backstop.C:
			next := r.readConsumer(ctx)
			r.due = time.Now().Add(next)
			backstop.Reset(next)
		}
	}
}

// confirmSubscription waits until the NATS server has the agent's
// subscription to subject (commands published from then on reach it on
// the wire) and logs whether it took it. The server refuses it with an
// error of its own, not the subscribe call's: credentials made before
// this version lack the permission until `tether nats-auth init` is run
// again, and the agent then takes every command from its consumer alone.
func (a *Agent) confirmSubscription(ctx context.Context, nc *nats.Conn, subject string) {
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		if ctx.Err() == nil {
			a.log.Warn("subscribe to commands: not confirmed; the consumer brings what the wire misses", "err", err)
		}
		return
	}
	// The server answers the flush after it has refused the subscription,
	// and the client records the refusal as it reads it, before the answer.
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
		a.log.Error("the NATS credentials do not allow this agent to take its commands on the wire; it takes them from its consumer alone, later. "+
			"Run `tether nats-auth init` again (docs/security.md)", "late_by_up_to", a.opts.CommandBackstop*3/2, "err", err)
		return
	}
	a.log.Info("taking commands on the wire, and from the consumer every backstop", "backstop", a.opts.CommandBackstop)
}

// soon moves the next read of the consumer to within d, if it is later.
func (r *commandReader) soon(t *time.Timer, d time.Duration) {
	if at := time.Now().Add(d); at.Before(r.due) {
		r.due = at
		t.Reset(d)
	}
}

// What take reports of a command it did not carry out.
var (
	// errRetry: it failed for a passing reason, and should be carried out
	// again from the consumer.
	errRetry = errors.New("agent: command to be tried again")
	// errUndecodable: it cannot be decoded, and never will be.
	errUndecodable = errors.New("agent: undecodable command")
)

// take carries out one command unless it was already. It returns errRetry
// or errUndecodable (logged here) for a command not carried out, and nil
// otherwise: a command that failed for good is logged, since trying again
// would fail again.
func (r *commandReader) take(ctx context.Context, data []byte, header nats.Header, via string) error {
	a := r.a
	cmd, err := commands.Decode(data)
	if err != nil {
		a.log.Error("undecodable command dropped", "via", via, "err", err)
		return errUndecodable
	}
	if _, ok := r.done[cmd.GetId()]; ok {
		return nil
	}
	hctx, span := a.tracer.Start(commands.TraceContext(ctx, header), "agent.command",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(append(commandAttributes(cmd), attribute.String("tether.via", via))...))
	err = a.handle(hctx, cmd)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if _, later := errors.AsType[retryLater](err); later {
		a.log.Warn("command failed for a passing reason", "command", cmd.GetId(), "via", via, "err", err)
		return errRetry
	}
	if err != nil {
		a.log.Error("command failed", "command", cmd.GetId(), "via", via, "err", err)
	}
	r.done[cmd.GetId()] = time.Now()
	a.commandsTaken.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("via", via)))
	return nil
}

// readConsumer carries out what the consumer holds that the wire did not
// bring, acknowledges what it did, and returns when to read it again: in
// about a backstop period, or commandRetryRead if a command is to be
// tried again.
func (r *commandReader) readConsumer(ctx context.Context) time.Duration {
	a := r.a
	r.done.forget(time.Now())
	// Anywhere from half to one and a half periods: agents started together
	// (every host after a control-plane outage, or a simulated fleet) would
	// otherwise read at the same moments, 10,000 requests in a burst every
	// period, for ever.
	next := a.opts.CommandBackstop/2 + rand.N(a.opts.CommandBackstop)
	for {
		batch, err := r.cons.FetchNoWait(commandFetch)
		if err != nil {
			a.log.Warn("read the command consumer", "err", err)
			return next
		}
		n, last := 0, time.Now()
		for m := range batch.Messages() {
			if ctx.Err() != nil {
				// Left unacknowledged: the consumer delivers them again
				// after its AckWait, to this host's next agent.
				return next
			}
			n++
			if errors.Is(r.takeDelivered(ctx, m), errRetry) {
				next = min(next, commandRetryRead)
			}
			last = time.Now()
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			if ctx.Err() == nil {
				a.log.Warn("read the command consumer", "err", err)
			}
			return next
		}
		// The server ends a read that does not wait with a status at once;
		// the client gives up after a second without one, and says nothing.
		// What the server sends after that goes nowhere, and is delivered
		// again after the consumer's AckWait (30 s).
		if n < commandFetch && time.Since(last) >= time.Second && ctx.Err() == nil {
			a.log.Warn("read the command consumer: no answer within a second; read again in a moment", "delivered", n)
			return min(next, commandRetryRead)
		}
		if n < commandFetch || ctx.Err() != nil {
			return next
		}
	}
}

// takeDelivered carries out a command the consumer delivered, unless it
// was already, and acknowledges it; it returns errRetry if the command is
// to be delivered again.
func (r *commandReader) takeDelivered(ctx context.Context, m jetstream.Msg) error {
	a := r.a
	switch err := r.take(ctx, m.Data(), m.Headers(), viaConsumer); {
	case errors.Is(err, errUndecodable):
		if err := m.Term(); err != nil {
			a.log.Warn("terminate command", "err", err)
		}
		return nil
	case errors.Is(err, errRetry) && redeliverable(m):
		if err := m.NakWithDelay(commandRetryDelay); err != nil {
			a.log.Warn("nak command", "err", err)
		}
		return errRetry
	case errors.Is(err, errRetry):
		a.log.Error("command given up", "subject", m.Subject(), "attempts", commandAttempts)
	}
	if err := m.Ack(); err != nil {
		a.log.Warn("ack command", "err", err)
	}
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
