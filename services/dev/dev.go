// Package dev runs the whole of Tether in one process on one machine, for
// `tether dev`, the demo and end-to-end tests: an embedded JetStream
// nats-server, a throwaway PostgreSQL (unless a database URL is given), the
// projector, the API server, the controller and N host agents, each a
// simulated host on loopback.
package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/compose"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev/devkeys"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/dev/pgtemp"
	"github.com/tetherhq/tether/services/nats/lease"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/connect"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/platform/oidcauth"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/projector"
)

// Default ports of `tether dev`; each falls back to a free port if taken.
const (
	DefaultGRPCPort = 7070
	DefaultRESTPort = 7080
	DefaultNATSPort = 7422
	DefaultSDKPort  = 7200
	// DefaultGamePortBase starts the game port ranges (Options.GamePortBase).
	DefaultGamePortBase = agent.DefaultPortMin
	// DefaultHosts is how many host agents run (Options.Hosts).
	DefaultHosts = 1
)

// gamePortBlock is the number of ports each host claims for its game
// servers: all but the last, which the stack holds as its claim.
const gamePortBlock = 100

// Options configure a dev stack.
type Options struct {
	// DataDir keeps the NATS store between runs; default
	// $XDG_CACHE_HOME/tether/dev (usually ~/.cache/tether/dev).
	DataDir string
	// Fresh empties DataDir first.
	Fresh bool
	// Host is the loopback address everything binds to; default 127.0.0.1.
	Host string
	// GRPCPort, RESTPort and NATSPort default to the constants above; -1
	// picks a free port.
	GRPCPort, RESTPort, NATSPort int
	// DatabaseURL uses an existing PostgreSQL instead of a throwaway one.
	DatabaseURL string
	// NATSURL uses an existing JetStream-enabled NATS server instead of an
	// embedded one.
	NATSURL string
	// Hosts is the number of simulated hosts, each an agent on loopback; default 1.
	Hosts int
	// NoAgents runs the control plane alone, for hosts that run elsewhere
	// (`tether sim --role control-plane`): Hosts is then ignored.
	NoAgents bool
	// HostCapacity is each host's game server slots; default
	// agent.DefaultCapacity.
	HostCapacity int
	// SDKPort is the first host's SDK gRPC port; host i uses SDKPort+2i
	// (gRPC) and SDKPort+2i+1 (REST); default 7200; -1 picks free ports.
	SDKPort int
	// GamePortBase starts the game port ranges: host i claims the block of
	// 100 ports from GamePortBase+100i and gives its game servers all but
	// the last, which the stack listens on (TCP) for as long as it runs, as
	// its claim. A block whose last port is taken (another stack's claim,
	// or another program's) is skipped for the next free one, with a
	// message, so that two stacks on a machine do not share game ports.
	// Default DefaultGamePortBase; -1 takes the first free blocks from there
	// without a message. A host whose AgentOptions sets a port range keeps
	// it and claims nothing.
	GamePortBase int
	// LogDir holds the game servers' log files; default DataDir/logs.
	LogDir string
	// AllowedCommands are the directories the hosts' game server commands
	// must be in, or the programs they may run
	// (agent.Options.AllowedCommands); default DefaultAllowedCommands, the
	// example game server (without one, DataDir/games, empty at first).
	// Anything else a template names (/bin/sh, an operator's script) ends
	// its server with PROCESS_START_FAILED.
	AllowedCommands []string
	// AllowAnyCommand lets the hosts' game servers run any command
	// (agent.Options.AllowAnyCommand) when AllowedCommands names no
	// directory, instead of the default ones.
	AllowAnyCommand bool
	// Logger; default discards.
	Logger *slog.Logger
	// TracerProvider is passed to every component.
	TracerProvider trace.TracerProvider
	// MeterProvider is passed to every component (the agents' meters carry
	// their host, metrics.go).
	MeterProvider metric.MeterProvider
	// MetricsHandler is served at /metrics on the REST address.
	MetricsHandler http.Handler
	// OIDC, when its Issuer is set, has the API accept the identity
	// provider's OpenID Connect tokens as well as API keys (oidcauth), as
	// `tether apiserver --oidc-issuer` does.
	OIDC oidcauth.Options
	// Auth turns API authentication on: Run makes one API key per role in
	// KeysDir(DataDir) (Addresses.AdminKey is the admin's), and every API
	// call must carry one. `tether dev` turns it on.
	Auth bool
	// PlayerTokenKeys signs and checks player-session tokens (playertoken.Parse
	// format); default a fresh random key per run.
	PlayerTokenKeys string
	// DemoGameServer, when set, is the example game server binary: a demo
	// fleet of 3 is created from it once everything serves.
	DemoGameServer string
	// Ready, if set, is called once everything serves.
	Ready func(Addresses)
	// Started, if set, is called once everything serves, with the running
	// components (the fleet simulator drives and measures them).
	Started func(*Stack)
	// AgentOptions, if set, adjusts host i's agent options (0-based) before
	// the agent is built: the fleet simulator gives simulated processes.
	// Its JetStream is set; a Store or Commands it sets are used instead
	// of the ones compose would open.
	AgentOptions func(i int, o *agent.Options) error
	// AgentStartSpread spreads the agents' starts evenly over this long
	// instead of starting them at once (thousands of simulated hosts); 0
	// starts them together.
	AgentStartSpread time.Duration
	// LeaseTTL is the lease bucket's TTL (migrate.Options.LeaseTTL); default
	// lease.DefaultTTL.
	LeaseTTL time.Duration
	// ArchiveDir, when set, has the leading controller archive the
	// histories of ended aggregates into segments at that location (a
	// directory or an s3:// bucket: archive.OpenStore), once
	// Retention has passed (services/archiver), and the API read them
	// back (history, explain, state at a time, exports, `tetherctl
	// archive`); off when empty.
	ArchiveDir string
	// ArchiveInDataDir, when ArchiveDir is empty, archives into
	// DataDir/archive (ArchiveDir); `tether dev` does, so that its tour's
	// archive commands have an archive to read.
	ArchiveInDataDir bool
	// Retention is how long ended aggregates stay in the stream and the
	// views before they are archived; default archiver.DefaultRetention
	// (`tether dev`'s is DefaultRetention).
	Retention time.Duration
	// ArchiveInterval is the time between archiving passes; default
	// archiver.DefaultInterval.
	ArchiveInterval time.Duration
	// ControllerOptions, if set, adjusts the controller's options.
	ControllerOptions func(o *controller.Options)
}

