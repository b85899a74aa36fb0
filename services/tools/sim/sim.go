// Package sim is Tether's fleet simulator (`tether sim`): thousands of
// simulated hosts, each a real host agent whose game server processes are
// simulated in this process, driving the real control plane (embedded NATS
// JetStream, a throwaway PostgreSQL, the projector, the API server and the
// controller, as `tether dev` runs them). Simulated processes speak the SDK
// through the agent's in-process SDK (agent.LocalSDK): the same handlers,
// health contract and events as over gRPC, without a socket per server.
//
// A run has four phases: fleets are created and come up READY; a steady
// phase injects misbehaviour (crashes, hangs, SDK connection resets, short
// host partitions, slow starts) while a matchmaker allocates matches whose
// players join, drop, reconnect and leave; injection stops and the system
// settles; then the run is audited: every event the simulated agents
// published must be in the stream and applied by the projector, and every
// game server that ended must have ended for a fault the simulator caused.
// A run is sped up by shortening periods (health, heartbeats, timeouts),
// never by skipping logic.
//
// The steady phase samples what the run stores (storage.go): the events
// stream, the views' rows, the database and the archive. With a retention
// (Options.Retention) the leading controller archives ended game servers
// and game sessions meanwhile; the audit then finds every event in the
// stream or in the archive (archived.go), and a fifth phase waits until
// the stream and the views hold live aggregates only.
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/archiver"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/platform/connect"
)

