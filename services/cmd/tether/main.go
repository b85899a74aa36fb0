// Command tether runs Tether's services: `tether dev` runs everything on one
// machine; `tether apiserver`, `tether projector`, `tether controller` and
// `tether agent` run one service each against a NATS server (and, except the
// agent, a PostgreSQL database).
//
// main only turns flags and environment into Options and runs components
// under signal handling.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/archiver"
	"github.com/tetherhq/tether/services/compose"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/nats/lease"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/connect"
	"github.com/tetherhq/tether/services/platform/filewatch"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/platform/oidcauth"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/platform/profiling"
	"github.com/tetherhq/tether/services/platform/telemetry"
	"github.com/tetherhq/tether/services/tools/chaos"
)

func main() {
	// SIGHUP (the terminal closed) stops like Ctrl-C: its default action
	// ends the process at once, leaving tether dev's PostgreSQL behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := rootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "tether:", err)
		os.Exit(1)
	}
}

// global holds flags shared by every subcommand.
type global struct {
	logLevel  string
	natsURL   string
	dbURL     string
	pprofAddr string
	adminAddr string
	// natsCreds, natsSigners and natsCA: see natsauth.go.
	natsCreds   string
	natsSigners string
	natsCA      string
}

func rootCommand() *cobra.Command {
	var g global
	root := &cobra.Command{
		Use:           "tether",
		Short:         "Tether: an event-sourced control plane for game-server fleets",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server")
	root.PersistentFlags().StringVar(&g.dbURL, "database-url", "", "PostgreSQL URL")
	root.PersistentFlags().StringVar(&g.natsCreds, "nats-creds", "",
		"NATS credentials file of this component or host (made with: tether nats-auth init); its key also signs the events written; re-read when it changes")
	root.PersistentFlags().StringVar(&g.natsCA, "nats-ca", "",
		"trust this CA (PEM) for NATS servers' TLS certificates (use tls:// URLs; TLS also follows from the server's config)")
	root.PersistentFlags().StringVar(&g.natsSigners, "nats-signers", "",
		"signers file (tether nats-auth): verify who wrote each event read, and refuse a host agent's event on another host's servers; re-read when it changes")
	root.PersistentFlags().StringVar(&g.pprofAddr, "pprof-addr", "",
		"serve Go runtime profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060; off when empty")
	root.PersistentFlags().StringVar(&g.adminAddr, "admin-addr", "",
		"serve /healthz, /readyz and /metrics on this address (apiserver, projector, controller, agent), e.g. 127.0.0.1:7090; off when empty")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := applyEnvironment(cmd); err != nil {
			return err
		}
		return g.startProfiling(cmd.Context())
	}
	root.AddCommand(devCommand(&g), migrateCommand(&g), keysCommand(), natsAuthCommand(), apiserverCommand(&g), projectorCommand(&g), controllerCommand(&g), agentCommand(&g), chaosCommand(&g), simCommand(&g))
	documentEnv(root)
	return root
}

// startProfiling serves the runtime profiles while the command runs, if
// --pprof-addr asks for them.
func (g *global) startProfiling(ctx context.Context) error {
	if g.pprofAddr == "" {
		return nil
	}
	log, err := g.logger()
	if err != nil {
		return err
	}
	l, err := profiling.Listen(g.pprofAddr)
	if err != nil {
		return err
	}
	go func() {
		if err := profiling.Serve(ctx, l, log); err != nil {
			log.Error("profiling endpoints stopped", "err", err)
		}
	}()
	return nil
}

func (g *global) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), nil
}