// Stack is a running dev stack's components, for code that drives them in
// the same process (the fleet simulator). Everything in it is stopped when
// Run returns.
type Stack struct {
	Addresses
	// Store is the event store.
	Store *natsjs.Store
	// JetStream is the stack's JetStream context.
	JetStream jetstream.JetStream
	// Pool is the projection database's pool.
	Pool *pgxpool.Pool
	// Agents are the host agents, host i+1 at index i.
	Agents []*agent.Agent
}

// Addresses tells a user where the stack listens.
type Addresses struct {
	// REST is the REST gateway's base URL.
	REST string
	// GRPC is the gRPC address.
	GRPC string
	// NATS is the NATS client URL.
	NATS string
	// Database is the PostgreSQL URL.
	Database string
	// DataDir holds the NATS store.
	DataDir string
	// SDK lists each host's local SDK gRPC address.
	SDK []string
	// KeysDir holds one API key per role, <role>.key, when the stack
	// authenticates API calls (Options.Auth); empty otherwise.
	KeysDir string
	// AdminKey is the admin role's API key (Options.Auth); empty otherwise.
	AdminKey string
	// NATSCreds is the admin's NATS credentials file when the embedded
	// NATS server authenticates (Options.Auth); empty otherwise.
	NATSCreds string
	// AllowedCommands are the directories the hosts' game servers may run
	// commands from, or the programs they may run
	// (Options.AllowedCommands); empty: any command
	// (Options.AllowAnyCommand).
	AllowedCommands []string
}

