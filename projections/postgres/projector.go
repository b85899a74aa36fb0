package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	"github.com/tetherhq/tether/projections"
)

// CheckpointChannel is the PostgreSQL NOTIFY channel on which the projector
// announces each committed checkpoint (payload: the sequence).
const CheckpointChannel = "tether_checkpoint"

// maxSpanLinks bounds the trace links from a batch span to the requests that
// appended its events.
const maxSpanLinks = 64

// ProjectorOptions configure a Projector.
type ProjectorOptions struct {
	// Pool is the PostgreSQL pool of the views (required).
	Pool *pgxpool.Pool
	// JetStream is the event store's JetStream context (required).
	JetStream jetstream.JetStream
	// Stream is the event stream; default events.StreamName.
	Stream string
	// Durable is the durable consumer's name; default "tether-projector".
	Durable string
	// Partition names the checkpoint row; default projections.Partition.
	Partition string
	// BatchSize flushes a batch at this many events; default 4000 (replay
	// runs ~60k events/s at 4000 against ~37k at 1000, docs/benchmarks.md).
	BatchSize int
	// FlushInterval flushes a batch this long after its first event; default 5ms.
	FlushInterval time.Duration
	// AckWait is how long JetStream waits for an ack before redelivering;
	// default 1m. Applies when the consumer is created.
	AckWait time.Duration
	// Logger; default discards.
	Logger *slog.Logger
	// TracerProvider; default no-op.
	TracerProvider trace.TracerProvider
	// MeterProvider; default no-op.
	MeterProvider metric.MeterProvider
	// Scratch marks a projector whose pool writes tables other than the live
	// views (a rebuild or a check): it announces no checkpoints on
	// CheckpointChannel, so no reader takes its progress for the views'.
	Scratch bool
	// StopOnPoison makes a poison event fail its batch with a *PoisonError
	// (and Run return it) instead of going to the dead letters: a rebuild
	// stops loudly rather than swap in views that lack an event.
	StopOnPoison bool
	// Upcast, when set, rewrites stored event bytes before they are decoded
	// (see Upcaster).
	Upcast Upcaster
	// Verifier, when set, verifies each event's signature (natsauth): an
	// event its writer may not write (a host agent's on another host's
	// game server, or one without a valid signature) is dead-lettered with
	// events.ErrUnauthorizedWriter, counted in
	// tether_projector_unauthorized_events, and changes no view.
	Verifier *natsjs.Verifier
	// FleetMetricsInterval is how often, at most, the fleet gauges are read
	// from the views; default DefaultFleetMetricsInterval (metrics.go).
	FleetMetricsInterval time.Duration
	// MaxFleetLabels is how many fleets the metrics label by name; the
	// others are added up under OtherFleets. Default DefaultMaxFleetLabels.
	MaxFleetLabels int
}

// Upcaster rewrites the stored bytes of an event that the current code could
// not otherwise read (an older encoding, a producer's bug) into an envelope
// it can, as the event is read: the stream itself is never changed. It
// returns data unchanged for events it does not handle. Deploying one is how
// an undecodable dead letter gets fixed (RetryDeadLetter).
type Upcaster func(subject string, data []byte) []byte

// PoisonError is the error of a batch that holds an event the projector
// cannot apply, when ProjectorOptions.StopOnPoison is set.
type PoisonError struct {
	// Sequence, Subject and Type identify the event.
	Sequence uint64
	Subject  string
	Type     string
	// Err is why it cannot be applied.
	Err error
}

// Error implements error.
func (e *PoisonError) Error() string {
	return fmt.Sprintf("poison event at sequence %d (subject %s, type %q): %v", e.Sequence, e.Subject, e.Type, e.Err)
}

// Unwrap returns the cause.
func (e *PoisonError) Unwrap() error { return e.Err }

// The defaults of ProjectorOptions, and of the `tether projector` flags.
const (
	DefaultBatchSize     = 4000
	DefaultFlushInterval = 5 * time.Millisecond
)