// Options configure a simulation. Rates are per second across the whole
// fleet.
type Options struct {
	// Hosts is the number of simulated hosts; default 100.
	Hosts int
	// ServersPerHost is each host's capacity; the fleets fill every slot;
	// default 10.
	ServersPerHost int
	// Fleets splits the servers into this many fleets; default 10.
	Fleets int
	// HealthPeriod is the game servers' heartbeat period (whole seconds);
	// default 2s. FailureThreshold missed periods make one unhealthy;
	// default 3.
	HealthPeriod     time.Duration
	FailureThreshold int
	// HeartbeatInterval is how often a simulated process heartbeats (the
	// SDK's StartHeartbeat cadence); default HealthPeriod/2, so a beat late
	// by less than half a period is not a missed one.
	HeartbeatInterval time.Duration
	// SDKGrace is how long a server may stay disconnected from the SDK;
	// default 10s.
	SDKGrace time.Duration
	// HostHeartbeat is the agents' host heartbeat interval; default 2s.
	HostHeartbeat time.Duration
	// UnreachableAfter and LostAfter are the controller's host verdicts;
	// defaults 10s and 60s.
	UnreachableAfter, LostAfter time.Duration
	// ShutdownGrace is the controller's stop deadline; default 5s.
	ShutdownGrace time.Duration
	// StartDelay is a simulated process's start-up time before Ready;
	// default 200ms (jittered ±50%).
	StartDelay time.Duration
	// SlowStartFraction of starts take SlowStart instead; defaults 0.05 and 3s.
	SlowStartFraction float64
	SlowStart         time.Duration
	// CrashRate, HangRate and FlapRate are faults per second, each on a
	// random READY or ALLOCATED server; defaults 1, 0.5 and 2.
	CrashRate, HangRate, FlapRate float64
	// FlapPause bounds how long a reset SDK connection stays down; it must
	// stay under SDKGrace; default SDKGrace/3.
	FlapPause time.Duration
	// PartitionRate is host partitions per second: the host's heartbeat
	// pauses for PartitionLength, shorter than LostAfter, so nothing may
	// be terminated; defaults 0.1 and UnreachableAfter+2s.
	PartitionRate   float64
	PartitionLength time.Duration
	// AllocationRate is matches per second; default 10.
	AllocationRate float64
	// PlayersPerMatch is seats reserved per match; default 4.
	PlayersPerMatch int
	// DropFraction of players drop once and reconnect; default 0.25.
	DropFraction float64
	// MatchLength is how long a match lasts before its players leave and
	// its server shuts itself down; default 15s.
	MatchLength time.Duration
	// Demand, when it has points, runs the simulation in demand mode
	// (demand.go): one autoscaled fleet instead of fleets filling every
	// slot, a matchmaker allocating at the curve's rate instead of
	// AllocationRate, a rolling update at RolloutAt, and a capacity report
	// (Report.Demand).
	Demand Curve
	// Buffer is the demand-mode fleet's autoscaling buffer: a count ("3")
	// or a percentage of the allocated servers ("20%"); default "3".
	Buffer string
	// MinReplicas and MaxReplicas bound the demand-mode fleet; MaxReplicas
	// defaults to every slot (Hosts × ServersPerHost).
	MinReplicas, MaxReplicas int
	// RolloutAt is when, into the steady phase, demand mode changes the
	// fleet's template (a rolling update under load); default two thirds
	// of Duration; negative: no rollout.
	RolloutAt time.Duration
	// Retention, when positive, turns archiving on (services/archiver, as
	// `tether controller --retention` runs it in the leading controller):
	// game servers and game sessions that ended more than Retention ago
	// leave the stream and the views for archive segments in ArchiveDir
	// (default DataDir/archive), a pass every ArchiveInterval (default
	// archiver.DefaultInterval). The audit then counts the archive's
	// events with the stream's, and a last phase waits until the stream
	// and the views hold nothing but live aggregates (Report.Retention).
	// Not with Demand (its figures are read from the stream afterwards).
	Retention       time.Duration
	ArchiveDir      string
	ArchiveInterval time.Duration
	// StorageEvery is how often, during the steady phase, the storage is
	// sampled (Report.Storage): the events stream, the views' rows, the
	// database's and the archive's sizes; default 1m.
	StorageEvery time.Duration
	// HostStartSpread spreads the hosts' agent starts over this long, as
	// hosts come up over time; default 2 ms per host.
	HostStartSpread time.Duration
	// ReadyTimeout bounds the wait for every server to be READY; default 15m.
	ReadyTimeout time.Duration
	// Duration is the steady phase; default 60s, or in demand mode the
	// time of the curve's last point.
	Duration time.Duration
	// SettleTimeout bounds the settle phase; default 5m.
	SettleTimeout time.Duration
	// Role splits the simulation over two processes (split.go):
	// RoleControlPlane serves the control plane alone until the context
	// ends; RoleHosts runs the simulated hosts and the run against the
	// control plane whose data directory is ControlPlaneDir. Empty: both
	// in this process.
	Role            string
	ControlPlaneDir string
	// CPUProfile, if set, gets the CPU profile of the steady phase (the one
	// Report.CPU is read from), in pprof's format.
	CPUProfile io.Writer
	// TraceAllocations traces the API's allocations (only those: the
	// stack's other work is not sampled) and prints, after the steady
	// phase, where their server time went (allocload.Breakdowns), from
	// the process that runs the control plane.
	TraceAllocations bool
	// OnReport, if set, gets the report as soon as the audit is done,
	// before the control plane and its thousands of agents are stopped
	// (which takes a while at scale).
	OnReport func(*Report)
	// DataDir holds the run's NATS store and logs; default a new temporary
	// directory, removed afterwards.
	DataDir string
	// Logger gets the components' logs; default discards.
	Logger *slog.Logger
	// Progress gets one line per phase and a status line every
	// ProgressEvery (default 10s); default discards.
	Progress      io.Writer
	ProgressEvery time.Duration
}