func (o *Options) setDefaults() error {
	if o.DataDir == "" {
		dir, err := devkeys.DefaultDataDir()
		if err != nil {
			return fmt.Errorf("dev: no data dir given and no user cache dir: %w", err)
		}
		o.DataDir = dir
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.GRPCPort == 0 {
		o.GRPCPort = DefaultGRPCPort
	}
	if o.RESTPort == 0 {
		o.RESTPort = DefaultRESTPort
	}
	if o.NATSPort == 0 {
		o.NATSPort = DefaultNATSPort
	}
	if o.Hosts <= 0 {
		o.Hosts = DefaultHosts
	}
	if o.HostCapacity <= 0 {
		o.HostCapacity = agent.DefaultCapacity
	}
	if o.SDKPort == 0 {
		o.SDKPort = DefaultSDKPort
	}
	if o.GamePortBase == 0 {
		o.GamePortBase = DefaultGamePortBase
	}
	if o.GamePortBase > 65536-gamePortBlock {
		return fmt.Errorf("dev: game port base %d leaves no block of %d ports", o.GamePortBase, gamePortBlock)
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(o.DataDir, "logs")
	}
	if o.ArchiveDir == "" && o.ArchiveInDataDir {
		o.ArchiveDir = ArchiveDir(o.DataDir)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// setAllowedCommands gives AllowedCommands their default, once DataDir
// exists: DefaultAllowedCommands, or without an example game server to
// allow, the stack's own empty directory of games (DataDir/games), so
// that the stack runs and refuses every command until one is built there.
func (o *Options) setAllowedCommands() error {
	if len(o.AllowedCommands) > 0 || o.AllowAnyCommand {
		return nil
	}
	if o.AllowedCommands = DefaultAllowedCommands(); len(o.AllowedCommands) > 0 {
		return nil
	}
	games := filepath.Join(o.DataDir, "games")
	if err := os.MkdirAll(games, 0o755); err != nil {
		return fmt.Errorf("dev: a directory for game servers: %w", err)
	}
	o.Logger.Warn("no example game server to run (make build puts it in bin/): game servers may run only what is put in the stack's directory of games, or give --allowed-commands",
		"example", filepath.Join("bin", ExampleGameServer), "dir", games)
	o.AllowedCommands = []string{games}
	return nil
}

// Run starts the stack and serves until ctx ends; then everything it
// started is stopped.
func Run(ctx context.Context, opts Options) error {
	if err := opts.setDefaults(); err != nil {
		return err
	}
	log := opts.Logger
	if opts.Fresh {
		if err := os.RemoveAll(opts.DataDir); err != nil {
			return fmt.Errorf("dev: empty %s: %w", opts.DataDir, err)
		}
	}
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return fmt.Errorf("dev: create %s: %w", opts.DataDir, err)
	}
	if err := opts.setAllowedCommands(); err != nil {
		return err
	}

	natsURL := opts.NATSURL
	ids := &natsIdentities{log: log}
	defer ids.close()
	if natsURL == "" {
		var authConfig string
		if opts.Auth {
			// Each component and host its own NATS user, as in production.
			ids.dir = NATSAuthDir(opts.DataDir)
			hosts := make([]string, opts.Hosts)
			for i := range hosts {
				hosts[i] = hostID(i)
			}
			if err := natsauth.Init(ids.dir, hosts); err != nil {
				return err
			}
			authConfig = filepath.Join(ids.dir, natsauth.ServerConf)
			signers, err := natsauth.LoadSigners(filepath.Join(ids.dir, natsauth.SignersFile), log)
			if err != nil {
				return err
			}
			ids.verify = natsjs.NewVerifier(signers)
		}
		var ns *natsembed.Server
		var err error
		// Labelled, so that the server's goroutines (which inherit the
		// label) show as the NATS server in a profile.
		pprof.Do(ctx, pprof.Labels(ComponentLabel, ComponentNATS), func(context.Context) {
			ns, err = natsembed.Start(natsembed.Options{
				Host: opts.Host, Port: portOrFree(log, "NATS", opts.Host, opts.NATSPort),
				StoreDir: filepath.Join(opts.DataDir, "nats"), Logger: log.With("component", "nats"),
				AuthConfig: authConfig,
			})
		})
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		natsURL = ns.ClientURL()
	}

	dbURL := opts.DatabaseURL
	if dbURL == "" {
		pg, err := pgtemp.Start(ctx, pgtemp.Options{Password: true, Logger: log.With("component", "postgres")})
		if err != nil {
			return fmt.Errorf("dev: start PostgreSQL (or set DATABASE_URL to use your own): %w", err)
		}
		defer func() {
			if err := pg.Stop(); err != nil {
				log.Error("stop PostgreSQL", "err", err)
			}
		}()
		if err := pg.CreateDatabase(ctx, "tether", ""); err != nil {
			return err
		}
		dbURL = pg.URL("tether")
		// The URL carries the password: a file only its owner reads, for
		// psql, instead of the banner.
		if err := os.WriteFile(DatabaseURLFile(opts.DataDir), []byte(dbURL+"\n"), 0o600); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
	}

	var adminAuth []nats.Option
	if ids.dir != "" {
		admin, err := natsauth.LoadCredentials(natsauth.CredsPath(ids.dir, natsauth.Admin), log)
		if err != nil {
			return err
		}
		adminAuth = admin.NATSOptions()
	}
	nc, js, err := connect.NATS(natsURL, connect.NATSOptions{Name: "tether-dev", Logger: log, Auth: adminAuth})
	if err != nil {
		return err
	}
	defer nc.Close()
	ids.url, ids.sharedJ = natsURL, js
	if opts.NATSURL == "" {
		if err := dropEarlierLease(ctx, js, log); err != nil {
			return err
		}
	}
	// What `tether migrate` does, for the user.
	if err := migrate.NATS(ctx, js, migrate.Options{LeaseTTL: opts.LeaseTTL, Logger: log}); err != nil {
		return err
	}
	if err := migrate.Postgres(ctx, dbURL, log); err != nil {
		return err
	}
	// The stack's own store, for Started's callers: the admin's.
	store, err := natsjs.New(ctx, js, natsjs.Options{Logger: log, Verifier: ids.verify})
	if err != nil {
		return err
	}
	pool, err := connect.Postgres(ctx, dbURL, 20)
	if err != nil {
		return err
	}
	defer pool.Close()
	// What every component is built on; ids.env adds the connection and
	// signer of the principal each runs as. Each component logs with its
	// name; what compose builds for it (its store, the views' freshness,
	// the archiver) logs with the stack's logger.
	base := compose.Env{Logger: log, Pool: pool, Verifier: ids.verify,
		TracerProvider: opts.TracerProvider, MeterProvider: opts.MeterProvider, MetricsHandler: opts.MetricsHandler}
	projEnv, err := ids.env(natsauth.Projector, base)
	if err != nil {
		return err
	}
	projector, err := compose.Projector(ctx, projEnv, compose.ProjectorOptions{Alone: true,
		Service: projector.Options{Projector: postgres.ProjectorOptions{Logger: log.With("component", "projector")}}})
	if err != nil {
		return err
	}
	if opts.PlayerTokenKeys == "" {
		opts.PlayerTokenKeys = playertoken.NewKeySpec("dev")
	}
	tokens, err := playertoken.Parse(opts.PlayerTokenKeys)
	if err != nil {
		return err
	}
	var keys *apikeys.Keys
	var adminKey string
	if opts.Auth {
		if keys, adminKey, err = writeKeys(opts.DataDir); err != nil {
			return err
		}
	}
	// The archive: the controller's archiver writes it, the API reads it.
	var segments archive.SegmentStore // nil: archiving off
	if opts.ArchiveDir != "" {
		if segments, err = archive.OpenStore(ctx, opts.ArchiveDir); err != nil {
			return err
		}
	}
	api, err := startAPI(ctx, log, ids, base, opts, apiserver.Options{Tokens: tokens, Keys: keys, Archive: segments,
		Logger: log.With("component", "apiserver")})
	if err != nil {
		return err
	}
	ctlEnv, err := ids.env(natsauth.Controller, base)
	if err != nil {
		return err
	}
	ctl, err := compose.Controller(ctx, ctlEnv, compose.ControllerOptions{
		Controller: controller.Options{Logger: log.With("component", "controller")},
		Archive:    segments, Retention: opts.Retention, ArchiveInterval: opts.ArchiveInterval, Configure: opts.ControllerOptions,
	})
	if err != nil {
		return err
	}
	gamePorts := newGamePorts(log, opts.Host, opts.GamePortBase)
	defer gamePorts.release()
	addrs := Addresses{REST: "http://" + api.HTTPAddr(), GRPC: api.GRPCAddr(), NATS: natsURL, Database: dbURL, DataDir: opts.DataDir, AdminKey: adminKey,
		AllowedCommands: opts.AllowedCommands}
	if opts.Auth {
		addrs.KeysDir = KeysDir(opts.DataDir)
	}
	if ids.dir != "" {
		addrs.NATSCreds = natsauth.CredsPath(ids.dir, natsauth.Admin)
	}
	hosts := opts.Hosts
	if opts.NoAgents {
		hosts = 0
	}
	var agents []*agent.Agent
	for i := range hosts {
		a, err := buildAgent(ctx, i, ids, base, opts, tokens, gamePorts)
		if err != nil {
			return err
		}
		agents = append(agents, a)
		addrs.SDK = append(addrs.SDK, a.SDKAddr())
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return runAs(ctx, ComponentProjector, projector.Run) })
	g.Go(func() error { return runAs(ctx, ComponentAPI, api.Run) })
	g.Go(func() error { return runAs(ctx, ComponentController, ctl.Run) })
	for i, a := range agents {
		g.Go(func() error {
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels(ComponentLabel, ComponentAgent)))
			if d := opts.AgentStartSpread * time.Duration(i) / time.Duration(len(agents)); d > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(d):
				}
			}
			return a.Run(ctx)
		})
	}
	if opts.DemoGameServer != "" {
		if err := createDemoFleet(ctx, addrs.REST, adminKey, opts.DemoGameServer); err != nil {
			log.Error("demo fleet not created", "err", err)
		}
	}
	// For tetherctl on this machine: the API's addresses, which may not
	// be the default ports.
	if err := devkeys.WriteAddresses(opts.DataDir, devkeys.Addresses{GRPC: addrs.GRPC, REST: addrs.REST}); err != nil {
		return err
	}
	defer func() {
		if err := devkeys.RemoveAddresses(opts.DataDir); err != nil {
			log.Warn("addresses left in the data dir", "err", err)
		}
	}()
	if opts.Ready != nil {
		opts.Ready(addrs)
	}
	if opts.Started != nil {
		opts.Started(&Stack{Addresses: addrs, Store: store, JetStream: js, Pool: pool, Agents: agents})
	}
	return g.Wait()
}

