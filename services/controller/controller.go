// Package controller is Tether's controller (DESIGN.md §2): one active
// instance at a time, chosen by a lease in NATS KV, that keeps every fleet at
// its replica count. It schedules new game servers on hosts with room,
// replaces terminated and unhealthy ones, scales down READY servers first
// (never ALLOCATED ones), and tells agents to start and stop processes.
// Every decision is an event appended with the aggregate's sequence as guard.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/hostbeat"
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
	ListFleets(ctx context.Context, after string, limit int) ([]postgres.FleetRow, error)
	Fleet(ctx context.Context, name string) (postgres.FleetRow, error)
	LiveGameServers(ctx context.Context) ([]postgres.Row[*eventsv1.GameServerState], error)
	GameServersChangedSince(ctx context.Context, after uint64) ([]postgres.Row[*eventsv1.GameServerState], error)
	Hosts(ctx context.Context, after string, limit int) ([]postgres.HostRow, error)
	GameServer(ctx context.Context, name string) (postgres.Row[*eventsv1.GameServerState], error)
	DueGameSessions(ctx context.Context, now time.Time, limit int) ([]postgres.Row[*eventsv1.GameSessionState], error)
	OrphanedGameSessions(ctx context.Context, limit int) ([]postgres.Row[*eventsv1.GameSessionState], error)
	UncreatedGameSessions(ctx context.Context, olderThan time.Time, limit int) ([]postgres.Row[*eventsv1.GameServerState], error)
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
	// LeaseTTL is how long a silent leader keeps the lease; default 10s.
	LeaseTTL time.Duration
	// Interval is the reconcile period; default 1s.
	Interval time.Duration
	// ShutdownGrace is the deadline given to a stopped server; default 30s.
	ShutdownGrace time.Duration
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
	// doubles with each failure after (startbackoff.go); default 1s.
	StartBackoffBase time.Duration
	// StartBackoffCap bounds that wait; default 5m.
	StartBackoffCap time.Duration
	// Logger; default discards.
	Logger *slog.Logger
	// MeterProvider; default no-op.
	MeterProvider metric.MeterProvider
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// The defaults of Options, and of the `tether controller` flags.
const (
	DefaultLeaseTTL         = 10 * time.Second
	DefaultInterval         = time.Second
	DefaultShutdownGrace    = 30 * time.Second
	DefaultUnreachableAfter = 10 * time.Second
	DefaultLostAfter        = time.Minute
	DefaultStartTimeout     = 10 * time.Second
	DefaultStaleViewsAfter  = 5 * time.Second
	DefaultStartBackoffBase = time.Second
	DefaultStartBackoffCap  = 5 * time.Minute
)

