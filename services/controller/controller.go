// Package controller is Tether's controller (docs/architecture.md,
// "Components"): one active instance at a time, chosen by a lease in NATS
// KV, that keeps every fleet at its replica count. It schedules new game servers on hosts with room,
// replaces terminated and unhealthy ones, scales down READY servers first
// (never ALLOCATED ones), and tells agents to start and stop processes.
// Every decision is an event appended with the aggregate's sequence as guard.
//
// Each pass observes (observe.go), plans (package plan: a pure function of
// what it observed, tested as tables) and executes (execute.go).
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller/plan"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/nats/lease"
)

// eventStore is what the controller needs of the event store.
type eventStore interface {
	Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error)
	// StreamLastSequence lets a new leader wait until the views include
	// everything its predecessor wrote before it acts.
	StreamLastSequence(ctx context.Context) (uint64, error)
}

// viewReader is what the controller reads from the views.
type viewReader interface {
	FleetStates(ctx context.Context) ([]projections.FleetRow, error)
	Fleet(ctx context.Context, name string) (projections.FleetRow, error)
	LiveGameServers(ctx context.Context) ([]projections.Row[*eventsv1.GameServerState], error)
	GameServersChangedSince(ctx context.Context, after uint64) ([]projections.Row[*eventsv1.GameServerState], error)
	HostsChangedSince(ctx context.Context, after uint64) ([]projections.Row[*eventsv1.HostState], error)
	GameServer(ctx context.Context, name string) (projections.Row[*eventsv1.GameServerState], error)
	DueGameSessions(ctx context.Context, now time.Time, limit int) ([]projections.Row[*eventsv1.GameSessionState], error)
	OrphanedGameSessions(ctx context.Context, limit int) ([]projections.Row[*eventsv1.GameSessionState], error)
	UncreatedGameSessions(ctx context.Context, olderThan time.Time, limit int) ([]projections.Row[*eventsv1.GameServerState], error)
	// Checkpoint is the stream sequence the views have applied.
	Checkpoint(ctx context.Context) (uint64, error)
}

// freshness waits until the views have applied a sequence.
type freshness interface {
	WaitFor(ctx context.Context, seq uint64) error
}

// commandSender sends commands to host agents.
type commandSender interface {
	Send(ctx context.Context, host, sender string, cmd *agentv1.Command) error
}

// Options configure a Controller.
type Options struct {
	// JetStream holds the lease (required).
	JetStream jetstream.JetStream
	// Store appends decisions (required).
	Store eventStore
	// Views are read each pass (required).
	Views viewReader
	// Freshness lets a pass wait for its own writes (required).
	Freshness freshness
	// Commands reach the agents (required).
	Commands commandSender
	// ID names this instance; default a random "ctl-…" id.
	ID string
	// Interval is the reconcile period; default 1s.
	Interval time.Duration
	// ShutdownGrace is the deadline given to a stopped server; default 30s.
	ShutdownGrace time.Duration
	// ShutdownSettle is how long past a shutdown's deadline a server's end
	// may take to reach the stream: a SHUTTING_DOWN server its agent no
	// longer lists this long after the deadline, with nothing queued, is
	// terminated by the controller (plan/shutdowns.go); default 30s.
	ShutdownSettle time.Duration
	// UnreachableAfter marks a host UNREACHABLE after this long without a
	// heartbeat; default 10s.
	UnreachableAfter time.Duration
	// LostAfter marks an unreachable host LOST (its servers are replaced)
	// after this long without a heartbeat; default 60s.
	LostAfter time.Duration
	// StartTimeout re-sends the start command of a server still SCHEDULED
	// (no ProcessStarted) this long after it was scheduled or its start
	// command was last sent; default 10s.
	StartTimeout time.Duration
	// StaleViewsAfter is how long the views' checkpoint may stand still
	// while the stream is ahead of it before the views count as stale
	// (staleness.go): the controller then acts on host liveness only, and
	// says so; default 5s.
	StaleViewsAfter time.Duration
	// StartBackoffBase is how long a fleet whose game servers end before
	// READY waits before it starts another, after one such failure; it
	// doubles with each failure after (plan/startbackoff.go); default 1s.
	StartBackoffBase time.Duration
	// StartBackoffCap bounds that wait; default 5m.
	StartBackoffCap time.Duration
	// Logger; default discards.
	Logger *slog.Logger
	// SlowPassAfter: a pass that takes longer is logged as a warning with
	// the time each of its steps took; default 5s.
	SlowPassAfter time.Duration
	// MeterProvider; default no-op.
	MeterProvider metric.MeterProvider
	// WhileLeading, when set, runs while this instance leads, with the
	// leadership's context, which ends when the lease is lost or the
	// controller stops: work that one instance does at a time beside the
	// passes, such as archiving (services/archiver's Run). The next
	// leadership runs it again; an error it returns is logged.
	WhileLeading func(ctx context.Context) error
	// Clock is the time every decision reads: deadlines, grace, start
	// timeouts and backoff (tests give a clockwork.FakeClock and move it by
	// hand); default the real clock. The pass cadence (Interval) and the
	// lease run on real time: the lease expires by the NATS server's clock,
	// and a pass only looks, the clock decides what it sees. Heartbeats and
	// the heartbeat bucket's elections carry the NATS server's time, so a
	// clock far from it misjudges host silence.
	Clock clockwork.Clock
}