// startAPI builds the API server (compose.API) on the stack's gRPC and
// REST addresses, as the API server's principal, with the stack's OIDC
// provider if it has one.
func startAPI(ctx context.Context, log *slog.Logger, ids *natsIdentities, base compose.Env, opts Options, server apiserver.Options) (*apiserver.Server, error) {
	env, err := ids.env(natsauth.APIServer, base)
	if err != nil {
		return nil, err
	}
	if server.GRPCListener, err = listen(log, "gRPC", opts.Host, opts.GRPCPort); err != nil {
		return nil, err
	}
	if server.HTTPListener, err = listen(log, "REST", opts.Host, opts.RESTPort); err != nil {
		_ = server.GRPCListener.Close() // Releasing a port on the error path; nothing to report.
		return nil, err
	}
	api, err := compose.API(ctx, env, compose.APIOptions{Server: server, OIDC: opts.OIDC})
	if err != nil {
		_ = server.GRPCListener.Close() // as above
		_ = server.HTTPListener.Close()
		return nil, err
	}
	return api, nil
}

// buildAgent builds host i's agent (compose.Agent), as the host's
// principal, on loopback ports of its own, adjusted by
// Options.AgentOptions.
func buildAgent(ctx context.Context, i int, ids *natsIdentities, base compose.Env, opts Options, tokens *playertoken.Ring, ports *gamePorts) (*agent.Agent, error) {
	log := opts.Logger
	id := hostID(i)
	env, err := ids.env(natsauth.HostPrincipal(id), base)
	if err != nil {
		return nil, err
	}
	env.Pool = nil                                          // an agent reads no views
	env.MeterProvider = agentMeters(opts.MeterProvider, id) // services/dev/metrics.go
	sdkGRPC, sdkHTTP := "127.0.0.1:0", "127.0.0.1:0"
	if opts.SDKPort > 0 {
		sdkGRPC = net.JoinHostPort(opts.Host, strconv.Itoa(portOrFree(log, "SDK "+id, opts.Host, opts.SDKPort+2*i)))
		sdkHTTP = net.JoinHostPort(opts.Host, strconv.Itoa(portOrFree(log, "SDK REST "+id, opts.Host, opts.SDKPort+2*i+1)))
	}
	o := agent.Options{
		HostID: id, Capacity: opts.HostCapacity, Address: opts.Host,
		Labels:  map[string]string{"zone": ZoneOf(i)},
		SDKAddr: sdkGRPC, SDKHTTPAddr: sdkHTTP,
		LogDir: filepath.Join(opts.LogDir, id), JetStream: env.JetStream,
		KillProcessesOnExit: true, Logger: log.With("component", "agent"), Tokens: tokens,
		// Game servers run as whoever runs `tether dev`, root included
		// (CI, containers): a development stack, on loopback. So
		// they run only what the stack allows (an operator's key is
		// not root on the machine).
		AllowRootGameServers: true,
		AllowedCommands:      opts.AllowedCommands, AllowAnyCommand: opts.AllowAnyCommand,
	}
	// Before compose fills in the rest: a caller that gives the agent a
	// store or a connection of its own (the simulator) opens no other.
	if opts.AgentOptions != nil {
		if err := opts.AgentOptions(i, &o); err != nil {
			return nil, fmt.Errorf("dev: host %s: %w", id, err)
		}
	}
	if o.PortMin == 0 && o.PortMax == 0 {
		if o.PortMin, o.PortMax, err = ports.claim(id); err != nil {
			return nil, err
		}
	}
	return compose.Agent(ctx, env, compose.AgentOptions{Agent: o})
}

