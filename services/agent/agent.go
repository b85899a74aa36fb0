// Package agent is Tether's host agent (docs/architecture.md, "Components"
// and "The agent"): one per machine.
// It registers its host and keeps it alive with its host beat outside the
// event stream (its key in the hostbeat bucket), consumes its host's
// commands, launches and supervises game server processes from their
// fleet's template, serves them the local SDK on loopback (sdkOps is what
// an SDK protocol can ask of it), and publishes what happens to them as
// events.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/platform/playertoken"
)

// eventStore is what the agent needs of the event store (events/natsjs).
type eventStore interface {
	Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error)
	History(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)
	// CurrentHistory is History as the stream's leader has it, for
	// decisions on absence (natsjs.Store.CurrentHistory).
	CurrentHistory(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)
}

// countingStore counts the events the stream acknowledged. An append that
// failed may still have been stored; its retry from the outbox carries the
// same event ids, is de-duplicated by the stream and counted then, once.
// An append of several events that failed after storing some of them
// (events.PartialAppendError: a conflict between two of them) counts
// those: nothing appends them again.
type countingStore struct {
	eventStore
	published metric.Int64Counter
}

// Append appends and counts the events on success.
func (s countingStore) Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	seq, err := s.eventStore.Append(ctx, subject, expected, evs...)
	var partial *events.PartialAppendError
	switch {
	case err == nil:
		s.published.Add(context.WithoutCancel(ctx), int64(len(evs)))
	case errors.As(err, &partial):
		s.published.Add(context.WithoutCancel(ctx), int64(partial.Stored))
	}
	return seq, err
}

// commandSource gives the agent its host's durable command consumer: the
// one the stream has, or one made anew delivering from a stream sequence
// (0: the recent commands), as commands.Bus.Consumer does.
type commandSource interface {
	Consumer(ctx context.Context, host string, from uint64) (jetstream.Consumer, error)
}

