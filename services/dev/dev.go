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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/commands"
	"github.com/tetherhq/tether/services/connect"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/dev/pgtemp"
	"github.com/tetherhq/tether/services/playertoken"
)

// Default ports of `tether dev`; each falls back to a free port if taken.
const (
	DefaultGRPCPort = 7070
	DefaultRESTPort = 7080
	DefaultNATSPort = 7422
	DefaultSDKPort  = 7200
)

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
	// HostCapacity is each host's game server slots; default 10.
	HostCapacity int
	// SDKPort is the first host's SDK gRPC port; host i uses SDKPort+2i
	// (gRPC) and SDKPort+2i+1 (REST); default 7200; -1 picks free ports.
	SDKPort int
	// GamePortBase is the first port given to game servers; host i gets the
	// 100 ports from GamePortBase+100i; default 7300.
	GamePortBase int
	// LogDir holds the game servers' log files; default DataDir/logs.
	LogDir string
	// Logger; default discards.
	Logger *slog.Logger
	// TracerProvider is passed to every component.
	TracerProvider trace.TracerProvider
	// MeterProvider is passed to every component.
	MeterProvider metric.MeterProvider
	// MetricsHandler is served at /metrics on the REST address.
	MetricsHandler http.Handler
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
	AgentOptions func(i int, o *agent.Options) error
	// AgentStartSpread spreads the agents' starts evenly over this long
	// instead of starting them at once (thousands of simulated hosts); 0
	// starts them together.
	AgentStartSpread time.Duration
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
}