// ExampleGameServer is the file name of the example game server that
// `make build` puts in bin/, beside tether.
const ExampleGameServer = "tether-gameserver"

// DefaultAllowedCommands are the programs a dev stack's game servers may
// run when Options.AllowedCommands names none: the example game server,
// the only program the demo fleet and the example fleets run, at
// bin/tether-gameserver in the working directory (deploy/examples name it
// so, from where `tether dev` runs) and beside the running binary (the
// demo's). Each is absolute with its links resolved, named once, and there:
// a missing one is left out. The directory, bin/, is not allowed whole:
// it holds tether and tetherctl, with which a template could start an
// agent of its own that runs anything, or act with the admin's key.
func DefaultAllowedCommands() []string {
	var candidates []string
	if wd, err := os.Getwd(); err == nil {
		candidates = append(candidates, filepath.Join(wd, "bin", ExampleGameServer))
	}
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), ExampleGameServer))
	}
	var programs []string
	for _, c := range candidates {
		if real, ok := regularFile(c); ok && !slices.Contains(programs, real) {
			programs = append(programs, real)
		}
	}
	return programs
}

// regularFile is path with its links resolved, if it is a regular file.
func regularFile(path string) (string, bool) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", false
	}
	info, err := os.Stat(real)
	return real, err == nil && info.Mode().IsRegular()
}