func (o *ProjectorOptions) setDefaults() {
	if o.Stream == "" {
		o.Stream = events.StreamName
	}
	if o.Durable == "" {
		o.Durable = "tether-projector"
	}
	if o.Partition == "" {
		o.Partition = projections.Partition
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.AckWait <= 0 {
		o.AckWait = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TracerProvider == nil {
		o.TracerProvider = tracenoop.NewTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = metricnoop.NewMeterProvider()
	}
}

func (o *ProjectorOptions) validate() error {
	if o.Pool == nil {
		return errors.New("projector: Pool is required")
	}
	if o.JetStream == nil {
		return errors.New("projector: JetStream is required")
	}
	return nil
}

// Projector consumes the event stream with a durable consumer and folds it
// into the views. Each batch is one transaction that also advances the
// checkpoint; messages are acknowledged only after commit, and events at or
// below the checkpoint are skipped, so redelivery changes nothing.
type Projector struct {
	opts   ProjectorOptions
	log    *slog.Logger
	tracer trace.Tracer

	applied     metric.Int64Counter
	deadLetters metric.Int64Counter
	// unauthorized counts the dead letters refused for their writer.
	unauthorized metric.Int64Counter
	batchTime    metric.Float64Histogram
	metrics      *projectorMetrics // the fleets' gauges and counters (metrics.go)

	checkpoint atomic.Uint64         // last committed sequence
	fence      atomic.Uint64         // the lease epoch of this run (RunFenced), 0 without a lease
	failing    atomic.Pointer[error] // the last batch's failure while it is being retried
	pending    atomic.Uint64         // stream messages not yet delivered, from the last message's metadata
	delivered  atomic.Uint64         // last delivered sequence
	running    atomic.Bool           // RunFenced is projecting (this instance is the active one)

	held *heldViews // states kept in memory during a replay (HoldViews); nil when live
	// ordered is set for a replay's projector, fed by an ordered consumer,
	// which delivers every stored message or starts again: a gap in its
	// sequences is events the stream no longer holds (archived).
	ordered bool
}

// NewProjector builds a projector; Run starts it.
func NewProjector(opts ProjectorOptions) (*Projector, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p := &Projector{opts: opts, log: opts.Logger, tracer: opts.TracerProvider.Tracer("github.com/tetherhq/tether/projections/postgres")}
	meter := opts.MeterProvider.Meter("github.com/tetherhq/tether/projections/postgres")
	var err error
	if p.applied, err = meter.Int64Counter("tether_projector_events_applied",
		metric.WithDescription("Events folded into the views.")); err != nil {
		return nil, err
	}
	if p.deadLetters, err = meter.Int64Counter("tether_projector_dead_letters",
		metric.WithDescription("Events the projector could not apply and moved to the dead letters.")); err != nil {
		return nil, err
	}
	if p.unauthorized, err = meter.Int64Counter("tether_projector_unauthorized_events",
		metric.WithDescription("Events refused because their writer may not write them (a host agent's on another host's aggregate, or no valid signature): a compromised or misconfigured writer.")); err != nil {
		return nil, err
	}
	if p.batchTime, err = meter.Float64Histogram("tether_projector_batch_duration_seconds",
		metric.WithDescription("Time to apply and commit one batch."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if _, err = meter.Int64ObservableGauge("tether_projector_lag_events",
		metric.WithDescription("Events in the stream not yet applied: last sequence minus checkpoint."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			lag := int64(p.Lag())
			if !p.running.Load() {
				lag = 0 // a standby's last reading would be stale
			}
			o.Observe(lag, metric.WithAttributes(attribute.String("partition", opts.Partition)))
			return nil
		})); err != nil {
		return nil, err
	}
	if _, err = meter.Int64ObservableGauge("tether_projector_active",
		metric.WithDescription("1 while this projector projects (it holds the projector lease), else 0."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			var active int64
			if p.running.Load() {
				active = 1
			}
			o.Observe(active, metric.WithAttributes(attribute.String("partition", opts.Partition)))
			return nil
		})); err != nil {
		return nil, err
	}
	if p.metrics, err = newProjectorMetrics(opts, p.running.Load); err != nil {
		return nil, err
	}
	if !opts.Scratch {
		// From zero, so that the first dead letter is an increase alerts see.
		attrs := metric.WithAttributes(attribute.String("partition", opts.Partition))
		p.deadLetters.Add(context.Background(), 0, attrs)
		p.unauthorized.Add(context.Background(), 0, attrs)
	}
	return p, nil
}

// Checkpoint returns the last sequence this projector committed.
func (p *Projector) Checkpoint() uint64 { return p.checkpoint.Load() }

// Lag returns the number of stream events not yet committed to the views, as
// known from the last delivered message.
func (p *Projector) Lag() uint64 {
	last := p.delivered.Load() + p.pending.Load()
	if cp := p.checkpoint.Load(); last > cp {
		return last - cp
	}
	return 0
}

// ErrFenced is the error of a batch refused because a projector with a
// newer lease epoch has written the checkpoint: this one lost its lease.
var ErrFenced = errors.New("projector: a projector with a newer lease epoch has taken over")

// ErrGap is the error of a batch that skips events after the checkpoint:
// nothing of it is applied, and the projector reads again from the
// checkpoint with a fresh consumer.
var ErrGap = errors.New("projector: the consumer skipped events after the checkpoint")

// ErrViewsBehind is the error of a batch refused because the views'
// checkpoint is below what this projector has committed, or gone: the
// database was restored from an older copy, or dropped and created again,
// under the running projector. Its consumer is past the views' checkpoint,
// so applying the batch would skip the events in between for good. The
// batch is retried (the projector reports not ready meanwhile) until a
// rebuild swaps in views at or past its checkpoint; a restarted projector
// projects again from the views' own checkpoint.
var ErrViewsBehind = errors.New("projector: the views went back behind this projector's checkpoint " +
	"(database restored or recreated under it): run tetherctl projections rebuild, or restart the projector")

// Ready reports why the projector cannot apply events now: its last batch
// failed and is being retried (PostgreSQL unreachable, or the views went
// back behind it: ErrViewsBehind).
func (p *Projector) Ready() error {
	if err := p.failing.Load(); err != nil {
		return fmt.Errorf("applying a batch fails: %w", *err)
	}
	return nil
}

// Run consumes and applies events until ctx ends, without a lease: the
// only projector of its views (tether dev, tests).
func (p *Projector) Run(ctx context.Context) error { return p.RunFenced(ctx, 0) }

// RunFenced consumes and applies events until ctx ends, as the holder of
// the projector lease's tenure epoch: every batch writes the epoch with the
// checkpoint and is refused (ErrFenced, which ends the run) once the
// checkpoint holds a newer one. It recreates the durable consumer from the
// checkpoint first, so nothing a predecessor had in hand is skipped.
func (p *Projector) RunFenced(ctx context.Context, epoch uint64) error {
	p.fence.Store(epoch)
	p.running.Store(true)
	defer p.running.Store(false)
	backoff := 100 * time.Millisecond
	for {
		err := p.consume(ctx)
		_, poison := errors.AsType[*PoisonError](err)
		switch {
		case err == nil || ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrFenced) || poison:
			return err
		case errors.Is(err, ErrGap):
			p.log.Warn("projector consumer skipped events; reading again from the checkpoint", "err", err)
			continue
		case errors.Is(err, errConsumerGone):
			// Not ready until the next consume has its consumer.
			p.failing.Store(&err)
			p.log.Warn("projector consumer is gone; making it anew from the checkpoint", "err", err)
			continue
		}
		// NATS between leaders (an election after a node was lost): the
		// consumer cannot be read or created for a few seconds.
		p.failing.Store(&err)
		p.log.Warn("projector consumer failed; retrying", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// consume runs one consumer from the checkpoint until ctx ends or a batch
// fails for good (ErrGap: the caller starts another).
func (p *Projector) consume(ctx context.Context) error {
	cons, err := p.Consumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: nothing was applied
		}
		return err
	}
	cp := p.checkpoint.Load()
	msgs := make(chan jetstream.Msg, 2*p.opts.BatchSize)
	lost := make(chan error, 1)    // what the pulls said of a consumer that may be gone
	stopped := make(chan struct{}) // this consume returned: deliver nothing more
	defer close(stopped)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		case <-stopped:
		}
	}, append(jsclient.FailoverPull(time.Second), jetstream.PullMaxMessages(2*p.opts.BatchSize),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			p.log.Warn("projector consume error", "err", err)
			if consumerMaybeGone(err) {
				select {
				case lost <- err:
				default:
				}
			}
		}))...)
	if err != nil {
		return fmt.Errorf("projector: consume: %w", err)
	}
	defer cc.Stop()
	p.failing.Store(nil) // consuming again, whatever failed before
	p.log.Info("projector started", "checkpoint", cp, "durable", p.opts.Durable)
	batch := make([]jetstream.Msg, 0, p.opts.BatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-lost:
			if err := checkConsumer(ctx, cons, err); err != nil {
				return err
			}
			continue
		case m := <-msgs:
			batch = append(batch[:0], m)
		}
		timer.Reset(p.opts.FlushInterval)
	collect:
		for len(batch) < p.opts.BatchSize {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			case <-timer.C:
				break collect
			case <-ctx.Done():
				return nil
			}
		}
		timer.Stop()
		if err := p.applyWithRetry(ctx, batch); err != nil {
			return err
		}
	}
}