func devCommand(g *global) *cobra.Command {
	var opts dev.Options
	var demo bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole system on this machine: NATS, PostgreSQL, projector and API",
		Long: `Runs an embedded JetStream nats-server (state under --data-dir), a throwaway
PostgreSQL started from the binaries on PATH (or DATABASE_URL), the projector
and the API server, and prints their addresses. Ctrl-C stops everything.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			tel, err := telemetry.New(telemetry.Options{ServiceName: "tether-dev"})
			if err != nil {
				return err
			}
			defer compose.ShutdownTelemetry(log, tel)
			opts.Logger, opts.DatabaseURL = log, g.dbURL
			if demo {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--demo: find the example game server: %w", err)
				}
				opts.DemoGameServer = filepath.Join(filepath.Dir(exe), "tether-gameserver")
				if _, err := os.Stat(opts.DemoGameServer); err != nil {
					return fmt.Errorf("--demo: %w (build it with make build)", err)
				}
			}
			opts.TracerProvider, opts.MeterProvider, opts.MetricsHandler = tel.TracerProvider, tel.MeterProvider, tel.MetricsHandler
			opts.Auth = true
			// An archive in the data dir unless --archive-dir says where,
			// or off (the tour's archive commands read it).
			switch opts.ArchiveDir {
			case "":
				opts.ArchiveInDataDir = true
			case "off":
				opts.ArchiveDir = ""
			}
			opts.Ready = func(a dev.Addresses) {
				fmt.Printf(`
Tether is running.
  REST     %s   (OpenAPI: %[1]s/openapi.json, metrics: %[1]s/metrics)
  Console  %[1]s/ui/   (sign in with one of the API keys below; operator.key reads everything)
  gRPC     %s
  NATS     %s%s
  Database %s%s
  SDK      %s   (one per host)
  Data     %s
  API keys %s/{admin,operator,matchmaker,viewer,auditor}.key   (made at each start; tetherctl on this machine reads admin.key)
  %s
%s
Press Ctrl-C to stop.
`, a.REST, a.GRPC, connect.Redact(a.NATS), natsCredsNote(a.NATSCreds), connect.Redact(a.Database), databaseNote(a.DataDir, g.dbURL == ""),
					strings.Join(a.SDK, " "), a.DataDir, a.KeysDir, commandsNote(a.AllowedCommands), tour(a, opts.DemoGameServer != ""))
			}
			return dev.Run(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DataDir, "data-dir", "", "where NATS keeps its state (default: a directory in the user's cache)")
	f.BoolVar(&opts.Fresh, "fresh", false, "start with an empty data dir")
	f.IntVar(&opts.GRPCPort, "grpc-port", dev.DefaultGRPCPort, "gRPC port (-1: any free port)")
	f.IntVar(&opts.RESTPort, "rest-port", dev.DefaultRESTPort, "REST port (-1: any free port)")
	f.IntVar(&opts.NATSPort, "nats-port", dev.DefaultNATSPort, "NATS port (-1: any free port)")
	f.IntVar(&opts.SDKPort, "sdk-port", dev.DefaultSDKPort, "first host's SDK gRPC port; host i uses +2i and +2i+1 (REST) (-1: free ports)")
	f.IntVar(&opts.GamePortBase, "game-port-base", dev.DefaultGamePortBase,
		"first game port; host i gives its game servers ports base+100i to base+100i+98 and holds base+100i+99 as its claim; "+
			"a range another stack holds is skipped for a free one (-1: the first free ranges)")
	f.IntVar(&opts.Hosts, "hosts", dev.DefaultHosts, "simulated hosts, each a host agent on loopback")
	f.IntVar(&opts.HostCapacity, "host-capacity", agent.DefaultCapacity, "game server slots per host")
	f.BoolVar(&demo, "demo", false, "create a demo fleet of the example game server (tether-gameserver next to this binary)")
	oidcFlags(f, &opts.OIDC) // single sign-on, as tether apiserver offers it
	f.StringSliceVar(&opts.AllowedCommands, "allowed-commands", nil,
		"directories game server commands must be in (or programs allowed alone), comma-separated (default: the example game server, bin/tether-gameserver in the working directory and beside this binary; without it, the data dir's games/)")
	f.BoolVar(&opts.AllowAnyCommand, "allow-any-command", false,
		"let game servers run any command instead: any fleet template's program runs on this machine, as the user running tether dev")
	f.StringVar(&opts.PlayerTokenKeys, "player-token-keys", "",
		"player-session token keys, \"id:base64secret[,id:base64secret…]\" (default: a fresh key per run)")
	archiveFlags(f, &opts.ArchiveDir, &opts.Retention, &opts.ArchiveInterval, devArchiveHelp, dev.DefaultRetention)
	return cmd
}

// devArchiveHelp is tether dev's --archive-dir, which has a default.
const devArchiveHelp = "archive the histories of ended game servers, game sessions and deleted fleets into segments at this location once --retention has passed, " +
	"purge them from the events stream and the views, and read them back through the API (" + archiveLocations + "); " +
	"default: the data dir's archive/; off: none"

// databaseNote says where the URL with its password is, when the dev
// stack started its own PostgreSQL.
func databaseNote(dataDir string, own bool) string {
	if !own {
		return ""
	}
	return "   (with its password: " + dev.DatabaseURLFile(dataDir) + ")"
}

// commandsNote says where the dev stack's game servers may run commands
// from (none: anywhere).
func commandsNote(dirs []string) string {
	if len(dirs) == 0 {
		return "game servers may run commands in: any directory (--allow-any-command)"
	}
	return "game servers may run commands in: " + strings.Join(dirs, ", ") + "   (--allowed-commands changes them)"
}

// natsCredsNote says which credentials connect to the dev NATS server.
func natsCredsNote(file string) string {
	if file == "" {
		return ""
	}
	return "   (credentials: " + file + "; each component and host has its own)"
}

// tour tells the user what to try next.
func tour(a dev.Addresses, demo bool) string {
	var b strings.Builder
	b.WriteString("\nTry:\n")
	if demo {
		b.WriteString("  bin/tetherctl gameservers list              # the demo fleet's 3 game servers\n")
	}
	b.WriteString("  bin/tetherctl fleets list                      # tetherctl finds this stack and its admin key\n")
	fmt.Fprintf(&b, "For curl:\n  REST=%s KEY=\"Authorization: Bearer $(cat %s)\"\n", a.REST, dev.AdminKeyFile(a.DataDir))
	b.WriteString("  curl -s -H \"$KEY\" $REST/v1/fleets/-/gameServers\n")
	b.WriteString("And:\n")
	b.WriteString("  bin/tetherctl fleets create -f deploy/examples/arena.yaml\n")
	b.WriteString("  bin/tetherctl gameservers watch                # then kill -9 a game server's pid\n")
	return b.String()
}

func apiserverCommand(g *global) *cobra.Command {
	var opts compose.APIOptions
	var tokenKeys, tokenKeysFile string
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Serve the control-plane API (gRPC and REST)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runService(cmd.Context(), g, service{name: "tether-apiserver", database: true, principal: natsauth.APIServer}, func(ctx context.Context, p *compose.Process) (compose.Runner, error) {
				log := p.Env().Logger
				tokens, err := playerTokenKeys(tokenKeys, tokenKeysFile, log)
				if err != nil {
					return nil, err
				}
				if tokens == nil {
					return nil, errors.New("player-token keys are required: give --player-token-keys-file (or TETHER_PLAYER_TOKEN_KEYS_FILE); the agents need the same keys")
				}
				if (opts.TLSCert == "") != (opts.TLSKey == "") {
					return nil, errors.New("give both --tls-cert and --tls-key, or neither")
				}
				opts.Server.Tokens = tokens
				return compose.API(ctx, p.Env(), opts)
			})
		},
	}
	f := cmd.Flags()
	o := &opts.Server
	f.StringVar(&o.GRPCAddr, "grpc-addr", apiserver.DefaultGRPCAddr, "gRPC listen address")
	f.StringVar(&o.HTTPAddr, "http-addr", apiserver.DefaultHTTPAddr, "REST listen address")
	f.DurationVar(&o.ReadWait, "read-wait", apiserver.DefaultReadWait, "longest a read waits for min_sequence")
	f.DurationVar(&o.Keepalive, "keepalive", apiserver.DefaultKeepalive, "gRPC keepalive ping interval on idle connections")
	f.StringVar(&tokenKeys, "player-token-keys", "",
		"player-session token keys, \"id:base64secret[,id:base64secret…]\"; the first signs (prefer --player-token-keys-file: a flag shows in ps)")
	f.StringVar(&tokenKeysFile, "player-token-keys-file", "",
		"file of player-session token keys, one id:base64secret per line, the first signs; re-read when it changes (rotation without a restart)")
	f.DurationVar(&o.TokenTTL, "player-token-ttl", apiserver.DefaultTokenTTL, "how long a player-session token is valid")
	f.Int64Var(&o.MaxBodyBytes, "max-body-bytes", apiserver.DefaultMaxBodyBytes, "largest REST request body (413 above it)")
	f.Float64Var(&o.Limits.Rate, "rate-per-caller", apiserver.DefaultRate,
		"calls per second one caller (an API key's principal, else an address) may make on average; -1: no limit (429 / RESOURCE_EXHAUSTED above it)")
	f.IntVar(&o.Limits.Burst, "burst-per-caller", apiserver.DefaultBurst, "calls one caller may make at once above its rate")
	f.IntVar(&o.Limits.MaxConcurrent, "max-concurrent-per-caller", apiserver.DefaultMaxConcurrent, "calls one caller may have in progress; -1: no limit")
	f.IntVar(&o.Limits.MaxWatches, "max-watches-per-caller", apiserver.DefaultMaxWatches, "streams (event watches) one caller may hold open; -1: no limit")
	f.IntVar(&o.WatchBufferBytes, "watch-buffer-bytes", apiserver.DefaultWatchBufferBytes,
		"bytes of encoded events a watch holds for a client that does not read; it ends the watch (WATCH_FELL_BEHIND) once the client has read nothing for 10 s")
	f.StringVar(&o.Installation, "installation", apiserver.DefaultInstallation,
		"this Tether installation's name, the source of Agones allocation answers (a matchmaker that asks several installations tells them apart by it)")
	f.IntVar(&o.WatchTotalBytes, "watch-total-bytes", apiserver.DefaultWatchTotalBytes,
		"bytes of encoded events every watch together holds for its clients; a watch that would take more ends the one that holds the most (WATCH_FELL_BEHIND)")
	f.BoolVar(&o.Insecure, "insecure", false,
		"serve plain text (no TLS) on an address other machines can reach: a trusted network, or behind a proxy that ends TLS")
	f.StringVar(&opts.TLSCert, "tls-cert", "", "serve the API over TLS with this certificate (PEM; re-read when it changes)")
	f.StringVar(&opts.TLSKey, "tls-key", "", "the TLS certificate's private key (PEM)")
	oidcFlags(f, &opts.OIDC)
	f.BoolVar(&o.MetricsNeedKey, "metrics-need-key", false, "the REST address's /metrics answers only callers with an API key (else it is open, like /healthz)")
	f.BoolVar(&o.OpenAPINeedsKey, "openapi-needs-key", false, "/openapi.json answers only callers with an API key")
	f.StringVar(&opts.ClientCA, "client-ca", "",
		"verify client certificates against these authorities (PEM; mutual TLS; re-read when it changes): a certificate named by a cert:NAME line of --api-keys authenticates as that principal")
	f.StringVar(&opts.APIKeysFile, "api-keys", "",
		"API keys file (made with: tether keys add); re-read when it changes. Without it every caller may do everything")
	f.StringVar(&opts.ArchiveDir, "archive-dir", "",
		"read the archived histories of ended game servers, game sessions and deleted fleets from the segments at this location "+
			"(the controller's --archive-dir, shared: "+archiveLocations+"): history, explain, state at a time and exports serve them, and tetherctl archive verify checks them")
	return cmd
}

// oidcFlags adds the flags of the API's OpenID Connect authentication
// (tether apiserver and tether dev).
func oidcFlags(f *pflag.FlagSet, o *oidcauth.Options) {
	f.StringVar(&o.Issuer, "oidc-issuer", "", "accept OpenID Connect tokens (JWTs) of this issuer as bearer tokens (single sign-on)")
	f.StringVar(&o.Audience, "oidc-audience", "", "the audience (client id) OIDC tokens must be issued for")
	f.StringVar(&o.JWKSURL, "oidc-jwks-url", "", "where the OIDC provider publishes its signing keys (JWKS)")
	f.StringVar(&o.JWKSFile, "oidc-jwks-file", "", "the OIDC provider's signing keys as a JWKS file, re-read when it changes (instead of --oidc-jwks-url)")
	f.StringVar(&o.RoleClaim, "oidc-role-claim", "tether_role", "the token claim that holds the caller's Tether role (a name, or a list: the most powerful counts)")
	f.StringVar(&o.NameClaim, "oidc-name-claim", "email", "the token claim shown as the caller (sub when absent)")
}

func projectorCommand(g *global) *cobra.Command {
	var opts compose.ProjectorOptions
	cmd := &cobra.Command{
		Use:   "projector",
		Short: "Fold the event stream into the PostgreSQL views (one active instance; others stand by)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runService(cmd.Context(), g, service{name: "tether-projector", database: true, principal: natsauth.Projector}, func(ctx context.Context, p *compose.Process) (compose.Runner, error) {
				return compose.Projector(ctx, p.Env(), opts)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Service.ID, "id", "", "instance id (default: random)")
	f.IntVar(&opts.Service.Projector.BatchSize, "batch-size", postgres.DefaultBatchSize, "events per batch at most")
	f.DurationVar(&opts.Service.Projector.FlushInterval, "flush-interval", postgres.DefaultFlushInterval, "flush a batch this long after its first event")
	return cmd
}

func migrateCommand(g *global) *cobra.Command {
	var opts migrate.Options
	var skipDatabase bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or update the JetStream streams and buckets and the PostgreSQL schema (run before the services, and at every upgrade)",
		Long: `Applies the PostgreSQL migrations and creates the JetStream streams and
key-value buckets Tether uses, or updates them where they differ from what
this version needs: their replicas included, so --stream-replicas 3 turns an
R1 deployment into an R3 one in place. Safe to run again and from several
places at once. The services never create storage themselves: they exit
telling you to run this.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			if !skipDatabase && g.dbURL == "" {
				return errors.New("--database-url (or DATABASE_URL) is required (or --skip-database to set up NATS only)")
			}
			ctx := cmd.Context()
			id, err := compose.LoadNATSIdentity(g.natsFiles(), natsauth.Admin, log)
			if err != nil {
				return err
			}
			nc, js, err := connect.NATS(g.natsURL, connect.NATSOptions{Name: "tether-migrate", Logger: log, Auth: id.NATSOptions()})
			if err != nil {
				return err
			}
			defer nc.Close()
			opts.Logger = log
			if err := migrate.NATS(ctx, js, opts); err != nil {
				return err
			}
			if !skipDatabase {
				if err := migrate.Postgres(ctx, g.dbURL, log); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "Tether's storage is up to date.")
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Replicas, "stream-replicas", 1, "replicas of every stream and bucket: 1, 3 or 5 (3 on a NATS cluster of three nodes)")
	f.DurationVar(&opts.LeaseTTL, "lease-ttl", lease.DefaultTTL, "how long a silent controller or projector keeps its lease before a standby takes over")
	f.BoolVar(&skipDatabase, "skip-database", false, "set up NATS only")
	return cmd
}