func (o *Options) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.Hosts <= 0 {
		o.Hosts = 100
	}
	if o.ServersPerHost <= 0 {
		o.ServersPerHost = 10
	}
	if o.Fleets <= 0 {
		o.Fleets = 10
	}
	o.Fleets = min(o.Fleets, o.Hosts*o.ServersPerHost)
	def(&o.HealthPeriod, 2*time.Second)
	o.HealthPeriod = max(o.HealthPeriod.Round(time.Second), time.Second)
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = 3
	}
	def(&o.HeartbeatInterval, o.HealthPeriod/2)
	def(&o.SDKGrace, 10*time.Second)
	o.SDKGrace = max(o.SDKGrace.Round(time.Second), time.Second)
	def(&o.HostHeartbeat, 2*time.Second)
	def(&o.UnreachableAfter, 10*time.Second)
	def(&o.LostAfter, 60*time.Second)
	def(&o.ShutdownGrace, 5*time.Second)
	def(&o.StartDelay, 200*time.Millisecond)
	def(&o.SlowStart, 3*time.Second)
	def(&o.FlapPause, o.SDKGrace/3)
	def(&o.PartitionLength, o.UnreachableAfter+2*time.Second)
	if o.PlayersPerMatch <= 0 {
		o.PlayersPerMatch = 4
	}
	def(&o.MatchLength, 15*time.Second)
	def(&o.HostStartSpread, time.Duration(o.Hosts)*2*time.Millisecond)
	def(&o.ReadyTimeout, 15*time.Minute)
	if o.Demand.Set() {
		o.setDemandDefaults()
	}
	def(&o.Duration, 60*time.Second)
	def(&o.SettleTimeout, 5*time.Minute)
	def(&o.ProgressEvery, 10*time.Second)
	def(&o.StorageEvery, time.Minute)
	if o.Retention > 0 {
		def(&o.ArchiveInterval, archiver.DefaultInterval)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Defaults returns the options a zero Options runs with, with the default
// rates: the defaults of the `tether sim` flags.
func Defaults() Options {
	var o Options
	o.setDefaults()
	o.DefaultRates()
	return o
}

// DefaultRates fills in the default misbehaviour and load rates; zero rates
// in Options mean "none", so a caller that wants the defaults asks for them.
func (o *Options) DefaultRates() {
	o.CrashRate, o.HangRate, o.FlapRate = 1, 0.5, 2
	o.PartitionRate, o.SlowStartFraction = 0.1, 0.05
	o.AllocationRate, o.DropFraction = 10, 0.25
}

func (o *Options) validate() error {
	switch {
	case o.HeartbeatInterval >= o.HealthPeriod:
		return fmt.Errorf("sim: heartbeat interval %s must be shorter than the health period %s (a process beating once a period misses one at every delay)", o.HeartbeatInterval, o.HealthPeriod)
	case o.FlapPause >= o.SDKGrace:
		return fmt.Errorf("sim: flap pause %s must be shorter than the SDK grace %s", o.FlapPause, o.SDKGrace)
	case o.PartitionLength >= o.LostAfter:
		return fmt.Errorf("sim: partition length %s must be shorter than LostAfter %s (a longer one loses the host and replaces its servers)", o.PartitionLength, o.LostAfter)
	case o.Hosts > 250*250:
		return fmt.Errorf("sim: at most %d hosts (one loopback address each)", 250*250)
	case o.CrashRate < 0 || o.HangRate < 0 || o.FlapRate < 0 || o.PartitionRate < 0 || o.AllocationRate < 0:
		return errors.New("sim: rates must not be negative")
	case o.SlowStartFraction < 0 || o.SlowStartFraction > 1 || o.DropFraction < 0 || o.DropFraction > 1:
		return errors.New("sim: fractions must be within 0 and 1")
	case o.Retention < 0:
		return fmt.Errorf("sim: negative retention %s", o.Retention)
	case o.Role != "" && o.Role != RoleControlPlane && o.Role != RoleHosts:
		return fmt.Errorf("sim: role %q is neither %q nor %q", o.Role, RoleControlPlane, RoleHosts)
	case o.Role == RoleHosts && o.ControlPlaneDir == "":
		return errors.New("sim: the hosts role needs the control plane's data directory")
	case o.Role != "" && o.Retention > 0:
		return errors.New("sim: retention runs in one process only (the archiver is the controller's)")
	case o.Retention > 0 && o.Demand.Set():
		return errors.New("sim: retention and demand mode do not go together: demand mode reads its figures from the stream after the run, and archiving takes them out of it")
	}
	if o.Demand.Set() {
		return o.validateDemand()
	}
	return nil
}

// world is one simulation's shared state.
type world struct {
	opts       Options
	log        *slog.Logger
	ctx        context.Context // ends when the simulation stops
	stack      *dev.Stack
	conn       *grpc.ClientConn
	hosts      []*host
	procs      sync.Map // game server name → *process
	pids       atomic.Int64
	count      counters
	faults     *ledger
	meter      *sdkmetric.ManualReader
	spans      *allocationTrace // Options.TraceAllocations; nil otherwise
	paused     []atomic.Bool    // host i's heartbeat is paused (a partition)
	partitions sync.WaitGroup   // partitions in progress
	stackDone  chan struct{}    // closed when the control plane has stopped
	stackErr   error            // why, once stackDone is closed
	mm         *matchmaker
	demand     *demand // demand mode's state; nil otherwise
	connsMu    sync.Mutex
	conns      map[int]*natsConn // the simulated hosts' NATS connections
	// controlPlanePID is the control plane's process when it runs apart
	// (RoleHosts); 0 when it is this one.
	controlPlanePID int
}

// Run runs a simulation and returns its report. An error means the run
// could not be carried out; a run that found lost events or false
// terminations returns its report with Report.Failures filled in.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.DataDir == "" {
		dir, err := os.MkdirTemp("", "tether-sim-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		opts.DataDir = dir
	}
	if opts.Retention > 0 && opts.ArchiveDir == "" {
		opts.ArchiveDir = filepath.Join(opts.DataDir, "archive")
	}
	w := &world{opts: opts, log: opts.Logger, faults: newLedger(), meter: sdkmetric.NewManualReader(), conns: map[int]*natsConn{}}
	defer w.closeConns()
	w.paused = make([]atomic.Bool, opts.Hosts)
	if opts.Demand.Set() {
		w.demand = &demand{}
	}
	for i := range opts.Hosts {
		w.hosts = append(w.hosts, &host{w: w, id: hostID(i)})
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(w.meter), servedView())
	if opts.TraceAllocations && opts.Role != RoleHosts {
		w.spans = newAllocationTrace()
		defer w.spans.shutdown()
	}
	w.mm = newMatchmaker(w)
	defer func() { _ = mp.Shutdown(context.Background()) }() // only a manual reader to release

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	w.ctx = runCtx
	w.stackDone = make(chan struct{})
	switch opts.Role {
	case RoleControlPlane:
		return nil, w.serveControlPlane(runCtx, mp)
	case RoleHosts:
		fmt.Fprintf(opts.Progress, "starting %d simulated hosts against the control plane of %s\n", opts.Hosts, opts.ControlPlaneDir)
		stack, err := w.joinControlPlane(runCtx)
		if err != nil {
			return nil, err
		}
		w.stack = stack
	default:
		if err := w.startStack(runCtx, mp); err != nil {
			return nil, err
		}
	}
	for i, a := range w.stack.Agents {
		w.hosts[i].sdk = a.LocalSDK()
	}
	conn, err := grpc.NewClient(w.stack.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	w.conn = conn

	var rep *Report
	var runErr error
	pprof.Do(runCtx, pprof.Labels(dev.ComponentLabel, componentSimulator), func(ctx context.Context) { rep, runErr = w.run(ctx) })
	if runErr == nil && opts.OnReport != nil {
		opts.OnReport(rep)
	}
	fmt.Fprintln(opts.Progress, "stopping the control plane and the simulated hosts")
	stopping := time.Now()
	stop()
	defer func() { fmt.Fprintf(opts.Progress, "stopped in %.1f s\n", time.Since(stopping).Seconds()) }()
	<-w.stackDone
	if err := w.stackErr; err != nil && runErr == nil && !errors.Is(err, context.Canceled) {
		runErr = fmt.Errorf("sim: control plane: %w", err)
	}
	return rep, runErr
}

// startStack starts the control plane and the simulated hosts in this
// process, as `tether dev` does.
func (w *world) startStack(runCtx context.Context, mp *sdkmetric.MeterProvider) error {
	opts := w.opts
	started := make(chan *dev.Stack, 1)
	fmt.Fprintf(opts.Progress, "starting the control plane and %d simulated hosts\n", opts.Hosts)
	go func() {
		defer close(w.stackDone)
		pprof.SetGoroutineLabels(context.Background()) // dev labels its components itself
		w.stackErr = dev.Run(runCtx, dev.Options{
			DataDir: opts.DataDir, Fresh: true, GRPCPort: -1, RESTPort: -1, NATSPort: -1, SDKPort: -1,
			Hosts: opts.Hosts, HostCapacity: opts.ServersPerHost, Logger: opts.Logger, MeterProvider: mp, TracerProvider: w.spans.provider(),
			AgentOptions: w.agentOptions, AgentStartSpread: opts.HostStartSpread,
			ControllerOptions: w.controllerOptions,
			ArchiveDir:        w.archiveDir(), Retention: opts.Retention, ArchiveInterval: opts.ArchiveInterval,
			Started: func(s *dev.Stack) { started <- s },
		})
	}()
	select {
	case w.stack = <-started:
		return nil
	case <-w.stackDone:
		return fmt.Errorf("sim: the control plane did not start: %w", w.stackErr)
	}
}

// hostID names host i (0-based) as `tether dev` does.
func hostID(i int) string { return fmt.Sprintf("h%d", i+1) }

// hostAddress gives host i a loopback address of its own (127.1.0.1,
// 127.1.0.2, …), so each has its own port range, as separate machines do.
func hostAddress(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1) }