// errConsumerGone is the error of a consume whose durable consumer was
// deleted under it (by credentials that may: an admin's): the next consume
// makes it anew from the checkpoint. Its pulls would otherwise wait for
// deliveries that never come.
var errConsumerGone = errors.New("projector: the durable consumer is gone")

// consumerMaybeGone reports whether an error of the pulls may mean that
// the consumer is gone: one deleted under a pull in flight says so; after
// that, no heartbeat comes, and no one answers the next pull.
func consumerMaybeGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrNoResponders)
}

// checkConsumer returns errConsumerGone when the pulls' error err says the
// consumer was deleted or it is no longer found; nil while it is there, or
// cannot be asked (NATS between leaders: the pulls go on, FailoverPull).
func checkConsumer(ctx context.Context, cons jetstream.Consumer, err error) error {
	if errors.Is(err, jetstream.ErrConsumerDeleted) {
		return fmt.Errorf("%w: %w", errConsumerGone, err)
	}
	if _, err := cons.Info(ctx); errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%w: %w", errConsumerGone, err)
	}
	return nil
}

// applyWithRetry applies a batch, retrying transient failures (PostgreSQL
// down) with capped backoff until ctx ends; then acknowledges it.
func (p *Projector) applyWithRetry(ctx context.Context, batch []jetstream.Msg) error {
	backoff := 50 * time.Millisecond
	for {
		err := p.ApplyBatch(ctx, batch)
		if err == nil {
			break
		}
		if _, ok := errors.AsType[*PoisonError](err); ok {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrFenced) || errors.Is(err, ErrGap) {
			return err
		}
		if dataRefused(err) && p.held == nil {
			// Not a passing failure: PostgreSQL refuses the data of an
			// event (a value too large to index, a byte it cannot store),
			// and would refuse it for ever. Find it, one event at a time,
			// and dead-letter it; the others are applied.
			return p.isolateRefused(ctx, batch, err)
		}
		p.failing.Store(&err)
		p.log.Error("projector batch failed; retrying", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	p.failing.Store(nil)
	last := batch[len(batch)-1]
	if err := last.Ack(); err != nil {
		// Not fatal: the batch is committed, a redelivery is skipped by the checkpoint.
		p.log.Warn("projector ack failed; redelivery will be skipped", "err", err)
	}
	return nil
}

// Consumer loads the checkpoint and returns the durable consumer positioned
// after it (Run calls it; tests use it to drive ApplyBatch by hand).
func (p *Projector) Consumer(ctx context.Context) (jetstream.Consumer, error) {
	cp, err := p.loadCheckpoint(ctx)
	if err != nil {
		return nil, err
	}
	p.checkpoint.Store(cp)
	return p.consumer(ctx, cp)
}

// loadCheckpoint reads (creating if needed) the partition's checkpoint.
func (p *Projector) loadCheckpoint(ctx context.Context) (uint64, error) {
	if _, err := p.opts.Pool.Exec(ctx,
		`INSERT INTO projector_checkpoints (partition, sequence) VALUES ($1, 0) ON CONFLICT DO NOTHING`,
		p.opts.Partition); err != nil {
		return 0, fmt.Errorf("projector: create checkpoint: %w", err)
	}
	var cp int64
	if err := p.opts.Pool.QueryRow(ctx, `SELECT sequence FROM projector_checkpoints WHERE partition = $1`,
		p.opts.Partition).Scan(&cp); err != nil {
		return 0, fmt.Errorf("projector: read checkpoint: %w", err)
	}
	return uint64(cp), nil
}

// consumer returns the durable consumer, positioned after the checkpoint.
// PostgreSQL's checkpoint is the truth: a consumer that has moved past it is
// recreated from it (see consumerPast).
func (p *Projector) consumer(ctx context.Context, cp uint64) (jetstream.Consumer, error) {
	stream, err := p.opts.JetStream.Stream(ctx, p.opts.Stream)
	if err != nil {
		return nil, fmt.Errorf("projector: stream %s: %w", p.opts.Stream, err)
	}
	if c, err := stream.Consumer(ctx, p.opts.Durable); err == nil {
		info, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("projector: consumer info: %w", err)
		}
		if p.fence.Load() == 0 && !p.consumerPast(info, cp) {
			return c, nil
		}
		if err := stream.DeleteConsumer(ctx, p.opts.Durable); err != nil {
			return nil, fmt.Errorf("projector: delete stale consumer: %w", err)
		}
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("projector: consumer %s: %w", p.opts.Durable, err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       p.opts.Durable,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       p.opts.AckWait,
		MaxAckPending: 4 * p.opts.BatchSize,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Description:   "Tether projector: folds events into the PostgreSQL views",
	}
	if cp > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, cp+1
	}
	c, err := stream.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("projector: create consumer: %w", err)
	}
	return c, nil
}

