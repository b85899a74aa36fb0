// Package commands carries controller → agent commands (start and stop a
// game server) on the TETHER_COMMANDS stream, one subject per host:
// tether.cmd.host.<host> (docs/architecture.md, "Streams and buckets").
// Each host's agent consumes its subject with a durable consumer, so
// commands wait while an agent is away.
// The consumer's state is kept in memory (consumerConfig says why), and an
// agent makes its consumer anew when a NATS restart loses it.
//
// The stream keeps commands for CommandTTL under limits retention, not as a
// work queue: a work queue (or interest retention) makes the server look,
// on every acknowledgement, through every consumer of the stream for one
// still interested in the message, so each command costs O(hosts) there: at
// 10,000 hosts that scan dominated the NATS server's CPU (docs/scaling.md).
// Under limits retention an acknowledgement only moves its own consumer's
// ack floor. A durable consumer still gets each command once; a command
// nobody consumed expires.
package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
)

// StreamName is the commands stream.
const StreamName = "TETHER_COMMANDS"

// CommandTTL is how long a command waits for its agent. An older one is
// moot: the controller re-sends the start of a server still SCHEDULED after
// its start timeout, a host silent for a minute is judged lost and its
// servers replaced, and an agent re-reads its servers' histories (so it
// learns of stops) when its heartbeat resumes.
const CommandTTL = time.Hour

// MaxHosts bounds the hosts (agents' durable consumers) the stream serves.
const MaxHosts = 1 << 20

// subjectPrefix starts every command subject.
const subjectPrefix = "tether.cmd.host."

// Subject returns the command subject of a host id.
func Subject(host string) string { return subjectPrefix + host }

// Bus publishes and consumes commands.
type Bus struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// streamConfig is the commands stream's configuration.
func streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamName,
		Description: "Tether commands to host agents (one subject per host; each agent's durable consumer reads its own)",
		Subjects:    []string{subjectPrefix + "*"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  10 * time.Minute,
		MaxAge:      CommandTTL,
		// One durable consumer per host: without a limit of its own, the
		// stream would take nats-server's default of 1,000 consumers.
		MaxConsumers: MaxHosts,
	}
}

// Setup creates the commands stream with the given replicas, or updates it
// where it differs (jsclient.EnsureStream): `tether migrate` runs it. A
// stream made by an earlier version (a work queue, with the server's
// default consumer limit) cannot change its retention or consumer limit in
// place: it is replaced (its pending commands are lost; the controller
// re-sends starts, and agents re-read their servers), and agents must be
// restarted after the control plane, to consume from the new stream.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int) error {
	cfg := streamConfig()
	cfg.Replicas = max(replicas, 1)
	replaced := false
	if old, err := js.Stream(ctx, StreamName); err == nil && (old.CachedInfo().Config.Retention != cfg.Retention || old.CachedInfo().Config.MaxConsumers != cfg.MaxConsumers) {
		if err := js.DeleteStream(ctx, StreamName); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("commands: replace the %s stream of an earlier version: %w", old.CachedInfo().Config.Retention, err)
		}
		replaced = true
	} else if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("commands: look up stream: %w", err)
	}
	stream, err := jsclient.EnsureStream(ctx, js, cfg)
	if replaced {
		_, err = retryStoreFailed(ctx, stream, err, func() (jetstream.Stream, error) { return jsclient.EnsureStream(ctx, js, cfg) })
	}
	if err != nil {
		return fmt.Errorf("commands: set up stream: %w", err)
	}
	return nil
}

// New returns a bus over the commands stream. It does not create the
// stream: a missing one is an error wrapping jsclient.ErrNotSetUp.
func New(ctx context.Context, js jetstream.JetStream) (*Bus, error) {
	stream, err := js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, jsclient.NotSetUp("stream " + StreamName)
	}
	if err != nil {
		return nil, fmt.Errorf("commands: stream %s: %w", StreamName, err)
	}
	return &Bus{js: js, stream: stream}, nil
}

// jsErrStreamStoreFailed is the JetStream API's "error creating store for
// stream" (JSStreamStoreFailedErr).
const jsErrStreamStoreFailed jetstream.ErrorCode = 10049

// storeRetryBudget bounds how long a stream's re-creation is retried.
const storeRetryBudget = 5 * time.Second

// retryStoreFailed retries create while it fails with "error creating store
// for stream", for at most storeRetryBudget. nats-server (2.15) deletes a
// stream's directory, and then its parent if empty, in the background: a
// stream created again at once can find its directory removed under it.
func retryStoreFailed(ctx context.Context, stream jetstream.Stream, err error, create func() (jetstream.Stream, error)) (jetstream.Stream, error) {
	deadline := time.Now().Add(storeRetryBudget)
	for delay := 10 * time.Millisecond; isStoreFailed(err) && time.Now().Before(deadline); delay = min(2*delay, 500*time.Millisecond) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		stream, err = create()
	}
	return stream, err
}

// isStoreFailed reports whether err is the JetStream API's
// JSStreamStoreFailedErr.
func isStoreFailed(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStreamStoreFailed
}