// Options configure an agent.
type Options struct {
	// HostID is the host's id (required), e.g. "h1".
	HostID string
	// Capacity is the number of game servers the host can run; default 10.
	Capacity int
	// Labels describe the host (region, zone).
	Labels map[string]string
	// Address is where game clients reach this host's game servers; default 127.0.0.1.
	Address string
	// SDKAddr is the loopback gRPC address of the local SDK; default
	// DefaultSDKAddr ("127.0.0.1:0" takes a free port).
	SDKAddr string
	// SDKHTTPAddr is the loopback REST address of the local SDK; default
	// DefaultSDKHTTPAddr.
	SDKHTTPAddr string
	// PortMin and PortMax bound the ports given to game servers; default
	// DefaultPortMin to DefaultPortMax.
	PortMin, PortMax int
	// AgonesPortMin and AgonesPortMax bound the loopback ports of the
	// Agones SDK servers, two per game server (gRPC, HTTP); default
	// DefaultAgonesPortMin to DefaultAgonesPortMax, a pair for each port
	// of the default game port range, so that every server the game
	// ports allow on a machine (tether dev's hosts share both ranges)
	// gets its pair.
	AgonesPortMin, AgonesPortMax int
	// LogDir holds the game servers' log files (under logs/), the records
	// of the processes the agent started and, by default, its outbox;
	// default <tmp>/tether-agent-<host>.
	LogDir string
	// Logs configure the game servers' log files: rotation and retention.
	Logs LogOptions
	// JetStream is the NATS JetStream context (required).
	JetStream jetstream.JetStream
	// Store is the event store (required).
	Store eventStore
	// Commands gives the host's command consumer (required).
	Commands commandSource
	// HeartbeatInterval is how often the host beat is put; default 2s.
	HeartbeatInterval time.Duration
	// MaxStartAttempts bounds starts of a process that exits before Ready; default 3.
	MaxStartAttempts int
	// RestartBackoff is the first delay before a restart; it doubles; default 500ms.
	RestartBackoff time.Duration
	// HealthEvalInterval is how often the health contract is evaluated; default 200ms.
	HealthEvalInterval time.Duration
	// SyncInterval is how often the agent re-reads its servers' histories to
	// catch decisions it missed, as a backstop; default 60s. It also re-reads
	// them at once whenever its host beat resumes after a gap (failed,
	// paused or late puts), which is when the control plane may have judged
	// the host lost and terminated its servers. Each re-read is one NATS
	// request per server, so at 10,000 hosts of 10 servers a 5 s period
	// would cost the NATS server 20,000 requests/s (docs/scaling.md).
	SyncInterval time.Duration
	// ObserveJetStream, if set, is told the outcome of every host beat put
	// and when the put began (jsclient.Reconnector.Observe: a connection to a
	// NATS server cut off from the cluster moves to another); when it
	// reports that the connection moved, the agent puts the beat again at
	// once, through the new server.
	ObserveJetStream func(began time.Time, err error) (moved bool)
	// OutboxDir keeps events while NATS is unreachable; default LogDir/outbox.
	OutboxDir string
	// OutboxMax bounds the events kept; default 100000.
	OutboxMax int
	// MeterProvider; default no-op.
	MeterProvider metric.MeterProvider
	// TracerProvider traces the commands the agent handles and the
	// allocations it tells game servers of, in their senders' traces;
	// default no-op.
	TracerProvider trace.TracerProvider
	// StreamKeepalive is the interval of gRPC keepalive pings on SDK
	// connections (at least 1s, grpc-go's floor) and how long a ping may go
	// unacknowledged, so a vanished peer is noticed within interval+timeout
	// and recorded as a keepalive timeout; default 10s.
	StreamKeepalive time.Duration
	// SkipHeartbeat, if set, is asked before each host beat and
	// suppresses it while it returns true: a fault-injection hook for tests
	// and drills (a host that the control plane loses sight of while its
	// processes run on). Nil always beats.
	SkipHeartbeat func() bool
	// Tokens checks the player-session tokens players present
	// (AcceptPlayer); the API signs them with the same keys. Without it,
	// AcceptPlayer is refused.
	Tokens *playertoken.Ring
	// Processes starts game server processes; default OSProcesses. The
	// fleet simulator gives simulated ones.
	Processes Processes
	// RunAs is the user every game server runs as, a name or a numeric
	// uid, with that user's primary group and no supplementary groups; its
	// home directory is the servers' HOME. Another user than the agent's
	// needs an agent running as root. "" runs them as the agent's own
	// user: an agent running as root then starts them as root, which
	// CheckRunAs refuses (`tether agent` calls it) and the agent warns of.
	RunAs string
	// AllowRootGameServers accepts game servers running as root: RunAs
	// naming root, or empty in an agent running as root. For development
	// only (`tether dev`).
	AllowRootGameServers bool
	// AllowedCommands are the directories game server executables must be
	// in (or below), or single programs allowed alone, after symbolic links
	// are resolved; a template whose command is elsewhere ends its server
	// with PROCESS_START_FAILED. Each must exist. Empty, New refuses the
	// options (ErrAnyCommand) unless AllowAnyCommand is set.
	AllowedCommands []string
	// AllowAnyCommand lets game servers run any command when
	// AllowedCommands is empty: every fleet template's program runs, as
	// the game servers' user, and the agent warns at start-up that it
	// does. For simulated processes (the fleet simulator) and development
	// only; AllowedCommands, when given, restricts them all the same.
	AllowAnyCommand bool
	// LocalSDKOnly serves the SDK only in this process (Agent.LocalSDK),
	// binding no listeners: for the fleet simulator, which runs thousands
	// of agents in one process. SDKAddr and SDKHTTPAddr are then ignored.
	LocalSDKOnly bool
	// KillProcessesOnExit stops every game server when the agent stops, and
	// makes them die with the agent (for `tether dev` and tests).
	KillProcessesOnExit bool
	// DrainOnStop drains the host before the agent stops: when Run's
	// context ends, the agent asks for its host's drain (HostDrainRequested)
	// and goes on serving until it runs no game server (the controller
	// moves the READY ones elsewhere, matches finish), DrainTimeout
	// passes, or StopDrain is closed; then it stops. The host stays
	// cordoned until uncordoned.
	DrainOnStop bool
	// DrainTimeout bounds a drain on stop; default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// StopDrain, closed, ends a drain on stop at once (`tether agent`
	// closes it on a second SIGTERM or interrupt).
	StopDrain <-chan struct{}
	// Version is the agent's version, reported at registration.
	Version string
	// Logger; default discards.
	Logger *slog.Logger
	// Clock is the time the agent's decisions read, and the time on its
	// events and host beats: health periods, SDK disconnect grace,
	// shutdown deadlines and restart backoff run on it (tests give a
	// clockwork.FakeClock and move it by hand); default the real clock.
	// Network retries and the cadence of host beats and re-syncs run on
	// real time: the control plane judges host beats by the NATS server's
	// clock.
	Clock clockwork.Clock
	// RunClock is the clock the agent tells by that it has not run (its
	// process stopped with SIGSTOP, a suspended VM or container, a stalled
	// runtime): a watch ticks on it every HealthEvalInterval, and a tick
	// later than that and a second more is a pause, whose span on Clock
	// counts toward no health period, SDK disconnect grace or ready
	// timeout. Default the real clock (its monotonic reading), whatever
	// Clock is: a test that moves a fake Clock by hand is time passing
	// while the agent runs, unless it gives the same clock here, when a
	// move is a pause.
	RunClock clockwork.Clock
}