// consumerPast reports whether the durable consumer has moved past the
// checkpoint, and says why, in which case it must be recreated from it:
//
//   - It delivered events the views do not have: a projector stopped (or was
//     killed) with a batch in hand. JetStream hands those out again only
//     after the ack wait (a minute), and meanwhile delivers what follows
//     them: a restarted projector would stall until then, or, with events
//     after them, apply those and skip the ones it handed out for ever.
//   - It acknowledged events the views do not have: the views were reset.
//     Expected with empty views (tether dev's throwaway database, a new
//     one); a warning otherwise (views restored from an older backup).
func (p *Projector) consumerPast(info *jetstream.ConsumerInfo, cp uint64) bool {
	acked, delivered := info.AckFloor.Stream, info.Delivered.Stream
	switch {
	case acked > cp && cp > 0:
		p.log.Warn("projector views are behind what the consumer acknowledged (views restored from an older copy?); recreating it from the checkpoint",
			"ack_floor", acked, "checkpoint", cp)
	case acked > cp:
		p.log.Info("projector views are empty; projecting the stream from the start", "ack_floor", acked)
	case delivered > cp:
		p.log.Info("projector consumer has events out that the views do not have (a stop mid-batch); recreating it from the checkpoint",
			"delivered", delivered, "checkpoint", cp)
	default:
		return false
	}
	return true
}