// dropEarlierLease removes the leases an earlier run left in the embedded
// NATS server's store (a run killed before it could release them). That
// store is this stack's own, so whoever held a lease is gone; left there,
// the controller's held every decision up until it expired (its TTL, 10 s
// and more), and the views sat still meanwhile. migrate.NATS creates the
// bucket again.
func dropEarlierLease(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	kv, err := js.KeyValue(ctx, lease.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dev: read the controller lease: %w", err)
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil // released by a clean stop
	}
	if err != nil {
		return fmt.Errorf("dev: read the controller lease: %w", err)
	}
	if err := js.DeleteKeyValue(ctx, lease.Bucket); err != nil {
		return fmt.Errorf("dev: remove an earlier run's controller lease: %w", err)
	}
	log.Info("removed the controller lease an earlier run left", "keys", keys)
	return nil
}

// listen binds host:port; if the port is taken it binds a free one and says
// so. A negative port asks for a free one.
func listen(log *slog.Logger, what, host string, port int) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(max(port, 0)))
	l, err := net.Listen("tcp", addr)
	if err == nil {
		return l, nil
	}
	if port <= 0 || !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("dev: listen %s on %s: %w", what, addr, err)
	}
	if l, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
		return nil, fmt.Errorf("dev: listen %s on a free port: %w", what, err)
	}
	log.Warn("port taken; using a free one instead", "service", what, "wanted", port, "using", l.Addr().String())
	return l, nil
}