// Send publishes a command to a host (its id, not its resource name). The
// command id is filled in if empty and used for de-duplication.
func (b *Bus) Send(ctx context.Context, host, sender string, cmd *agentv1.Command) error {
	if err := events.CheckID(host); err != nil {
		return fmt.Errorf("commands: host: %w", err)
	}
	if cmd.Id == "" {
		cmd.Id = events.NewEventID()
	}
	cmd.Sender = sender
	if cmd.IssueTime == nil {
		cmd.IssueTime = timestamppb.Now()
	}
	data, err := proto.Marshal(cmd)
	if err != nil {
		return fmt.Errorf("commands: encode: %w", err)
	}
	msg := &nats.Msg{Subject: Subject(host), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, cmd.Id)
	// The sender's trace goes with the command: the agent's handling is
	// part of it (an allocation's trace reaches the game server).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(msg.Header))
	if _, err := jsclient.PublishWaiting(ctx, b.js, msg, jsclient.DefaultUnavailableWait); err != nil {
		return fmt.Errorf("commands: send to %s: %w", host, err)
	}
	return nil
}

// Lookback is how far back a host's command consumer starts when it is
// created with no position to start from (a new host, or an agent whose
// consumer was lost before it handled a command). An older command is
// moot: the controller re-sends the start of a server still SCHEDULED after
// its start timeout (default 10 s), and an agent re-reads its servers'
// histories, which carries out their stops, every SyncInterval (default
// 1 min) and when it starts.
const Lookback = 2 * time.Minute

// consumerPrefix starts every host's command consumer's durable name.
const consumerPrefix = "agent-"

// consumerName is the durable name of a host's command consumer.
func consumerName(host string) string { return consumerPrefix + host }

// consumerConfig is a host's command consumer's configuration, delivering
// from the stream sequence from, or (from 0) from the commands sent in the
// last Lookback before now.
//
// Its state (what it delivered, what was acknowledged) is kept in memory,
// not in files: nats-server writes a file-stored consumer's state to a
// new file and renames it, up to ten times a second, for each consumer
// whose state changed, and each command changes it twice. At 10,000
// hosts that was 37 % of the control plane's CPU while a fleet of 100,000
// servers started, and the start took twice as long (docs/scaling.md). A
// NATS server (or, clustered, every replica of the consumer) that
// restarts loses that state, and a standalone server the consumer itself:
// the agent recreates it from the first command it has not settled
// (services/agent), and skips commands it had settled before.
func consumerConfig(host string, from uint64, now time.Time) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       consumerName(host),
		FilterSubject: Subject(host),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    10,
		Description:   "Commands of host " + host,
		MemoryStorage: true,
	}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	} else {
		start := now.Add(-Lookback)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	return cfg
}

// Consumer returns the durable consumer of one host's commands: the one
// the stream has (its settings brought up to date), or, when it has none,
// a new one delivering from the stream sequence from (0, or a sequence
// past the stream's last, as after the stream was made anew: the commands
// of the last Lookback). A consumer an earlier version kept in files is
// replaced by one kept in memory, delivering from its first unacknowledged
// command.
func (b *Bus) Consumer(ctx context.Context, host string, from uint64) (jetstream.Consumer, error) {
	if err := events.CheckID(host); err != nil {
		return nil, fmt.Errorf("commands: host: %w", err)
	}
	c, err := b.stream.Consumer(ctx, consumerName(host))
	switch {
	case err == nil && c.CachedInfo().Config.MemoryStorage:
		return b.updated(ctx, c)
	case err == nil: // an earlier version's, kept in files
		from = c.CachedInfo().AckFloor.Stream + 1
		if err := b.stream.DeleteConsumer(ctx, consumerName(host)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("commands: replace the file-stored consumer of %s: %w", host, err)
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("commands: consumer of %s: %w", host, err)
	}
	if from > 1 {
		info, err := b.stream.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("commands: stream %s: %w", StreamName, err)
		}
		if from > info.State.LastSeq+1 {
			from = 0
		}
	}
	c, err = b.stream.CreateConsumer(ctx, consumerConfig(host, from, time.Now()))
	if err != nil {
		return nil, fmt.Errorf("commands: create the consumer of %s: %w", host, err)
	}
	return c, nil
}

// updated brings an existing consumer's settings to consumerConfig's,
// keeping where it delivers from (which cannot change).
func (b *Bus) updated(ctx context.Context, c jetstream.Consumer) (jetstream.Consumer, error) {
	have := c.CachedInfo().Config
	want := consumerConfig(strings.TrimPrefix(have.Durable, consumerPrefix), 0, time.Now())
	if have.AckWait == want.AckWait && have.MaxDeliver == want.MaxDeliver && have.Description == want.Description {
		return c, nil
	}
	want.DeliverPolicy, want.OptStartSeq, want.OptStartTime = have.DeliverPolicy, have.OptStartSeq, have.OptStartTime
	c, err := b.stream.UpdateConsumer(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("commands: update the consumer %s: %w", have.Durable, err)
	}
	return c, nil
}

// TraceContext returns ctx with the trace context a command message
// carries (its sender's), if any.
func TraceContext(ctx context.Context, header nats.Header) context.Context {
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(header))
}

// Decode parses a command message.
func Decode(data []byte) (*agentv1.Command, error) {
	cmd := &agentv1.Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		return nil, fmt.Errorf("commands: decode: %w", err)
	}
	return cmd, nil
}