// The defaults of Options, and of the `tether controller` flags.
const (
	DefaultInterval         = time.Second
	DefaultShutdownGrace    = 30 * time.Second
	DefaultShutdownSettle   = 30 * time.Second
	DefaultUnreachableAfter = 10 * time.Second
	DefaultLostAfter        = time.Minute
	DefaultStartTimeout     = 10 * time.Second
	DefaultStaleViewsAfter  = 5 * time.Second
	DefaultStartBackoffBase = time.Second
	DefaultStartBackoffCap  = 5 * time.Minute
	DefaultSlowPassAfter    = 5 * time.Second
)

func (o *Options) setDefaults() {
	if o.ID == "" {
		o.ID = events.NewID("ctl")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = DefaultShutdownGrace
	}
	if o.ShutdownSettle <= 0 {
		o.ShutdownSettle = DefaultShutdownSettle
	}
	if o.UnreachableAfter <= 0 {
		o.UnreachableAfter = DefaultUnreachableAfter
	}
	if o.LostAfter <= 0 {
		o.LostAfter = DefaultLostAfter
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.SlowPassAfter <= 0 {
		o.SlowPassAfter = DefaultSlowPassAfter
	}
	if o.StaleViewsAfter <= 0 {
		o.StaleViewsAfter = DefaultStaleViewsAfter
	}
	if o.StartBackoffBase <= 0 {
		o.StartBackoffBase = DefaultStartBackoffBase
	}
	if o.StartBackoffCap <= 0 {
		o.StartBackoffCap = DefaultStartBackoffCap
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MeterProvider == nil {
		o.MeterProvider = metricnoop.NewMeterProvider()
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
}

func (o *Options) validate() error {
	switch {
	case o.JetStream == nil:
		return errors.New("controller: JetStream is required")
	case o.Store == nil:
		return errors.New("controller: Store is required")
	case o.Views == nil:
		return errors.New("controller: Views is required")
	case o.Freshness == nil:
		return errors.New("controller: Freshness is required")
	case o.Commands == nil:
		return errors.New("controller: Commands is required")
	}
	return o.validateTimings()
}

// validateTimings refuses durations that contradict each other.
func (o *Options) validateTimings() error {
	switch {
	case o.StartBackoffBase > o.StartBackoffCap:
		return fmt.Errorf("controller: the start backoff's base (%s) is longer than its cap (%s)", o.StartBackoffBase, o.StartBackoffCap)
	case o.LostAfter <= o.UnreachableAfter:
		return fmt.Errorf("controller: a host is LOST after %s of silence, not after it is UNREACHABLE (%s): make host-lost-after the longer", o.LostAfter, o.UnreachableAfter)
	}
	return nil
}

// LeaseRole is the controller's key in the lease bucket (lease.Bucket).
const LeaseRole = "controller"

// Controller is one controller instance; only the lease holder acts.
type Controller struct {
	opts     Options
	log      *slog.Logger
	producer string
	leader   atomic.Bool
	lease    atomic.Pointer[lease.Lease] // set once Run has opened it

	scheduled metric.Int64Counter
	shutdowns metric.Int64Counter
	passTime  metric.Float64Histogram

	noRoomLogged map[string]time.Time                // fleet → last "no host with room" log
	beats        *hostbeat.Tracker                   // host heartbeats, tracked while leader from the first pass
	beatsWait    time.Duration                       // a pass's wait for beats to catch up (beatsWait)
	beatsBehind  int                                 // passes in a row beats did not catch up
	seen         map[string]time.Time                // host id → last heartbeat known while leader
	beatsSince   time.Time                           // the heartbeat bucket's last election logged (noteBeatsLeader)
	startResent  map[string]time.Time                // SCHEDULED server → last time its start command was re-sent
	live         keptRows[*eventsv1.GameServerState] // the live game servers, kept between passes
	hosts        keptRows[*eventsv1.HostState]       // the known hosts, kept between passes
	views        viewsWatch                          // whether the views still move (staleness.go)
	starts       startWatch                          // game servers that end before READY (startbackoff.go)
	hooks        *webhooks                           // autoscaling webhooks' last answers (webhooks.go)
	wake         *passWake                           // events that wake the pass loop (wake.go)
	// execMu guards what a pass's decisions, carried out concurrently,
	// change: written, startResent and the start news kept.
	execMu sync.Mutex
	// written is the highest stream sequence the views must have applied
	// before a pass may read them: our own last append, or on taking over,
	// the stream's last sequence (the predecessor's writes).
	written uint64
	// caughtUp is set once written covers the stream as it was when this
	// instance became leader.
	caughtUp bool
}

// New builds a controller; Run starts it.
func New(opts Options) (*Controller, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &Controller{opts: opts, log: opts.Logger.With("controller", opts.ID), producer: "controllers/" + opts.ID,
		noRoomLogged: map[string]time.Time{}, seen: map[string]time.Time{}, startResent: map[string]time.Time{}, beatsWait: beatsWait}
	c.hooks = newWebhooks(opts.Interval, opts.Clock.Now)
	c.wake = newPassWake(opts.JetStream)
	c.live, c.hosts = liveServers(opts.Views), knownHosts(opts.Views)
	m := opts.MeterProvider.Meter("github.com/tetherhq/tether/services/controller")
	var err error
	if c.scheduled, err = m.Int64Counter("tether_controller_scheduled", metric.WithDescription("Game servers scheduled.")); err != nil {
		return nil, err
	}
	if c.shutdowns, err = m.Int64Counter("tether_controller_shutdowns", metric.WithDescription("Game servers told to shut down.")); err != nil {
		return nil, err
	}
	if c.passTime, err = m.Float64Histogram("tether_controller_pass_duration_seconds", metric.WithUnit("s"),
		metric.WithDescription("Time of one reconcile pass over every fleet."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5)); err != nil {
		return nil, err
	}
	if _, err = m.Int64ObservableGauge("tether_controller_views_stale",
		metric.WithDescription("1 while this leader finds the views stale (the projector behind and not moving), else 0."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if stale, _, _, _ := c.views.state(); stale && c.leader.Load() {
				o.Observe(1)
			} else {
				o.Observe(0)
			}
			return nil
		})); err != nil {
		return nil, err
	}
	if _, err = m.Int64ObservableGauge("tether_controller_views_lag",
		metric.WithDescription("Events in the stream not yet in the views, at this leader's last pass; 0 on a standby."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			var lag uint64
			if c.leader.Load() { // a former leader's last reading would be stale
				_, lag, _, _ = c.views.state()
			}
			o.Observe(int64(lag))
			return nil
		})); err != nil {
		return nil, err
	}
	if _, err = m.Int64ObservableGauge("tether_controller_leader", metric.WithDescription("1 while this instance holds the lease, else 0."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if c.leader.Load() {
				o.Observe(1)
			} else {
				o.Observe(0)
			}
			return nil
		})); err != nil {
		return nil, err
	}
	return c, nil
}