func controllerCommand(g *global) *cobra.Command {
	var opts compose.ControllerOptions
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Keep fleets at their replica count (one active instance; others stand by)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runService(cmd.Context(), g, service{name: "tether-controller", database: true, principal: natsauth.Controller}, func(ctx context.Context, p *compose.Process) (compose.Runner, error) {
				return compose.Controller(ctx, p.Env(), opts)
			})
		},
	}
	f := cmd.Flags()
	o := &opts.Controller
	f.StringVar(&o.ID, "id", "", "instance id (default: random)")
	f.DurationVar(&o.Interval, "interval", controller.DefaultInterval, "reconcile period")
	f.DurationVar(&o.UnreachableAfter, "host-unreachable-after", controller.DefaultUnreachableAfter, "host heartbeat silence before UNREACHABLE")
	f.DurationVar(&o.LostAfter, "host-lost-after", controller.DefaultLostAfter, "host heartbeat silence before LOST (servers replaced)")
	f.DurationVar(&o.ShutdownGrace, "shutdown-grace", controller.DefaultShutdownGrace, "deadline given to a stopped game server")
	f.DurationVar(&o.ShutdownSettle, "shutdown-settle", controller.DefaultShutdownSettle,
		"a SHUTTING_DOWN game server its host no longer lists this long past its deadline, with nothing queued, is terminated")
	f.DurationVar(&o.StaleViewsAfter, "stale-views-after", controller.DefaultStaleViewsAfter,
		"views whose checkpoint stands still this long behind the stream are stale: host liveness only, /readyz 503")
	f.DurationVar(&o.StartBackoffBase, "start-backoff-base", controller.DefaultStartBackoffBase,
		"after a fleet's game server ends before READY, wait this long before starting another; doubles per failure in a row")
	f.DurationVar(&o.StartBackoffCap, "start-backoff-cap", controller.DefaultStartBackoffCap, "the longest wait between a failing fleet's starts")
	archiveFlags(f, &opts.ArchiveDir, &opts.Retention, &opts.ArchiveInterval, controllerArchiveHelp, archiver.DefaultRetention)
	return cmd
}