// deadLetter is an event the projector could not apply.
type deadLetter struct {
	seq     uint64
	subject string
	typ     string
	err     error
	data    []byte
}

// ApplyBatch applies stream messages to the views in one transaction and
// advances the checkpoint; it does not acknowledge them. Messages at or below
// the checkpoint are skipped. Exported for tests that redeliver batches.
func (p *Projector) ApplyBatch(ctx context.Context, msgs []jetstream.Msg) (err error) {
	start := time.Now()
	traces := eventTraces(msgs)
	ctx, span := p.tracer.Start(ctx, "projector.batch", trace.WithLinks(traceLinks(traces)...),
		trace.WithAttributes(attribute.Int("tether.batch.size", len(msgs))))
	defer span.End()

	tx, err := p.opts.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("projector: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // No-op after commit; a failed batch is retried whole.

	var cp, fence int64
	err = tx.QueryRow(ctx, `SELECT sequence, fence FROM projector_checkpoints WHERE partition = $1 FOR UPDATE`,
		p.opts.Partition).Scan(&cp, &fence)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: the checkpoint row is gone", ErrViewsBehind)
	case err != nil:
		return fmt.Errorf("projector: lock checkpoint: %w", err)
	}
	epoch := p.fence.Load()
	if epoch > 0 && uint64(fence) > epoch {
		return fmt.Errorf("%w (checkpoint epoch %d, ours %d)", ErrFenced, fence, epoch)
	}
	if ours := p.checkpoint.Load(); uint64(cp) < ours {
		return fmt.Errorf("%w: the views' checkpoint is %d, this projector committed %d", ErrViewsBehind, cp, ours)
	}
	folds := folders()
	held := p.held
	if held != nil {
		folds = held.folds
		defer func() {
			if err != nil {
				held.broken = err // its states may hold part of a failed batch
			}
		}()
	}
	var envs []events.Envelope
	var raw [][]byte
	var kinds []string
	var dead []deadLetter
	var undecodable []events.Envelope // what stands for the undecodable messages, with their kinds
	var undecodableKinds []string
	last := uint64(cp)
	for _, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("projector: message metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		p.delivered.Store(seq)
		p.pending.Store(meta.NumPending)
		if seq <= last {
			continue // already applied: a redelivery
		}
		if seq > last+1 {
			// The stream's only gaps are archived events, purged
			// (services/archiver). Any other gap is an event handed out
			// and lost (its pull's answer went with a NATS node), and with
			// AckAll acknowledging what follows it would acknowledge it
			// too, so it would never come again.
			purged, err := p.purgedBetween(ctx, last, seq)
			if err != nil {
				return fmt.Errorf("projector: look for events between %d and %d: %w", last, seq, err)
			}
			if !purged {
				return fmt.Errorf("%w: expected event %d, got %d", ErrGap, last+1, seq)
			}
		}
		last = seq
		data := m.Data()
		if p.opts.Upcast != nil {
			data = p.opts.Upcast(m.Subject(), data)
		}
		env, err := decode(m.Subject(), data)
		if err != nil {
			dead = append(dead, deadLetter{seq: seq, subject: m.Subject(), typ: m.Headers().Get(natsjs.HeaderType), err: err, data: m.Data()})
			kind := events.KindOf(m.Subject())
			if name, nerr := events.NameFromSubject(m.Subject()); nerr == nil && errors.Is(err, events.ErrUndecodable) && folds[kind] != nil {
				// It keeps its place in its aggregate's row (foldSet.apply).
				folds[kind].want(name)
				undecodable = append(undecodable, events.UndecodableAt(m.Subject(), seq, err))
				undecodableKinds = append(undecodableKinds, kind)
			}
			continue
		}
		env.Sequence = seq
		env.Writer = p.opts.Verifier.Writer(m.Subject(), seq, m.Data(), m.Headers())
		kind := events.KindOf(m.Subject())
		folds[kind].want(env.Aggregate) // decode refuses a kind without a view
		envs = append(envs, env)
		raw = append(raw, data)
		kinds = append(kinds, kind)
	}
	if last == uint64(cp) {
		// The whole batch was applied before, by this projector or by a
		// rebuild that swapped in views past it: they are at cp.
		p.checkpoint.Store(uint64(cp))
		return nil
	}
	if held == nil { // held states start from empty tables and live in memory
		if err := eachFolder(folds, func(f folder) error { return f.load(ctx, tx) }); err != nil {
			return err
		}
	}
	for i, e := range envs {
		if err := folds[kinds[i]].apply(e); err != nil {
			dead = append(dead, deadLetter{seq: e.Sequence, subject: e.Subject, typ: e.Type, err: err, data: raw[i]})
		}
	}
	for i, e := range undecodable {
		_ = folds[undecodableKinds[i]].apply(e) // dead-lettered above; this only keeps its place
	}
	if held == nil {
		if err := eachFolder(folds, func(f folder) error { return f.write(ctx, tx) }); err != nil {
			return fmt.Errorf("projector: %w", err)
		}
	}
	if p.opts.StopOnPoison && len(dead) > 0 {
		first := slices.MinFunc(dead, func(a, b deadLetter) int { return cmp.Compare(a.seq, b.seq) })
		return &PoisonError{Sequence: first.seq, Subject: first.subject, Type: first.typ, Err: first.err}
	}
	b := &pgx.Batch{}
	for _, d := range dead {
		b.Queue(insertDeadLetter, int64(d.seq), d.subject, d.typ, d.err.Error(), d.data)
		if errors.Is(d.err, events.ErrUnauthorizedWriter) {
			p.log.Error("projector refused an event its writer may not write: a host's credentials may be compromised",
				"sequence", d.seq, "subject", d.subject, "type", d.typ, "err", d.err)
			continue
		}
		p.log.Warn("projector dead-lettered an event", "sequence", d.seq, "subject", d.subject, "type", d.typ, "err", d.err)
	}
	b.Queue(advanceCheckpoint,
		p.opts.Partition, int64(last), int64(epoch))
	if !p.opts.Scratch {
		b.Queue(notifyCheckpoint, CheckpointChannel, strconv.FormatUint(last, 10))
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("projector: write views: %w", err)
	}
	if err := copyEvents(ctx, tx, envs, raw); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("projector: commit: %w", err)
	}
	p.checkpoint.Store(last)
	attrs := metric.WithAttributes(attribute.String("partition", p.opts.Partition))
	p.applied.Add(ctx, int64(len(envs)), attrs)
	if len(dead) > 0 {
		p.deadLetters.Add(ctx, int64(len(dead)), attrs)
		refused := 0
		for _, d := range dead {
			if errors.Is(d.err, events.ErrUnauthorizedWriter) {
				refused++
			}
		}
		if refused > 0 {
			p.unauthorized.Add(ctx, int64(refused), attrs)
		}
	}
	p.batchTime.Record(ctx, time.Since(start).Seconds(), attrs)
	if held == nil {
		p.metrics.count(ctx, envs, dead, folds, time.Now())
	}
	span.SetAttributes(attribute.Int64("tether.checkpoint", int64(last)))
	p.traceApplied(ctx, msgs, traces, uint64(cp), start, time.Now())
	return nil
}