func (o *Options) setDefaults() {
	if o.ID == "" {
		o.ID = events.NewID("ctl")
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = DefaultShutdownGrace
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
	if o.Now == nil {
		o.Now = time.Now
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

// Controller is one controller instance; only the lease holder acts.
type Controller struct {
	opts     Options
	log      *slog.Logger
	producer string
	leader   atomic.Bool

	scheduled metric.Int64Counter
	shutdowns metric.Int64Counter
	passTime  metric.Float64Histogram

	noRoomLogged map[string]time.Time // fleet → last "no host with room" log
	beats        *hostbeat.Tracker    // host heartbeats, tracked while leader from the first pass
	seen         map[string]time.Time // host id → last heartbeat known while leader
	startResent  map[string]time.Time // SCHEDULED server → last time its start command was re-sent
	live         liveServers          // the live game servers, kept between passes
	views        viewsWatch           // whether the views still move (staleness.go)
	starts       startWatch           // game servers that end before READY (startbackoff.go)
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
		noRoomLogged: map[string]time.Time{}, seen: map[string]time.Time{}, startResent: map[string]time.Time{}}
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
		metric.WithDescription("Events in the stream not yet in the views, at this leader's last pass."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			_, lag, _, _ := c.views.state()
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
// standby if it loses it, until ctx ends; a leader then releases the lease.
func (c *Controller) Run(ctx context.Context) error {
	l, err := openLease(ctx, c.opts.JetStream, c.opts.ID, c.opts.LeaseTTL)
	if err != nil {
		if ctx.Err() != nil { // stopped before it could start: a clean stop
			return nil
		}
		return err
	}
	for {
		ok, err := l.acquire(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("lease unavailable", "err", err)
		}
		if ok {
			c.lead(ctx, l)
		}
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.opts.LeaseTTL / 5):
		}
	}
}

// lead reconciles while the lease holds.
func (c *Controller) lead(ctx context.Context, l *lease) {
	c.leader.Store(true)
	c.seen = map[string]time.Time{}        // every host gets a full grace from a new leader
	c.startResent = map[string]time.Time{} // and every SCHEDULED server a full start timeout
	c.live.reset()                         // and reads the views whole
	c.views.reset()                        // and gives them a full StaleViewsAfter
	c.starts = startWatch{}                // and reads start failures from the views' checkpoint
	c.written, c.caughtUp = 0, false
	defer c.stopBeats() // started by the first pass, with the leadership's context
	c.log.Info("became leader", "lease_ttl", c.opts.LeaseTTL)
	lctx, lost := context.WithCancel(ctx)
	defer lost()
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(c.opts.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				if err := l.renew(lctx); err != nil {
					if lctx.Err() == nil {
						c.leader.Store(false)
						c.log.Warn("lost leadership", "err", err)
					}
					lost()
					return
				}
			}
		}
	}()
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for lctx.Err() == nil {
		if err := c.Reconcile(lctx); err != nil && lctx.Err() == nil {
			c.log.Error("reconcile failed", "err", err)
		}
		select {
		case <-lctx.Done():
		case <-t.C:
		}
	}
	c.leader.Store(false)
	<-renewed // the renewer owns the lease's revision until it stops
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := l.release(rctx); err != nil {
			c.log.Warn("release lease", "err", err)
		} else {
			c.log.Info("released leadership")
		}
	}
}

// hostSlot is a host's room during one pass.
type hostSlot struct {
	id       string
	name     string
	capacity int32
	used     int32
}