// hostsPerConn is how many simulated hosts share one NATS connection. Real
// agents each have their own; one connection for ten thousand agents (their
// command subscriptions, appends and heartbeats) is more than one socket
// and one client's reader keep up with.
const hostsPerConn = 100

// natsConn is one NATS connection of the simulated hosts, with the event
// store and command bus bound to it.
type natsConn struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store *natsjs.Store
	bus   *commands.Bus
}

// connFor returns the NATS connection of host i, making it on first use.
func (w *world) connFor(i int, url string) (*natsConn, error) {
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	k := i / hostsPerConn
	if c := w.conns[k]; c != nil {
		return c, nil
	}
	var nc *nats.Conn
	var js jetstream.JetStream
	var err error
	// The connection's goroutines (reader, flusher) work for the hosts.
	pprof.Do(w.ctx, pprof.Labels(dev.ComponentLabel, dev.ComponentAgent), func(context.Context) {
		nc, js, err = connect.NATS(url, connect.NATSOptions{Name: fmt.Sprintf("tether-sim-hosts-%d", k), Logger: w.log})
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
	defer cancel()
	store, err := natsjs.New(ctx, js, natsjs.Options{Logger: w.log})
	if err != nil {
		nc.Close()
		return nil, err
	}
	bus, err := commands.New(ctx, js)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &natsConn{nc: nc, js: js, store: store, bus: bus}
	w.conns[k] = c
	return c, nil
}

// closeConns closes the simulated hosts' NATS connections.
func (w *world) closeConns() {
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	for k, c := range w.conns {
		c.nc.Close()
		delete(w.conns, k)
	}
}

// agentOptions turns dev's agent for host i into a simulated host.
func (w *world) agentOptions(i int, o *agent.Options) error {
	c, err := w.connFor(i, o.JetStream.Conn().ConnectedUrl())
	if err != nil {
		return err
	}
	o.JetStream, o.Commands = c.js, c.bus
	h := w.hosts[i]
	o.Processes = h
	o.AllowedCommands, o.AllowAnyCommand = nil, true // a simulated process runs no command
	o.LocalSDKOnly = true
	o.KillProcessesOnExit = false // a stopping simulation records no exits
	o.Address = hostAddress(i)
	o.PortMin, o.PortMax = 7000, 7000+4*w.opts.ServersPerHost
	o.LogDir = filepath.Join(w.opts.DataDir, "hosts", h.id)
	o.HeartbeatInterval = w.opts.HostHeartbeat
	o.HealthEvalInterval = time.Second // within the detection bound's 1 s
	o.Store = countingStore{inner: c.store, n: &w.count.published}
	o.SkipHeartbeat = w.paused[i].Load
	o.Labels = map[string]string{"zone": fmt.Sprintf("zone-%c", 'a'+rune(i%3))}
	return nil
}

// controllerOptions applies the simulation's periods to the controller.
func (w *world) controllerOptions(o *controller.Options) {
	o.UnreachableAfter, o.LostAfter, o.ShutdownGrace = w.opts.UnreachableAfter, w.opts.LostAfter, w.opts.ShutdownGrace
}

// countingStore counts the events an agent appended to the stream.
type countingStore struct {
	inner interface {
		Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error)
		History(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)
		CurrentHistory(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)
	}
	n *atomic.Int64
}

// Append appends and counts what was stored: every event, or the first
// ones of an append that failed part way (events.PartialAppendError),
// which the agent then re-sends without them.
func (c countingStore) Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	seq, err := c.inner.Append(ctx, subject, expected, evs...)
	var partial *events.PartialAppendError
	switch {
	case err == nil:
		c.n.Add(int64(len(evs)))
	case errors.As(err, &partial):
		c.n.Add(int64(partial.Stored))
	}
	return seq, err
}

// History reads.
func (c countingStore) History(ctx context.Context, subject string, from uint64) ([]events.Envelope, error) {
	return c.inner.History(ctx, subject, from)
}

// CurrentHistory reads as the stream's leader has it.
func (c countingStore) CurrentHistory(ctx context.Context, subject string, from uint64) ([]events.Envelope, error) {
	return c.inner.CurrentHistory(ctx, subject, from)
}