// purgedBetween reports whether the stream holds no event between
// sequences last and next (both excluded): the events between were
// archived and purged, and the gap is no loss. It asks the stream's leader
// (one request) unless the feed is an ordered consumer: a replica behind
// it would answer that the stream holds nothing after last, and the gap
// would pass for a purge.
func (p *Projector) purgedBetween(ctx context.Context, last, next uint64) (bool, error) {
	if p.ordered {
		return true, nil
	}
	first, found, err := firstAfter(ctx, p.opts.JetStream, p.opts.Stream, last)
	if err != nil {
		return false, err
	}
	return !found || first >= next, nil
}

// firstAfter returns the sequence of the stream's first message after
// sequence after, found=false when it holds none, as the stream's leader
// answers (jsclient.LeaderGet): both callers decide on absence.
func firstAfter(ctx context.Context, js jetstream.JetStream, name string, after uint64) (uint64, bool, error) {
	m, found, err := jsclient.LeaderGet(ctx, js.Conn(), name, jsclient.MsgRequest{Seq: after + 1, NextFor: ">"})
	if err != nil {
		return 0, false, fmt.Errorf("first message of stream %s after %d: %w", name, after, err)
	}
	return m.Sequence, found, nil
}

// skipTo moves a replay's checkpoint up to seq over events the stream no
// longer holds (archived and purged): a replay whose last events were
// purged would otherwise never reach the stream's last sequence, or the
// live views' checkpoint.
func (p *Projector) skipTo(ctx context.Context, seq uint64) error {
	if _, err := p.opts.Pool.Exec(ctx, `UPDATE projector_checkpoints SET sequence = $2, update_time = now()
WHERE partition = $1 AND sequence < $2`, p.opts.Partition, int64(seq)); err != nil {
		return fmt.Errorf("projector: move the checkpoint over purged events: %w", err)
	}
	if seq > p.checkpoint.Load() {
		p.checkpoint.Store(seq)
	}
	return nil
}