// Reconcile runs one pass over every fleet. Exported for tests that drive
// passes by hand; Run calls it every Interval while leader.
func (c *Controller) Reconcile(ctx context.Context) error {
	began := time.Now() // a duration: the monotonic clock, not Options.Now
	defer func() { c.passTime.Record(context.WithoutCancel(ctx), time.Since(began).Seconds()) }()
	if stale, err := c.checkViews(ctx); err != nil {
		return err
	} else if stale {
		return c.watchHostsOnly(ctx)
	}
	if err := c.awaitViews(ctx); err != nil {
		return err
	}
	fleets, err := c.allFleets(ctx)
	if err != nil {
		return err
	}
	servers, err := c.live.read(ctx, c.opts.Views)
	if err != nil {
		return err
	}
	hostRows, err := c.allHosts(ctx)
	if err != nil {
		return err
	}
	wrote := false
	note := func(seq uint64) { wrote, c.written = true, max(c.written, seq) }
	status, err := c.checkHosts(ctx, hostRows, servers, note)
	if err != nil {
		return err
	}
	c.terminateOrphans(ctx, hostRows, servers, note)
	hosts, err := roomOn(hostRows, status)
	if err != nil {
		return err
	}
	if err := c.watchStarts(ctx, fleets, note); err != nil {
		return err
	}
	byFleet := map[string][]postgres.Row[*eventsv1.GameServerState]{}
	scheduled := map[string]bool{}
	for _, s := range servers {
		if s.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_SCHEDULED {
			scheduled[s.State.GetName()] = true
		}
		fleet, _, err := events.ParseGameServerName(s.State.GetName())
		if err != nil {
			return err
		}
		if status[s.State.GetHost()] == eventsv1.HostStatus_HOST_STATUS_LOST {
			continue // just terminated by checkHosts
		}
		byFleet[events.FleetName(fleet)] = append(byFleet[events.FleetName(fleet)], s)
	}
	for _, f := range fleets {
		if err := c.reconcileFleet(ctx, f.State, byFleet[f.State.GetName()], hosts, note); err != nil {
			c.log.Error("reconcile fleet", "fleet", f.State.GetName(), "err", err)
		}
		delete(byFleet, f.State.GetName())
	}
	// What is left belongs to fleets that are not live: deleted ones, or
	// (read between the two queries) created since; the fleet row tells.
	for _, fleet := range slices.Sorted(maps.Keys(byFleet)) {
		if fleet == events.FleetName(events.StandaloneFleet) {
			continue // no fleet: never replaced; a failed one stays UNHEALTHY until deleted
		}
		f, err := c.opts.Views.Fleet(ctx, fleet)
		if err != nil {
			c.log.Error("read the fleet of live game servers", "fleet", fleet, "err", err)
			continue
		}
		if !f.State.GetDeleted() {
			continue
		}
		for _, r := range byFleet[fleet] {
			if r.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN {
				continue
			}
			if err := c.shutdown(ctx, r, eventsv1.Reason_REASON_FLEET_DELETED, "fleet "+fleet+" was deleted", note); err != nil {
				c.log.Error("shut down server of a deleted fleet", "game_server", r.State.GetName(), "err", err)
			}
		}
	}
	if err := c.reconcileSessions(ctx, servers, note); err != nil {
		c.log.Error("reconcile game sessions", "err", err)
	}
	// Forget re-sends of servers that are no longer SCHEDULED.
	for name := range c.startResent {
		if !scheduled[name] {
			delete(c.startResent, name)
		}
	}
	if wrote {
		return c.awaitViews(ctx)
	}
	return nil
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

func (c *Controller) allFleets(ctx context.Context) ([]postgres.FleetRow, error) {
	return readAll(ctx, c.opts.Views.ListFleets, func(r postgres.FleetRow) string { return r.State.GetName() })
}

func (c *Controller) allHosts(ctx context.Context) ([]postgres.HostRow, error) {
	return readAll(ctx, c.opts.Views.Hosts, func(r postgres.HostRow) string { return r.State.GetName() })
}

// readAll pages through a view listed by name.
func readAll[R any](ctx context.Context, list func(context.Context, string, int) ([]R, error), name func(R) string) ([]R, error) {
	const page = 500
	var out []R
	after := ""
	for {
		rows, err := list(ctx, after, page)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		if len(rows) < page {
			return out, nil
		}
		after = name(rows[len(rows)-1])
	}
}

// roomOn lists the hosts that take new servers: ONLINE ones (not
// unreachable, lost or draining), with their used slots.
func roomOn(hosts []postgres.HostRow, status map[string]eventsv1.HostStatus) ([]*hostSlot, error) {
	var out []*hostSlot
	for _, h := range hosts {
		if status[h.State.GetName()] != eventsv1.HostStatus_HOST_STATUS_ONLINE {
			continue
		}
		id, err := events.ParseHostName(h.State.GetName())
		if err != nil {
			return nil, err
		}
		out = append(out, &hostSlot{id: id, name: h.State.GetName(), capacity: h.State.GetCapacity(), used: h.Used})
	}
	return out, nil
}

// reconcileFleet brings one fleet toward its replica count.
func (c *Controller) reconcileFleet(ctx context.Context, f *eventsv1.FleetState, rows []postgres.Row[*eventsv1.GameServerState],
	hosts []*hostSlot, note func(uint64)) error {
	now := c.opts.Now()
	var live []postgres.Row[*eventsv1.GameServerState]
	for _, r := range rows {
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY:
			// Terminate it (its process may still run) and let it be replaced.
			reason := r.State.GetReason()
			if reason == eventsv1.Reason_REASON_UNSPECIFIED {
				reason = eventsv1.Reason_REASON_HEALTH_CHECK_FAILED
			}
			if err := c.shutdown(ctx, r, reason, "unhealthy: replaced", note); err != nil {
				return err
			}
		case eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN:
		default:
			live = append(live, r)
			if r.State.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_SCHEDULED {
				c.resendStart(ctx, r.State, now)
			}
		}
	}
	want, limit := int(f.GetSpec().GetReplicas()), len(live)+startsAllowed(f, live, now)
	for i := len(live); i < want && i < limit; i++ {
		h := pickHost(hosts, f.GetSpec().GetScheduling())
		if h == nil {
			if last, ok := c.noRoomLogged[f.GetName()]; !ok || now.Sub(last) > time.Minute {
				c.log.Warn("no host with room for the fleet", "fleet", f.GetName(), "missing", want-i)
				c.noRoomLogged[f.GetName()] = now
			}
			return nil
		}
		if err := c.schedule(ctx, f, h, note); err != nil {
			return err
		}
		h.used++
	}
	if surplus := len(live) - want; surplus > 0 {
		candidates := scaleDownOrder(live)
		for _, r := range candidates[:min(surplus, len(candidates))] {
			detail := fmt.Sprintf("fleet scaled from %d to %d", len(live), want)
			if err := c.shutdown(ctx, r, eventsv1.Reason_REASON_FLEET_SCALED_DOWN, detail, note); err != nil {
				return err
			}
		}
	}
	return nil
}