// gamePorts claims blocks of game ports for hosts, in order from a base: a
// block is claimed by listening on its last port.
type gamePorts struct {
	log    *slog.Logger
	host   string
	next   int  // first port of the next block to try
	quiet  bool // free blocks were asked for: skipping one is no news
	claims []net.Listener
}

func newGamePorts(log *slog.Logger, host string, base int) *gamePorts {
	if base < 0 {
		return &gamePorts{log: log, host: host, next: DefaultGamePortBase, quiet: true}
	}
	return &gamePorts{log: log, host: host, next: base}
}

// claim takes the next free block and returns the ports it gives to game
// servers.
func (g *gamePorts) claim(hostID string) (minPort, maxPort int, err error) {
	wanted := g.next
	var last error
	for ; g.next+gamePortBlock-1 <= 65535; g.next += gamePortBlock {
		first, claim := g.next, g.next+gamePortBlock-1
		l, err := net.Listen("tcp", net.JoinHostPort(g.host, strconv.Itoa(claim)))
		if err != nil {
			last = err
			continue
		}
		g.claims = append(g.claims, l)
		g.next += gamePortBlock
		if first != wanted && !g.quiet {
			g.log.Warn("game port range taken; using a free one instead", "host", hostID,
				"wanted", fmt.Sprintf("%d-%d", wanted, wanted+gamePortBlock-2), "using", fmt.Sprintf("%d-%d", first, claim-1), "err", last)
		}
		return first, claim - 1, nil
	}
	return 0, 0, fmt.Errorf("dev: host %s: no free block of %d game ports from %d (set another --game-port-base): %w", hostID, gamePortBlock, wanted, last)
}

// release gives up the claims.
func (g *gamePorts) release() {
	for _, l := range g.claims {
		_ = l.Close() // a listener nobody connects to: nothing to report
	}
}

// portOrFree returns port if it is free now, else 0 (the server picks a free
// port) after saying so; for servers that bind their own listeners.
func portOrFree(log *slog.Logger, what, host string, port int) int {
	if port <= 0 {
		return 0
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		log.Warn("port taken; using a free one instead", "service", what, "wanted", port, "err", err)
		return 0
	}
	_ = l.Close() // Only probing; the server binds it next.
	return port
}

// DemoFleet is the id of the fleet `tether dev --demo` creates.
const DemoFleet = "demo"

// createDemoFleet creates the demo fleet through the REST API, unless it exists.
func createDemoFleet(ctx context.Context, rest, key, binary string) error {
	body := fmt.Sprintf(`{"replicas": 3, "template": {"command": %q, "ports": [{"name": "game", "protocol": "UDP"}]},
  "labels": {"mode": "demo"}}`, binary)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rest+"/v1/fleets?fleetId="+DemoFleet+"&requestId=dev-demo-fleet", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("create demo fleet: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096)) // best effort: only for the error message
	switch resp.StatusCode {
	case http.StatusOK, http.StatusConflict: // created, or there from an earlier run
		return nil
	}
	return fmt.Errorf("create demo fleet: %s: %s", resp.Status, msg)
}

// hostID is the id of the stack's host i (0-based).
func hostID(i int) string { return fmt.Sprintf("h%d", i+1) }

// ZoneOf is the zone label of the stack's i-th host (from 0): each host a
// zone of its own, "dev-a", "dev-b", … "dev-z", "dev-aa", …, so that
// placement by host labels can be tried on one machine.
func ZoneOf(i int) string {
	letters := ""
	for n := i; ; n = n/26 - 1 {
		letters = string(rune('a'+n%26)) + letters
		if n < 26 {
			break
		}
	}
	return "dev-" + letters
}

// ArchiveDir is where a dev stack with Options.ArchiveInDataDir keeps its
// archive's segments.
func ArchiveDir(dataDir string) string { return filepath.Join(dataDir, "archive") }

// DefaultRetention is how long `tether dev` keeps what has ended in the
// stream and the views before it archives it: an hour, so that a machine's
// stack does not list every earlier run's servers, and the archive has
// something in it by the end of an afternoon.
const DefaultRetention = time.Hour

// DatabaseURLFile is where a dev stack that started its own PostgreSQL
// writes the database URL with its password (mode 0600): the banner shows
// it redacted.
func DatabaseURLFile(dataDir string) string { return filepath.Join(dataDir, "database-url") }