// IsLeader reports whether this instance holds the lease now.
func (c *Controller) IsLeader() bool { return c.leader.Load() }

// ID returns the instance id.
func (c *Controller) ID() string { return c.opts.ID }

// Run waits for the lease, acts while it holds it, and goes back to
// standby if it loses it, until ctx ends; a leader then releases the lease
// (the lease package), so a standby takes over at once.
func (c *Controller) Run(ctx context.Context) error {
	l, err := lease.Open(ctx, c.opts.JetStream, LeaseRole, c.opts.ID, c.log)
	if err != nil {
		if ctx.Err() != nil { // stopped before it could start: a clean stop
			return nil
		}
		return fmt.Errorf("controller: %w", err)
	}
	c.lease.Store(l)
	return l.Run(ctx, c.lead)
}

// lead reconciles every Interval until ctx ends: the lease is lost, or the
// controller stops.
func (c *Controller) lead(ctx context.Context, epoch uint64) error {
	c.leader.Store(true)
	defer c.leader.Store(false)
	c.seen = map[string]time.Time{}        // every host gets a full grace from a new leader
	c.startResent = map[string]time.Time{} // and every SCHEDULED server a full start timeout
	c.live.reset()                         // and reads the views whole
	c.hosts.reset()
	c.views.reset()         // and gives them a full StaleViewsAfter
	c.starts = startWatch{} // and reads start failures from the views' checkpoint
	c.hooks.reset()         // and asks the webhooks afresh
	c.written, c.caughtUp = 0, false
	defer c.stopBeats() // started by the first pass, with the leadership's context
	defer c.wake.stop() // started by the first pass
	c.log.Info("became leader", "epoch", epoch)
	if c.opts.WhileLeading != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := c.opts.WhileLeading(ctx); err != nil && ctx.Err() == nil {
				c.log.Error("work beside the passes stopped", "err", err)
			}
		}()
		defer func() { <-done }()
	}
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		began := time.Now()
		if err := c.Reconcile(ctx); err != nil && ctx.Err() == nil {
			c.log.Error("reconcile failed", "err", err)
		}
		if woken := waitNextPass(ctx, t.C, c.wake.wakes(), began, time.Since(began)); woken {
			c.awaitWake(ctx)
		}
	}
	return nil
}