// controllerArchiveHelp is tether controller's --archive-dir.
const controllerArchiveHelp = "archive the histories of ended game servers, game sessions and deleted fleets into segments at this location once --retention has passed, " +
	"and purge them from the events stream and the views (every controller instance must see the same location: " + archiveLocations + "); off when empty"

// archiveLocations says what an archive location may be (archive.OpenStore).
const archiveLocations = "a directory, file:///path, or s3://bucket/prefix?endpoint=host:port&region=…, " +
	"with credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, ~/.aws or the instance's role"

// archiveFlags adds the flags of the archiver that the controller runs
// while it leads (services/archiver).
func archiveFlags(f *pflag.FlagSet, dir *string, retention, interval *time.Duration, dirHelp string, defaultRetention time.Duration) {
	f.StringVar(dir, "archive-dir", "", dirHelp)
	f.DurationVar(retention, "retention", defaultRetention,
		"how long an ended game server, game session or deleted fleet stays in the events stream and the views before it is archived (with --archive-dir)")
	f.DurationVar(interval, "archive-interval", archiver.DefaultInterval, "time between archiving passes (with --archive-dir)")
}

func agentCommand(g *global) *cobra.Command {
	var opts agent.Options
	var labels map[string]string
	var tokenKeys, tokenKeysFile string
	cmd := &cobra.Command{
		Use:   "agent --host-id ID",
		Short: "Run the host agent: launch and supervise game servers, serve the local SDK",
		RunE: func(cmd *cobra.Command, _ []string) error {
			svc := service{name: "tether-agent", conn: "tether-agent-" + opts.HostID, selfObserved: true, principal: natsauth.HostPrincipal(opts.HostID)}
			return runService(cmd.Context(), g, svc, func(ctx context.Context, p *compose.Process) (compose.Runner, error) {
				log := p.Env().Logger
				opts.Labels = labels
				if opts.DrainOnStop {
					opts.StopDrain = secondSignal(ctx)
				}
				opts.ObserveJetStream = p.ObserveJetStream
				// Checked once the stream is known to be set up (compose
				// opens the store first): its error says to run tether migrate.
				configure := func(o *agent.Options) error {
					if err := agent.CheckRunAs(*o); err != nil {
						return fmt.Errorf("%w: give --run-as USER (TETHER_RUN_AS), a user for game servers; or, for development only, --allow-root-game-servers", err)
					}
					// Its game servers may run as its own user: they must not
					// read its environment (player-token keys) or memory
					// through /proc.
					if err := agent.DenyInspection(); err != nil {
						return err
					}
					var err error
					if o.Tokens, err = playerTokenKeys(tokenKeys, tokenKeysFile, log); err != nil {
						return err
					}
					if o.Tokens == nil {
						log.Warn("no player-token keys: AcceptPlayer is refused (set --player-token-keys-file or TETHER_PLAYER_TOKEN_KEYS_FILE)")
					} else {
						go o.Tokens.Watch(ctx, filewatch.DefaultInterval) // the API's keys, rotated without a restart
					}
					return nil
				}
				return compose.Agent(ctx, p.Env(), compose.AgentOptions{Agent: opts, Configure: configure})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.HostID, "host-id", "", "this host's id (required)")
	f.StringVar(&tokenKeys, "player-token-keys", "", "player-session token keys, the API's (prefer --player-token-keys-file: a flag shows in ps)")
	f.StringVar(&tokenKeysFile, "player-token-keys-file", "", "file of the API's player-session token keys, re-read when it changes")
	f.IntVar(&opts.Capacity, "capacity", agent.DefaultCapacity, "game server slots")
	f.StringToStringVar(&labels, "labels", nil, "host labels, e.g. region=eu,zone=a")
	f.StringVar(&opts.Address, "address", agent.DefaultAddress, "address game clients use to reach this host")
	f.StringVar(&opts.SDKAddr, "sdk-addr", agent.DefaultSDKAddr, "local SDK gRPC address (loopback)")
	f.StringVar(&opts.SDKHTTPAddr, "sdk-http-addr", agent.DefaultSDKHTTPAddr, "local SDK REST address (loopback)")
	f.IntVar(&opts.PortMin, "port-min", agent.DefaultPortMin, "first game server port")
	f.IntVar(&opts.PortMax, "port-max", agent.DefaultPortMax, "last game server port")
	f.IntVar(&opts.AgonesPortMin, "agones-port-min", agent.DefaultAgonesPortMin, "first loopback port of the Agones SDK servers (two per game server)")
	f.IntVar(&opts.AgonesPortMax, "agones-port-max", agent.DefaultAgonesPortMax, "last loopback port of the Agones SDK servers")
	f.StringVar(&opts.LogDir, "log-dir", "", "game server logs, process records and the outbox (default: a temp dir)")
	opts.Logs = agent.LogOptions{Retention: agent.DefaultLogRetention, MaxBytes: agent.DefaultLogMaxBytes, FileMaxBytes: agent.DefaultLogFileMaxBytes}
	f.Var(daysValue{&opts.Logs.Retention}, "log-retention", "how long a game server log file is kept after its last write (14d, 36h)")
	f.Var(bytesValue{&opts.Logs.MaxBytes}, "log-max-bytes", "all game server logs of this host together: above it the oldest files go first (1GiB, 500MB)")
	f.Var(bytesValue{&opts.Logs.FileMaxBytes}, "log-file-max-bytes", "a game server's log file is closed at this size and its next one started")
	f.DurationVar(&opts.StreamKeepalive, "sdk-keepalive", agent.DefaultStreamKeepalive, "keepalive ping interval on SDK connections")
	f.IntVar(&opts.OutboxMax, "outbox-max", agent.DefaultOutboxMax, "events kept on disk while NATS is unreachable")
	f.StringVar(&opts.RunAs, "run-as", "", "user (name or uid) game servers run as, with its primary group; required when the agent runs as root")
	f.BoolVar(&opts.AllowRootGameServers, "allow-root-game-servers", false, "let an agent running as root run game servers as root (development only)")
	f.StringSliceVar(&opts.AllowedCommands, "allowed-commands", nil,
		"directories game server commands must be in (or programs allowed alone), comma-separated; required unless --allow-any-command")
	f.BoolVar(&opts.AllowAnyCommand, "allow-any-command", false,
		"without --allowed-commands, let game servers run any command: any fleet template's program runs on this host (development only; the agent warns of it)")
	f.BoolVar(&opts.DrainOnStop, "drain-on-stop", false,
		"on SIGTERM, drain this host first: its READY game servers move elsewhere, matches finish, then the agent stops (a second signal stops it at once); the host stays cordoned until uncordoned")
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", agent.DefaultDrainTimeout, "the longest a drain on stop waits before the agent stops anyway")
	_ = cmd.MarkFlagRequired("host-id") // the flag exists; the error is impossible
	return cmd
}

// secondSignal returns a channel closed when SIGTERM or an interrupt
// arrives after ctx (ended by the first one) is done.
func secondSignal(ctx context.Context) <-chan struct{} {
	second := make(chan struct{})
	go func() {
		<-ctx.Done()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		signal.Stop(sig)
		close(second)
	}()
	return second
}

func chaosCommand(g *global) *cobra.Command {
	var opts chaos.Options
	var jsonOut string
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run the whole system with real game servers, inject hangs and crashes, print detection figures",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			opts.GameServer = filepath.Join(filepath.Dir(exe), "tether-gameserver")
			opts.AgonesGameServer = filepath.Join(filepath.Dir(exe), "tether-agones-gameserver")
			for _, bin := range []string{opts.GameServer, opts.AgonesGameServer} {
				if _, err := os.Stat(bin); err != nil {
					return fmt.Errorf("chaos needs the example game servers: %w (build them with make build)", err)
				}
			}
			opts.Logger, opts.DatabaseURL = log, g.dbURL
			r, err := chaos.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if err := r.Print(cmd.OutOrStdout()); err != nil {
				return err
			}
			if jsonOut != "" {
				b, err := r.JSON()
				if err != nil {
					return err
				}
				return os.WriteFile(jsonOut, b, 0o644)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Servers, "servers", chaos.DefaultServers, "game servers (a quarter of them flap their SDK connection; half of each kind on Agones' SDK)")
	f.IntVar(&opts.Hosts, "hosts", chaos.DefaultHosts, "simulated hosts")
	f.DurationVar(&opts.Duration, "duration", chaos.DefaultDuration, "how long to inject faults")
	f.DurationVar(&opts.FaultEvery, "fault-every", chaos.DefaultFaultEvery, "time between two faults")
	f.StringVar(&jsonOut, "json", "", "also write the report as JSON to this file")
	return cmd
}

// service names a service's process and says what it connects to.
type service struct {
	name     string // its telemetry service name, and its NATS connection's
	conn     string // its NATS connection's name, if not name
	database bool   // whether it needs PostgreSQL (--database-url)
	// principal is whose NATS credentials it must be given, if any.
	principal string
	// selfObserved: the component reports its own regular JetStream calls
	// (the agent's heartbeats), so no probe runs.
	selfObserved bool
}

// runService opens the service's process (compose.Open: NATS, and
// PostgreSQL if the service needs it), builds one component and serves
// it, with the admin endpoints if asked for, until a signal arrives.
func runService(ctx context.Context, g *global, svc service, build func(context.Context, *compose.Process) (compose.Runner, error)) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	if svc.database && g.dbURL == "" {
		return errors.New("--database-url (or DATABASE_URL) is required")
	}
	o := compose.ProcessOptions{Name: svc.name, ConnName: svc.conn, Logger: log, NATSURL: g.natsURL, NATS: g.natsFiles(),
		Principal: svc.principal, SelfObserved: svc.selfObserved}
	if svc.database {
		o.DatabaseURL = g.dbURL
	}
	p, err := compose.Open(ctx, o)
	if err != nil {
		return err
	}
	defer p.Close()
	r, err := build(ctx, p)
	if err != nil {
		return err
	}
	return p.Serve(ctx, r, g.adminAddr)
}

// natsFiles are the NATS identity files --nats-creds, --nats-signers and
// --nats-ca name.
func (g *global) natsFiles() compose.NATSFiles {
	return compose.NATSFiles{Creds: g.natsCreds, Signers: g.natsSigners, CA: g.natsCA}
}

// playerTokenKeys reads the player-token keys from a file (followed on
// change) or from a flag's value; nil when neither is given.
func playerTokenKeys(spec, file string, log *slog.Logger) (*playertoken.Ring, error) {
	switch {
	case spec != "" && file != "":
		return nil, errors.New("give --player-token-keys or --player-token-keys-file, not both")
	case file != "":
		return playertoken.LoadFile(file, log)
	case spec != "":
		return playertoken.Parse(spec)
	}
	return nil, nil
}