// The defaults of Options, and of the `tether agent` flags.
const (
	DefaultCapacity           = 10
	DefaultAddress            = "127.0.0.1"
	DefaultSDKAddr            = "127.0.0.1:7200"
	DefaultSDKHTTPAddr        = "127.0.0.1:7201"
	DefaultPortMin            = 7300
	DefaultPortMax            = 7999
	DefaultAgonesPortMin      = 8300
	DefaultAgonesPortMax      = 9699
	DefaultHeartbeatInterval  = 2 * time.Second
	DefaultMaxStartAttempts   = 3
	DefaultRestartBackoff     = 500 * time.Millisecond
	DefaultHealthEvalInterval = 200 * time.Millisecond
	DefaultSyncInterval       = time.Minute
	DefaultOutboxMax          = 100_000
	DefaultStreamKeepalive    = 10 * time.Second
	DefaultDrainTimeout       = time.Hour
)

func (o *Options) setDefaults() {
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.Address == "" {
		o.Address = DefaultAddress
	}
	if o.SDKAddr == "" {
		o.SDKAddr = DefaultSDKAddr
	}
	if o.SDKHTTPAddr == "" {
		o.SDKHTTPAddr = DefaultSDKHTTPAddr
	}
	if o.AgonesPortMin <= 0 {
		o.AgonesPortMin = DefaultAgonesPortMin
	}
	if o.AgonesPortMax <= 0 {
		o.AgonesPortMax = DefaultAgonesPortMax
	}
	if o.PortMin <= 0 {
		o.PortMin = DefaultPortMin
	}
	if o.PortMax <= 0 {
		o.PortMax = DefaultPortMax
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(os.TempDir(), "tether-agent-"+o.HostID)
	}
	o.Logs.setDefaults()
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.MaxStartAttempts <= 0 {
		o.MaxStartAttempts = DefaultMaxStartAttempts
	}
	if o.RestartBackoff <= 0 {
		o.RestartBackoff = DefaultRestartBackoff
	}
	if o.HealthEvalInterval <= 0 {
		o.HealthEvalInterval = DefaultHealthEvalInterval
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.OutboxDir == "" {
		o.OutboxDir = filepath.Join(o.LogDir, "outbox")
	}
	if o.OutboxMax <= 0 {
		o.OutboxMax = DefaultOutboxMax
	}
	if o.MeterProvider == nil {
		o.MeterProvider = metricnoop.NewMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = tracenoop.NewTracerProvider()
	}
	if o.StreamKeepalive <= 0 {
		o.StreamKeepalive = DefaultStreamKeepalive
	}
	if o.Processes == nil {
		o.Processes = OSProcesses{}
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.RunClock == nil {
		o.RunClock = clockwork.NewRealClock()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o *Options) validate() error {
	switch {
	case events.CheckID(o.HostID) != nil:
		return fmt.Errorf("agent: host id: %w", events.CheckID(o.HostID))
	case o.JetStream == nil:
		return errors.New("agent: JetStream is required")
	case o.Store == nil:
		return errors.New("agent: Store is required")
	case o.Commands == nil:
		return errors.New("agent: Commands is required")
	case o.AgonesPortMin+1 > o.AgonesPortMax:
		return fmt.Errorf("agent: Agones SDK port range %d-%d holds no pair", o.AgonesPortMin, o.AgonesPortMax)
	case o.PortMin > o.PortMax:
		return fmt.Errorf("agent: port range %d-%d is empty", o.PortMin, o.PortMax)
	}
	return checkAllowedCommands(*o)
}

// Agent is one host's agent.
type Agent struct {
	opts     Options
	log      *slog.Logger
	tracer   trace.Tracer
	host     string // resource name
	producer string
	// registered is set once this agent's HostRegistered is stored: a
	// drain on stop needs a registered host.
	registered atomic.Bool
	// incarnation is a random id of this agent process, in its host's
	// registration and its process records: a new one tells the control
	// plane that the host's earlier processes are nobody's now.
	incarnation string
	records     processRecords // the processes it started (orphans.go)
	runAs       *runAs         // nil: the agent's own user
	allowed     allowedCommands
	ports       *portPool
	agonesPorts *portPool
	sdk         *sdkServer
	outbox      *outbox
	logs        *logStore // the game servers' log files (logs.go)
	// stopping is set when the agent stops: SDK streams it ends then are
	// not game servers disconnecting.
	stopping atomic.Bool
	// background runs the health ping folds that wait for a server's lock;
	// the agent waits for them before it closes its outbox.
	background backgroundWork

	outboxFull metric.Int64Counter
	// watch tells when the agent has not run (watchRuns); paused counts
	// the pauses it found.
	watch  runWatch
	paused metric.Int64Counter

	sessions sessions // game sessions of its servers, for player calls

	// resumed is signalled when the host beat resumes after a gap, so
	// that servers are re-read from the stream at once (syncServers).
	resumed chan struct{}

	mu      sync.Mutex
	servers map[string]*gameServer // by resource name
	tokens  map[string]*gameServer // by process token
	wg      sync.WaitGroup         // supervisors
}

// New builds an agent and binds its SDK listeners.
func New(opts Options) (*Agent, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	runAs, err := lookupRunAs(opts.RunAs, os.Geteuid(), os.Getegid(), opts.AllowRootGameServers)
	if err != nil {
		return nil, err
	}
	allowed, err := newAllowedCommands(opts.AllowedCommands)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: log dir: %w", err)
	}
	a := &Agent{
		opts:        opts,
		log:         opts.Logger.With("host", opts.HostID),
		tracer:      opts.TracerProvider.Tracer("github.com/tetherhq/tether/services/agent"),
		host:        events.HostName(opts.HostID),
		producer:    events.HostName(opts.HostID),
		incarnation: events.NewID("agent"),
		records:     processRecords{dir: filepath.Join(opts.LogDir, "processes")},
		runAs:       runAs,
		allowed:     allowed,
		ports:       newPortPool(opts.PortMin, opts.PortMax),
		agonesPorts: newPortPool(opts.AgonesPortMin, opts.AgonesPortMax),
		servers:     map[string]*gameServer{},
		tokens:      map[string]*gameServer{},
		resumed:     make(chan struct{}, 1),
		watch:       runWatch{late: opts.HealthEvalInterval + minPause},
	}
	if _, real := opts.Processes.(OSProcesses); real {
		if err := a.keepInheritedFDs(); err != nil {
			return nil, err
		}
	}
	if a.outbox, err = openOutbox(opts.OutboxDir, opts.OutboxMax); err != nil {
		return nil, err
	}
	if a.logs, err = newLogStore(opts.LogDir, opts.Logs, a.log); err != nil {
		return nil, err
	}
	meter := opts.MeterProvider.Meter("github.com/tetherhq/tether/services/agent")
	if a.outboxFull, err = meter.Int64Counter("tether_agent_outbox_full",
		metric.WithDescription("Events refused because the outbox was full while NATS was unreachable.")); err != nil {
		return nil, err
	}
	if a.paused, err = meter.Int64Counter("tether_agent_pauses",
		metric.WithDescription("Times the agent found it had not run for over a second (stopped, suspended, starved): health periods, SDK grace and ready timeouts do not count such a pause.")); err != nil {
		return nil, err
	}
	published, err := meter.Int64Counter("tether_agent_events_published",
		metric.WithDescription("Events the stream acknowledged from this agent (an audit compares it with the stream)."))
	if err != nil {
		return nil, err
	}
	a.opts.Store = countingStore{eventStore: a.opts.Store, published: published}
	if _, err = meter.Int64ObservableGauge("tether_agent_outbox_events",
		metric.WithDescription("Events kept on disk, waiting for NATS."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(a.outbox.len()))
			return nil
		})); err != nil {
		return nil, err
	}
	if opts.LocalSDKOnly {
		a.sdk = &sdkServer{ops: agentSDK{a: a}, log: a.log, streamKeepalive: opts.StreamKeepalive}
		return a, nil
	}
	sdk, err := newSDKServer(agentSDK{a: a}, a.log, opts.StreamKeepalive, opts.SDKAddr, opts.SDKHTTPAddr)
	if err != nil {
		return nil, err
	}
	a.sdk = sdk
	return a, nil
}