// decode unmarshals a message (already upcast, if there is an Upcaster)
// and checks that its subject names the envelope's aggregate.
func decode(subject string, data []byte) (events.Envelope, error) {
	env, err := events.Decode(subject, data)
	if err != nil {
		return events.Envelope{}, err
	}
	if _, ok := views[events.KindOf(subject)]; !ok {
		return events.Envelope{}, fmt.Errorf("projector: no view for subject %s", subject)
	}
	return env, nil
}

// copyEvents writes the batch's events into the events table with COPY.
func copyEvents(ctx context.Context, tx pgx.Tx, envs []events.Envelope, raw [][]byte) error {
	if len(envs) == 0 {
		return nil
	}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"events"},
		[]string{"sequence", "id", "type", "aggregate", "occur_time", "producer", "request_id", "correlation_id", "causation_id", "envelope"},
		pgx.CopyFromSlice(len(envs), func(i int) ([]any, error) {
			e := envs[i]
			return []any{int64(e.Sequence), e.ID, e.Type, e.Aggregate, e.Time, e.Producer, e.RequestID, e.CorrelationID, e.CausationID, raw[i]}, nil
		}))
	if err != nil {
		return fmt.Errorf("projector: copy events: %w", err)
	}
	if int(n) != len(envs) {
		return fmt.Errorf("projector: copied %d of %d events", n, len(envs))
	}
	return nil
}

// eventTraces reads the trace context each message's writer gave it (the
// zero SpanContext for none), once per batch: the batch span links to
// them, and the sampled ones get a span of their own (traceApplied).
func eventTraces(msgs []jetstream.Msg) []trace.SpanContext {
	prop := propagation.TraceContext{}
	out := make([]trace.SpanContext, len(msgs))
	for i, m := range msgs {
		h := m.Headers()
		if tp := h.Get("traceparent"); tp != "" {
			carrier := propagation.MapCarrier{"traceparent": tp, "tracestate": h.Get("tracestate")}
			out[i] = trace.SpanContextFromContext(prop.Extract(context.Background(), carrier))
		}
	}
	return out
}