// scaleDownOrder lists the servers that may be scaled down, best first:
// READY, then those not yet ready; newest first within each. ALLOCATED and
// RESERVED servers are never scaled down.
func scaleDownOrder(live []postgres.Row[*eventsv1.GameServerState]) []postgres.Row[*eventsv1.GameServerState] {
	rank := func(l eventsv1.Lifecycle) int {
		switch l {
		case eventsv1.Lifecycle_LIFECYCLE_READY:
			return 0
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_STARTING:
			return 1
		}
		return -1
	}
	var out []postgres.Row[*eventsv1.GameServerState]
	for _, r := range live {
		if rank(r.State.GetLifecycle()) >= 0 {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b postgres.Row[*eventsv1.GameServerState]) int {
		if ra, rb := rank(a.State.GetLifecycle()), rank(b.State.GetLifecycle()); ra != rb {
			return ra - rb
		}
		return b.State.GetCreateTime().AsTime().Compare(a.State.GetCreateTime().AsTime())
	})
	return out
}

// pickHost chooses a host with room: the fullest for PACKED, the emptiest
// for DISTRIBUTED; ties by name.
func pickHost(hosts []*hostSlot, s eventsv1.Scheduling) *hostSlot {
	var best *hostSlot
	for _, h := range hosts {
		if h.used >= h.capacity {
			continue
		}
		switch {
		case best == nil:
			best = h
		case s == eventsv1.Scheduling_SCHEDULING_DISTRIBUTED && (h.used < best.used || h.used == best.used && h.name < best.name):
			best = h
		case s != eventsv1.Scheduling_SCHEDULING_DISTRIBUTED && (h.used > best.used || h.used == best.used && h.name < best.name):
			best = h
		}
	}
	return best
}

// schedule places a new game server of fleet f on host h.
func (c *Controller) schedule(ctx context.Context, f *eventsv1.FleetState, h *hostSlot, note func(uint64)) error {
	fleetID, err := events.ParseFleetName(f.GetName())
	if err != nil {
		return err
	}
	name := events.GameServerName(fleetID, events.NewID("gs"))
	msgs, err := events.DecideGameServer(name, nil, events.ScheduleGameServer{Host: h.name, Spec: f.GetSpec()})
	if err != nil {
		return err
	}
	seq, err := c.opts.Store.Append(ctx, events.MustSubject(name), 0, c.envelopes(name, msgs)...)
	if err != nil {
		return fmt.Errorf("schedule %s: %w", name, err)
	}
	note(seq)
	c.scheduled.Add(ctx, 1)
	c.log.Info("game server scheduled", "game_server", name, "host", h.name)
	return c.sendStart(ctx, h.name, name, f.GetSpec())
}