// SDKAddr returns the local SDK's gRPC address ("" with LocalSDKOnly).
func (a *Agent) SDKAddr() string { return a.sdk.grpcAddr() }

// SDKHTTPAddr returns the local SDK's REST address ("" with LocalSDKOnly).
func (a *Agent) SDKHTTPAddr() string { return a.sdk.httpAddr() }

// LocalSDK returns the in-process SDK. It works whether or not the agent
// also binds SDK listeners.
func (a *Agent) LocalSDK() *LocalSDK { return &LocalSDK{s: a.sdk} }

// Run reclaims what an earlier agent of the host left (orphans.go),
// registers the host and serves until ctx ends. An agent stopped while it
// still starts up stops cleanly: its start-up steps retry until they
// succeed, so they end only with ctx, and what an earlier agent left stays
// recorded for the next one.
func (a *Agent) Run(ctx context.Context) error {
	if a.opts.DrainOnStop {
		// Serve on until the drain is done, not until ctx ends.
		stopping := ctx.Done()
		serving, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
		go func() {
			select {
			case <-stopping:
				a.drainOnStop(serving)
				stop()
			case <-serving.Done():
			}
		}()
		ctx = serving
	}
	st, err := a.startUp(ctx)
	if err != nil {
		if ctx.Err() != nil {
			a.log.Info("agent stopped while starting", "err", err)
			return a.outbox.close()
		}
		return errors.Join(err, a.outbox.close())
	}
	a.log.Info("agent started", "incarnation", a.incarnation, "sdk", a.SDKAddr(), "sdk_http", a.SDKHTTPAddr(), "capacity", a.opts.Capacity)
	a.warnIsolation()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { a.stopOrphans(gctx, st.orphans); return nil })
	g.Go(func() error { return a.sdk.run(gctx) })
	g.Go(func() error { return a.beatHost(gctx, st.beats) })
	g.Go(func() error { return a.consumeCommands(gctx, st.commands) })
	g.Go(func() error { return a.watchRuns(gctx) })
	g.Go(func() error { return a.evaluateHealth(gctx) })
	g.Go(func() error { return a.syncServers(gctx) })
	g.Go(func() error { return a.publishOutbox(gctx) })
	g.Go(func() error { return a.serveLogs(gctx) })
	g.Go(func() error { return a.logs.runRetention(gctx) })
	err = g.Wait()
	if a.opts.KillProcessesOnExit {
		a.stopAll()
		a.wg.Wait()
	} else if n := len(a.snapshot()); n > 0 {
		// Their supervisors stay blocked on the processes and record nothing
		// more (supervise checks ctx): the agent exits now, as SIGTERM asks,
		// and the next agent on this host reclaims the processes.
		a.log.Info("agent stopping; leaving its game server processes running", "game_servers", n)
	}
	a.stopping.Store(true) // as the SDK server does; it runs no goroutine with LocalSDKOnly
	a.background.close()
	return errors.Join(err, a.outbox.close())
}