func (o *Options) setDefaults() error {
	if o.DataDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("dev: no data dir given and no user cache dir: %w", err)
		}
		o.DataDir = filepath.Join(cache, "tether", "dev")
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
		o.Hosts = 1
	}
	if o.HostCapacity <= 0 {
		o.HostCapacity = 10
	}
	if o.SDKPort == 0 {
		o.SDKPort = DefaultSDKPort
	}
	if o.GamePortBase <= 0 {
		o.GamePortBase = 7300
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(o.DataDir, "logs")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
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

	natsURL := opts.NATSURL
	if natsURL == "" {
		ns, err := natsembed.Start(natsembed.Options{
			Host: opts.Host, Port: portOrFree(log, "NATS", opts.Host, opts.NATSPort),
			StoreDir: filepath.Join(opts.DataDir, "nats"), Logger: log.With("component", "nats"),
		})
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		natsURL = ns.ClientURL()
	}

	dbURL := opts.DatabaseURL
	if dbURL == "" {
		pg, err := pgtemp.Start(ctx, pgtemp.Options{Logger: log.With("component", "postgres")})
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
	}

	nc, js, err := connect.NATS(natsURL, connect.NATSOptions{Name: "tether-dev", Logger: log})
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := natsjs.New(ctx, js, natsjs.Options{Logger: log})
	if err != nil {
		return err
	}
	pool, err := connect.Postgres(ctx, dbURL, 20, log)
	if err != nil {
		return err
	}
	defer pool.Close()

	projector, err := postgres.NewProjector(postgres.ProjectorOptions{
		Pool: pool, JetStream: js, Logger: log.With("component", "projector"),
		TracerProvider: opts.TracerProvider, MeterProvider: opts.MeterProvider,
	})
	if err != nil {
		return err
	}
	grpcLis, err := listen(log, "gRPC", opts.Host, opts.GRPCPort)
	if err != nil {
		return err
	}
	restLis, err := listen(log, "REST", opts.Host, opts.RESTPort)
	if err != nil {
		_ = grpcLis.Close() // Releasing a port on the error path; nothing to report.
		return err
	}
	bus, err := commands.New(ctx, js)
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
	api, err := apiserver.New(apiserver.Options{
		GRPCListener: grpcLis, HTTPListener: restLis, ProjectionPool: pool, JetStream: js,
		Store: store, Views: postgres.NewViews(pool), Freshness: postgres.NewFreshness(pool, log),
		Tokens: tokens, Commands: bus, Watch: store,
		Logger: log.With("component", "apiserver"), TracerProvider: opts.TracerProvider,
		MeterProvider: opts.MeterProvider, MetricsHandler: opts.MetricsHandler,
	})
	if err != nil {
		return err
	}
	ctlFresh := postgres.NewFreshness(pool, log)
	ctlOpts := controller.Options{
		JetStream: js, Store: store, Views: postgres.NewViews(pool), Freshness: ctlFresh,
		Commands: bus, Logger: log.With("component", "controller"), MeterProvider: opts.MeterProvider,
	}
	if opts.ControllerOptions != nil {
		opts.ControllerOptions(&ctlOpts)
	}
	ctl, err := controller.New(ctlOpts)
	if err != nil {
		return err
	}
	var agents []*agent.Agent
	addrs := Addresses{REST: "http://" + api.HTTPAddr(), GRPC: api.GRPCAddr(), NATS: natsURL, Database: dbURL, DataDir: opts.DataDir}
	for i := range opts.Hosts {
		id := fmt.Sprintf("h%d", i+1)
		sdkGRPC, sdkHTTP := "127.0.0.1:0", "127.0.0.1:0"
		if opts.SDKPort > 0 {
			sdkGRPC = net.JoinHostPort(opts.Host, strconv.Itoa(portOrFree(log, "SDK "+id, opts.Host, opts.SDKPort+2*i)))
			sdkHTTP = net.JoinHostPort(opts.Host, strconv.Itoa(portOrFree(log, "SDK REST "+id, opts.Host, opts.SDKPort+2*i+1)))
		}
		agentOpts := agent.Options{
			HostID: id, Capacity: opts.HostCapacity, Address: opts.Host,
			Labels:  map[string]string{"zone": fmt.Sprintf("dev-%c", 'a'+rune(i%3))},
			SDKAddr: sdkGRPC, SDKHTTPAddr: sdkHTTP,
			PortMin: opts.GamePortBase + 100*i, PortMax: opts.GamePortBase + 100*i + 99,
			LogDir: filepath.Join(opts.LogDir, id), JetStream: js, Store: store, Commands: bus,
			KillProcessesOnExit: true, Logger: log.With("component", "agent"), Tokens: tokens,
		}
		if opts.AgentOptions != nil {
			if err := opts.AgentOptions(i, &agentOpts); err != nil {
				return fmt.Errorf("dev: host %s: %w", id, err)
			}
		}
		a, err := agent.New(agentOpts)
		if err != nil {
			return err
		}
		agents = append(agents, a)
		addrs.SDK = append(addrs.SDK, a.SDKAddr())
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return projector.Run(ctx) })
	g.Go(func() error { return api.Run(ctx) })
	g.Go(func() error { return ctlFresh.Run(ctx) })
	g.Go(func() error { return ctl.Run(ctx) })
	for i, a := range agents {
		g.Go(func() error {
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
		if err := createDemoFleet(ctx, addrs.REST, opts.DemoGameServer); err != nil {
			log.Error("demo fleet not created", "err", err)
		}
	}
	if opts.Ready != nil {
		opts.Ready(addrs)
	}
	if opts.Started != nil {
		opts.Started(&Stack{Addresses: addrs, Store: store, JetStream: js, Pool: pool, Agents: agents})
	}
	return g.Wait()
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
func createDemoFleet(ctx context.Context, rest, binary string) error {
	body := fmt.Sprintf(`{"replicas": 3, "template": {"command": %q, "ports": [{"name": "game", "protocol": "UDP"}]},
  "labels": {"mode": "demo"}}`, binary)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rest+"/v1/fleets?fleetId="+DemoFleet+"&requestId=dev-demo-fleet", strings.NewReader(body))
	if err != nil {
		return err
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