// waitNextPass waits for the next pass after one that began at began and
// took took: the next tick, or a wake (a server ended, or an allocation
// took one out of a buffer) no sooner than wakeGap after the pass began,
// whichever comes first. It reports whether a wake ran it, so that the
// pass first waits for views that show what woke it. A wake only ever
// brings a pass sooner: a pass that took long waiting on NATS (10 s
// during a partition) once made the woken wait twice as long, and the
// controller decided nothing meanwhile.
func waitNextPass(ctx context.Context, tick <-chan time.Time, wakes <-chan struct{}, began time.Time, took time.Duration) (woken bool) {
	select {
	case <-ctx.Done():
		return false
	case <-tick:
		return false
	case <-wakes:
	}
	gap := time.NewTimer(time.Until(began.Add(wakeGap(took))))
	defer gap.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tick:
		return false
	case <-gap.C:
		return true
	}
}

// Reconcile runs one pass over every fleet: observe, plan (package plan),
// execute. Exported for tests that drive passes by hand; Run calls it
// every Interval while leader.
func (c *Controller) Reconcile(ctx context.Context) error {
	began := time.Now() // a duration: the monotonic clock, not Options.Clock
	steps := &passSteps{last: began}
	defer func() {
		took := time.Since(began)
		c.passTime.Record(context.WithoutCancel(ctx), took.Seconds())
		c.log.Debug("pass", "began", began, "took", took)
		if took >= c.opts.SlowPassAfter {
			c.log.Warn("slow pass", "took", took, "steps", steps.String())
		}
	}()
	s, err := c.observe(ctx, steps)
	if err != nil {
		return err
	}
	p := c.planner().Plan(s)
	steps.mark("planned")
	wrote, err := c.execute(ctx, p)
	steps.mark("executed")
	// Forget re-sends of servers that are no longer SCHEDULED (the live
	// servers are ordered by name: a few look-ups, not a pass over them).
	for name := range c.startResent {
		i, found := searchByName(s.Servers, name)
		if !found || s.Servers[i].State.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_SCHEDULED {
			delete(c.startResent, name)
		}
	}
	if err != nil {
		return err
	}
	if wrote && !s.Stale {
		defer steps.mark("the views include the writes")
		return c.awaitViews(ctx)
	}
	return nil
}