// traceLinks links a batch span to the spans that appended its events.
func traceLinks(traces []trace.SpanContext) []trace.Link {
	var links []trace.Link
	for _, sc := range traces {
		if len(links) == maxSpanLinks {
			break
		}
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return links
}

func optionalTime(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

// heldViews are folded states a replay keeps in memory instead of writing
// them batch by batch (see HoldViews).
type heldViews struct {
	folds  map[string]folder // by kind
	broken error             // a batch failed after folding into them
}

// HoldViews makes the projector keep folded states in memory across batches
// and write the view rows only at FlushViews; events and the checkpoint are
// still written per batch. For a replay into empty tables (a rebuild): each
// aggregate's row is then written once instead of once per batch that
// touches it. Not for a live projector, whose readers need every batch.
func (p *Projector) HoldViews() {
	p.held = &heldViews{folds: folders()}
}

// FlushViews writes the held states in one transaction and returns the
// projector to writing each batch's rows.
func (p *Projector) FlushViews(ctx context.Context) error {
	held := p.held
	if held == nil {
		return nil
	}
	p.held = nil
	if held.broken != nil {
		return fmt.Errorf("projector: held views are incomplete after a failed batch: %w", held.broken)
	}
	tx, err := p.opts.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("projector: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // No-op after commit.
	if err := eachFolder(held.folds, func(f folder) error { return f.write(ctx, tx) }); err != nil {
		return fmt.Errorf("projector: flush held views: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("projector: flush held views: %w", err)
	}
	return nil
}

// The statements that record a dead letter and advance the checkpoint,
// for a batch (ApplyBatch) and for one event PostgreSQL refuses
// (deadLetterRefused).
const (
	insertDeadLetter = `INSERT INTO dead_letters (sequence, subject, type, error, data) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (sequence) DO NOTHING`
	advanceCheckpoint = `UPDATE projector_checkpoints SET sequence = $2, update_time = now(), fence = GREATEST(fence, $3) WHERE partition = $1`
	notifyCheckpoint  = `SELECT pg_notify($1, $2)`
)

// dataRefused reports whether PostgreSQL refused a batch for the data it
// holds (SQLSTATE class 22, data exception, or 54, program limit exceeded,
// such as an index row too large): retrying the same data cannot succeed.
func dataRefused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54"))
}

// isolateRefused applies a batch PostgreSQL refused for its data one event
// at a time; the event refused alone is dead-lettered.
func (p *Projector) isolateRefused(ctx context.Context, batch []jetstream.Msg, cause error) error {
	if len(batch) > 1 {
		p.log.Warn("projector batch refused for its data; applying its events one by one", "events", len(batch), "err", cause)
		for i := range batch {
			if err := p.applyWithRetry(ctx, batch[i:i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	m := batch[0]
	if err := p.deadLetterRefused(ctx, m, cause); err != nil {
		return fmt.Errorf("projector: dead-letter an event PostgreSQL refuses: %w", err)
	}
	if err := m.Ack(); err != nil {
		p.log.Warn("projector ack failed; redelivery will be skipped", "err", err)
	}
	return nil
}

// deadLetterRefused moves one event that PostgreSQL refuses to the dead
// letters and advances the checkpoint past it, in one transaction.
func (p *Projector) deadLetterRefused(ctx context.Context, m jetstream.Msg, cause error) error {
	meta, err := m.Metadata()
	if err != nil {
		return err
	}
	seq := meta.Sequence.Stream
	tx, err := p.opts.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after commit
	var cp int64
	if err := tx.QueryRow(ctx, `SELECT sequence FROM projector_checkpoints WHERE partition = $1 FOR UPDATE`, p.opts.Partition).Scan(&cp); err != nil {
		return err
	}
	if uint64(cp) >= seq {
		return nil // applied or dead-lettered before
	}
	if uint64(cp)+1 != seq {
		purged, err := p.purgedBetween(ctx, uint64(cp), seq)
		if err != nil {
			return err
		}
		if !purged {
			return fmt.Errorf("%w: expected event %d, got %d", ErrGap, cp+1, seq)
		}
	}
	if _, err := tx.Exec(ctx, insertDeadLetter, int64(seq), m.Subject(), m.Headers().Get(natsjs.HeaderType), "PostgreSQL refuses its data: "+cause.Error(), m.Data()); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, advanceCheckpoint,
		p.opts.Partition, int64(seq), int64(p.fence.Load())); err != nil {
		return err
	}
	if !p.opts.Scratch {
		if _, err := tx.Exec(ctx, notifyCheckpoint, CheckpointChannel, strconv.FormatUint(seq, 10)); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	p.checkpoint.Store(seq)
	p.deadLetters.Add(ctx, 1, metric.WithAttributes(attribute.String("partition", p.opts.Partition)))
	p.log.Error("projector dead-lettered an event PostgreSQL refuses", "sequence", seq, "subject", m.Subject(), "err", cause)
	return nil
}