// backgroundWork runs functions on goroutines of their own until it is
// closed, and close waits for those running.
type backgroundWork struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// start runs f on a goroutine; false (and f not run) once closed.
func (b *backgroundWork) start(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Go(f)
	return true
}

// close refuses new work and waits for what runs.
func (b *backgroundWork) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}

// started is what the agent's start-up steps yield for its serving loops.
type started struct {
	orphans  []processRecord
	beats    jetstream.KeyValue
	commands jetstream.Consumer
}

// startUp runs the start-up steps in order: reclaim, register, open the
// host beat bucket and the command consumer.
func (a *Agent) startUp(ctx context.Context) (started, error) {
	var st started
	if err := a.untilDone(ctx, "reclaim an earlier agent's servers", func() (err error) {
		st.orphans, err = a.reclaim(ctx)
		return err
	}); err != nil {
		return st, err
	}
	if err := a.untilDone(ctx, "register the host", func() error { return a.register(ctx) }); err != nil {
		return st, err
	}
	a.registered.Store(true)
	if err := a.untilDone(ctx, "open the heartbeat bucket", func() (err error) {
		st.beats, err = hostbeat.Open(ctx, a.opts.JetStream)
		return err
	}); err != nil {
		return st, err
	}
	err := a.untilDone(ctx, "open the command consumer", func() (err error) {
		st.commands, err = a.opts.Commands.Consumer(ctx, a.opts.HostID, 0)
		return err
	})
	return st, err
}