// passSteps times the steps of one pass, for the warning of a slow pass:
// a pass that stalls (during a NATS partition one made no decision for
// 20 s and logged nothing) says where its time went.
type passSteps struct {
	last  time.Time
	steps []string
}

// mark records that the step named name ended now.
func (p *passSteps) mark(name string) {
	now := time.Now()
	p.steps = append(p.steps, fmt.Sprintf("%s %s", name, now.Sub(p.last).Round(time.Millisecond)))
	p.last = now
}

// String lists the steps with how long each took.
func (p *passSteps) String() string { return strings.Join(p.steps, ", ") }

// planner returns the planner with this controller's settings.
func (c *Controller) planner() plan.Planner {
	return plan.Planner{
		Producer:         c.producer,
		ShutdownGrace:    c.opts.ShutdownGrace,
		ShutdownSettle:   c.opts.ShutdownSettle,
		StartTimeout:     c.opts.StartTimeout,
		UnreachableAfter: c.opts.UnreachableAfter,
		LostAfter:        c.opts.LostAfter,
		Backoff:          events.StartBackoff{Base: c.opts.StartBackoffBase, Cap: c.opts.StartBackoffCap},
		NewID:            func() string { return events.NewID("gs") },
	}
}

// awaitWake waits, at most wakeFreshnessWait, for the views to include
// the event that woke the pass loop; past it the pass runs on what they
// show (a projector that is behind is the staleness checks' business).
func (c *Controller) awaitWake(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, wakeFreshnessWait)
	defer cancel()
	if err := c.opts.Freshness.WaitFor(wctx, c.wake.sequence()); err != nil && ctx.Err() == nil {
		c.log.Debug("woken pass runs on views behind the event that woke it", "sequence", c.wake.sequence(), "err", err)
	}
}

// freshnessWait bounds a pass's wait for the views to show its own writes.
const freshnessWait = 5 * time.Second

// awaitViews waits (bounded) until the views include c.written, so that a
// pass never decides on views that miss earlier decisions. If they stay
// behind, the pass is skipped and the next one waits again.
//
// A new leader first reads the stream's last sequence: its predecessor may
// have appended decisions the views do not show yet, and acting on such
// views would, for one, schedule the same replicas twice.
func (c *Controller) awaitViews(ctx context.Context) error {
	if !c.caughtUp {
		seq, err := c.opts.Store.StreamLastSequence(ctx)
		if err != nil {
			return fmt.Errorf("read the stream's position: %w", err)
		}
		c.written, c.caughtUp = max(c.written, seq), true
	}
	if c.written == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, freshnessWait)
	defer cancel()
	if err := c.opts.Freshness.WaitFor(wctx, c.written); err != nil {
		return fmt.Errorf("wait for the views to include our writes: %w", err)
	}
	return nil
}

func (c *Controller) allFleets(ctx context.Context) ([]projections.FleetRow, error) {
	return c.opts.Views.FleetStates(ctx) // the pass counts servers itself, from the live ones
}

// stamp is what this controller records on the events it writes: itself
// as producer and actor, and the time.
func (c *Controller) stamp() events.Stamp {
	return events.Stamp{Producer: c.producer, Time: c.opts.Clock.Now()}
}