func (c *Controller) sendStart(ctx context.Context, host, name string, spec *eventsv1.FleetSpec) error {
	hostID, err := events.ParseHostName(host)
	if err != nil {
		return err
	}
	return c.opts.Commands.Send(ctx, hostID, c.producer, &agentv1.Command{Action: &agentv1.Command_Start{Start: &agentv1.StartGameServer{
		GameServer: name, Template: proto.CloneOf(spec.GetTemplate()), Health: proto.CloneOf(spec.GetHealth()),
		SdkDisconnectGraceSeconds: spec.GetSdkDisconnectGraceSeconds(), Labels: maps.Clone(spec.GetLabels()),
	}}})
}

// resendStart sends a SCHEDULED server's start command again when neither
// it was scheduled nor its command last re-sent within StartTimeout (the
// command may have been lost, or the agent away; the agent ignores a
// duplicate). The command is rebuilt from the server's own copy of the
// template and policies, which a later fleet update does not change.
func (c *Controller) resendStart(ctx context.Context, s *eventsv1.GameServerState, now time.Time) {
	since := s.GetCreateTime().AsTime()
	if t, ok := c.startResent[s.GetName()]; ok && t.After(since) {
		since = t
	}
	if now.Sub(since) <= c.opts.StartTimeout {
		return
	}
	spec := &eventsv1.FleetSpec{Template: s.GetTemplate(), Health: s.GetHealthPolicy(),
		SdkDisconnectGraceSeconds: s.GetSdkDisconnectGraceSeconds(), Labels: s.GetLabels()}
	if err := c.sendStart(ctx, s.GetHost(), s.GetName(), spec); err != nil {
		c.log.Error("re-send start command", "game_server", s.GetName(), "err", err)
		return
	}
	c.startResent[s.GetName()] = now
	c.log.Warn("start command re-sent", "game_server", s.GetName(), "host", s.GetHost(),
		"scheduled_at", s.GetCreateTime().AsTime(), "start_timeout", c.opts.StartTimeout)
}

// shutdown decides a server's shutdown, appends it guarded by the row's
// sequence (a conflict skips it this pass) and tells its agent.
func (c *Controller) shutdown(ctx context.Context, r postgres.Row[*eventsv1.GameServerState], reason eventsv1.Reason, detail string, note func(uint64)) error {
	name := r.State.GetName()
	deadline := c.opts.Now().Add(c.opts.ShutdownGrace)
	ev := proto.CloneOf(r.State.GetEvidence())
	if ev == nil {
		ev = &eventsv1.Evidence{}
	}
	ev.RequestedBy, ev.Detail = c.producer, detail
	msgs, err := events.DecideGameServer(name, r.State, events.RequestShutdown{Reason: reason, Evidence: ev, Deadline: deadline})
	if err != nil || len(msgs) == 0 {
		return err
	}
	seq, err := c.opts.Store.Append(ctx, events.MustSubject(name), r.Sequence, c.envelopes(name, msgs)...)
	if errors.Is(err, events.ErrConflict) {
		c.log.Debug("server changed under the decision; next pass", "game_server", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("shut down %s: %w", name, err)
	}
	note(seq)
	c.shutdowns.Add(ctx, 1)
	c.log.Info("game server shutdown requested", "game_server", name, "reason", events.ReasonName(reason))
	hostID, err := events.ParseHostName(r.State.GetHost())
	if err != nil {
		return err
	}
	return c.opts.Commands.Send(ctx, hostID, c.producer, &agentv1.Command{Action: &agentv1.Command_Stop{Stop: &agentv1.StopGameServer{
		GameServer: name, Reason: reason, Deadline: timestamppb.New(deadline),
	}}})
}

func (c *Controller) envelopes(name string, msgs []proto.Message) []events.Envelope {
	now := c.opts.Now()
	out := make([]events.Envelope, len(msgs))
	for i, m := range msgs {
		out[i] = events.New(name, now, m)
		out[i].Producer = c.producer
		out[i].CorrelationID = out[0].ID
	}
	return out
}