// untilDone retries a start-up step with jittered, doubling backoff (up to
// 5 s) until it succeeds or ctx ends: an agent waits out a control plane
// that is away or busy (thousands of agents starting at once after an
// outage) instead of exiting. Storage that does not exist is the exception:
// only `tether migrate` creates it, so the agent exits saying so.
func (a *Agent) untilDone(ctx context.Context, what string, step func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := step()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, jsclient.ErrNotSetUp) { // waiting will not create it
			return fmt.Errorf("agent: %s: %w", what, err)
		}
		wait := backoff/2 + rand.N(backoff)
		a.log.Warn("agent start-up step failed; retrying", "step", what, "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent: %s: %w", what, err)
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// stamp is what the agent records on the events it writes: itself (its
// host) as producer and actor, and the time.
func (a *Agent) stamp() events.Stamp {
	return events.Stamp{Producer: a.producer, Time: a.opts.Clock.Now()}
}

// stampFor is stamp with the actor ctx carries (events.WithActor): the
// game server, for what its SDK calls asked (sdkCaller.acting); none, the
// agent itself, for what the agent decided.
func (a *Agent) stampFor(ctx context.Context) events.Stamp {
	s := a.stamp()
	s.Actor = events.ActorFrom(ctx)
	return s
}

// drainPoll is how often a drain on stop checks whether the agent still
// runs game servers.
const drainPoll = 250 * time.Millisecond

// drainOnStop asks for the host's drain and waits, while the agent serves
// on in ctx, until it runs no game server, DrainTimeout passes or
// StopDrain is closed.
func (a *Agent) drainOnStop(ctx context.Context) {
	timeout := cmp.Or(a.opts.DrainTimeout, DefaultDrainTimeout)
	if !a.registered.Load() {
		a.log.Warn("agent stopping before its host was registered: nothing to drain")
		return
	}
	a.log.Info("agent stopping: draining its host first", "game_servers", len(a.snapshot()), "timeout", timeout)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	envs := a.stamp().Envelopes(a.host, []proto.Message{&eventsv1.HostDrainRequested{RequestedBy: a.producer + " (--drain-on-stop)"}})
	_, err := a.opts.Store.Append(actx, events.MustSubject(a.host), events.AnySequence, envs...)
	cancel()
	if err != nil {
		a.log.Error("agent stopping without a drain: the drain request was not stored", "err", err)
		return
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		n := len(a.snapshot())
		if n == 0 {
			a.log.Info("host drained: agent stopping")
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			a.log.Warn("drain on stop timed out: agent stopping with game servers still running", "game_servers", n, "timeout", timeout)
			return
		case <-a.opts.StopDrain:
			a.log.Warn("drain on stop ended early: agent stopping with game servers still running", "game_servers", n)
			return
		case <-ctx.Done():
			return
		}
	}
}

// register announces the host and its capacity.
func (a *Agent) register(ctx context.Context) error {
	envs := a.stamp().Envelopes(a.host, []proto.Message{&eventsv1.HostRegistered{
		Capacity: int32(a.opts.Capacity), Labels: a.opts.Labels, Address: a.opts.Address,
		AgentVersion: a.opts.Version, SdkAddress: a.SDKAddr(), AgentIncarnation: a.incarnation,
		GamePorts: int32(a.opts.PortMax - a.opts.PortMin + 1), HostSubjects: true,
	}})
	if _, err := a.opts.Store.Append(ctx, events.MustSubject(a.host), events.AnySequence, envs...); err != nil {
		return fmt.Errorf("agent: register host: %w", err)
	}
	return nil
}

// publishOutbox publishes events kept while NATS was unreachable, oldest
// first, each with its own id (so a retry is stored once), retrying with
// backoff until they are out; then the servers concerned rebuild their state
// from the stream.
func (a *Agent) publishOutbox(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	states := map[string]*streamState{} // servers' states from the stream, for this drain
	for {
		e, ok, ready := a.outbox.head()
		if !ok {
			clear(states)
			a.rebuildResynced(ctx)
			select {
			case <-ctx.Done():
				return nil
			case <-ready:
				continue
			}
		}
		env, err := events.Unmarshal(e.data)
		if err != nil {
			a.log.Error("outbox entry undecodable; dropped", "subject", e.subject, "err", err)
			if err := a.outbox.pop(); err != nil {
				return err
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		env, expected, applies, err := a.onStream(pctx, e.subject, env, states)
		if err == nil && !applies {
			cancel()
			a.log.Warn("outbox event dropped: its game server moved on in the stream while this host was out of reach",
				"subject", e.subject, "type", env.Type, "event_id", env.ID)
			if err := a.outbox.pop(); err != nil {
				return err
			}
			continue
		}
		var seq uint64
		if err == nil {
			seq, err = a.opts.Store.Append(pctx, e.subject, expected, env)
		}
		cancel()
		if st := states[e.subject]; st != nil {
			if err == nil {
				st.seq = seq
			} else {
				// Judged on a state that has moved on (a conflict), or
				// perhaps stored without an answer: read the stream afresh.
				delete(states, e.subject)
			}
		}
		if errors.Is(err, events.ErrConflict) {
			a.log.Info("outbox event's game server changed in the stream meanwhile; judging it again",
				"subject", e.subject, "type", env.Type, "event_id", env.ID)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.log.Warn("outbox publish failed; retrying", "pending", a.outbox.len(), "err", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if err := a.outbox.pop(); err != nil {
			return err
		}
		if a.outbox.len() == 0 {
			a.log.Info("outbox drained")
		}
	}
}

// streamState is a game server as the stream has it: its state, the
// sequence of its last event, the ids of its events, and its last event if
// that is a process exit (what a termination that follows is decided on).
type streamState struct {
	state *eventsv1.GameServerState
	seq   uint64
	ids   map[string]bool
	exit  *eventsv1.ProcessExited
}

// onStream decides what becomes of an event kept in the outbox, given its
// game server as the stream has it. Kept while the host was out of reach,
// the event was decided on the agent's own state, and meanwhile the
// control plane may have moved the server on:
//   - an event the server's state refuses (HealthDegraded once the
//     control plane ended the server HOST_LOST, GameServerUnhealthy once a
//     shutdown was requested) is dropped, with a warning: appended, it would
//     only be dead-lettered;
//   - a termination after a process exit is decided again on the stream's
//     state: an exit while SHUTTING_DOWN ends the server for the shutdown's
//     reason, not PROCESS_EXITED, even when the agent had not yet heard of
//     the shutdown (a NATS partition hid it);
//   - an event the stream already holds (an append whose answer was lost)
//     is published again as it is, to be de-duplicated.
//
// The server is read as the stream's leader has it (CurrentHistory): a
// replica behind it, cut off in a minority partition, would show a past
// that refuses what the present accepts. An event judged to apply is
// appended only onto the sequence it was judged on (the expected sequence
// returned): a conflict means the server moved on meanwhile, and it is
// judged again.
//
// states caches each server for the drain, advanced by the events
// published. Other aggregates' events are published as they are.
func (a *Agent) onStream(ctx context.Context, subject string, env events.Envelope, states map[string]*streamState) (events.Envelope, uint64, bool, error) {
	if events.KindOf(subject) != events.KindGameServer {
		return env, events.AnySequence, true, nil
	}
	st, ok := states[subject]
	if !ok {
		hist, err := a.opts.Store.CurrentHistory(ctx, subject, 0)
		if err != nil {
			return env, 0, false, err
		}
		st = &streamState{ids: map[string]bool{}}
		for _, h := range hist {
			st.ids[h.ID] = true
			st.seq = h.Sequence
			next, err := events.ApplyGameServer(st.state, h)
			if events.Skipped(err) {
				continue // left out of every fold, as the projector dead-letters it; its sequence counts
			}
			if err != nil {
				return env, events.AnySequence, true, nil // a history the projector judges: not ours to drop events over
			}
			st.state = next
			st.exit, _ = h.Data.(*eventsv1.ProcessExited)
		}
		states[subject] = st
	}
	if st.ids[env.ID] {
		return env, events.AnySequence, true, nil
	}
	if term, ok := env.Data.(*eventsv1.GameServerTerminated); ok && st.exit != nil {
		env = a.redecideTermination(env, term, st)
	}
	next, err := events.ApplyGameServer(st.state, env)
	if _, refused := errors.AsType[*events.TransitionError](err); refused {
		return env, 0, false, nil
	}
	if err != nil {
		delete(states, subject) // not ours to judge: publish it, read the stream afresh next time
		return env, events.AnySequence, true, nil
	}
	expected := st.seq
	st.state = next
	st.ids[env.ID] = true
	st.exit, _ = env.Data.(*eventsv1.ProcessExited)
	return env, expected, true, nil
}

// redecideTermination decides a termination that follows a process exit
// again, on the server's state as the stream has it (events.RecordExit),
// keeping the envelope (its id above all) and the last health ping the agent
// saw.
func (a *Agent) redecideTermination(env events.Envelope, term *eventsv1.GameServerTerminated, st *streamState) events.Envelope {
	cmd := events.RecordExit{Exited: st.exit}
	if t := term.GetEvidence().GetLastHeartbeatTime(); t != nil {
		cmd.LastHeartbeat = t.AsTime()
	}
	msgs, err := events.DecideGameServer(env.Aggregate, st.state, cmd)
	if err != nil || len(msgs) != 2 {
		return env // the stream's state refuses the exit: the caller drops the termination
	}
	again, ok := msgs[1].(*eventsv1.GameServerTerminated)
	if !ok {
		return env
	}
	if again.GetReason() != term.GetReason() {
		a.log.Info("outbox termination decided again on the server's state in the stream",
			"game_server", env.Aggregate, "event_id", env.ID, "was", events.ReasonName(term.GetReason()), "now", events.ReasonName(again.GetReason()))
	}
	env.Data = again
	return env
}

// OutboxLen returns the number of events waiting in the outbox for NATS.
func (a *Agent) OutboxLen() int { return a.outbox.len() }

// snapshot lists the servers the agent supervises now.
func (a *Agent) snapshot() []*gameServer { return a.snapshotInto(nil) }

// snapshotInto lists the servers the agent supervises now into buf's
// storage, for loops that run often.
func (a *Agent) snapshotInto(buf []*gameServer) []*gameServer {
	a.mu.Lock()
	defer a.mu.Unlock()
	buf = buf[:0]
	for _, gs := range a.servers {
		buf = append(buf, gs)
	}
	return buf
}

// natsUp reports whether the NATS connection is up right now; while it is
// not, events go straight to the outbox instead of blocking supervision.
func (a *Agent) natsUp() bool {
	return a.opts.JetStream.Conn().Status() == nats.CONNECTED
}

// rebuildResynced refolds servers whose events went through the outbox.
func (a *Agent) rebuildResynced(ctx context.Context) {
	for _, gs := range a.snapshot() {
		gs.mu.Lock()
		resync := gs.resync
		gs.mu.Unlock()
		if resync {
			if err := gs.rebuild(ctx); err != nil {
				a.log.Warn("rebuild server state", "game_server", gs.name, "err", err)
			}
		}
	}
}

// syncServers re-reads each server's history every SyncInterval, and when
// the host beat resumes after a gap. A server the control plane
// terminated (HOST_LOST while this host was out of sight) or told to stop
// while the stop command was lost is stopped here, so no replaced server
// keeps running beside its replacement.
func (a *Agent) syncServers(ctx context.Context) error {
	t := time.NewTicker(a.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.resumed:
		}
		list := a.snapshot()
		for _, gs := range list {
			gs.refresh(ctx)
			gs.mu.Lock()
			st, stopping := gs.state, gs.stopping
			gs.mu.Unlock()
			switch st.GetLifecycle() {
			case eventsv1.Lifecycle_LIFECYCLE_TERMINATED, eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN:
				if !stopping {
					gs.log.Warn("server ended by the control plane while its process runs; stopping it",
						"state", events.LifecycleName(st.GetLifecycle()), "reason", events.ReasonName(st.GetReason()))
					deadline := a.opts.Clock.Now().Add(10 * time.Second)
					if d := st.GetShutdownDeadline(); d != nil {
						deadline = d.AsTime()
					}
					gs.stop(st.GetReason(), deadline)
				}
			}
		}
	}
}

// freePort reports whether a port can be bound on TCP and UDP right now.
func freePort(host string, port int) bool {
	addr := net.JoinHostPort(host, fmt.Sprint(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
