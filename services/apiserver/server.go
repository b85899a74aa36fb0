// Package apiserver serves Tether's control-plane API over gRPC and, through
// grpc-gateway, as REST/JSON (docs/architecture.md, "The REST contract").
// It is stateless: it reads the PostgreSQL views and writes by appending
// events with a concurrency guard. Several replicas can run at once.
package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/reflection"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections"
	agonesallocation "github.com/tetherhq/tether/proto/allocation"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver/openapi"
	"github.com/tetherhq/tether/services/console"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/oidcauth"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/platform/tlsfiles"
)

// eventStore is what the API needs of the event store (events/natsjs).
type eventStore interface {
	Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error)
	LastSequence(ctx context.Context, subject string) (uint64, error)
	// LeaderLastSequence and CurrentHistory read as the stream's leader
	// has it, for decisions on absence (natsjs).
	LeaderLastSequence(ctx context.Context, subject string) (uint64, error)
	History(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)
	CurrentHistory(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)
	FirstEvent(ctx context.Context, subject string) (events.Envelope, bool, error)
	Event(ctx context.Context, seq uint64) (events.Envelope, error)
	LastEvent(ctx context.Context, subject string) (events.Envelope, bool, error)
	TryAppend(ctx context.Context, subject string, expected uint64, e events.Envelope) (seq uint64, duplicate bool, err error)
}

// commandSender sends commands to host agents (services/commands).
type commandSender interface {
	Send(ctx context.Context, host, sender string, cmd *agentv1.Command) error
}

// viewReader is what the API needs of the views (projections/postgres).
type viewReader interface {
	Fleet(ctx context.Context, name string) (projections.FleetRow, error)
	FleetState(ctx context.Context, name string) (projections.Row[*eventsv1.FleetState], error)
	FleetRevisions(ctx context.Context, fleet string) ([]projections.RevisionCount, error)
	ListFleets(ctx context.Context, after string, limit int) ([]projections.FleetRow, error)
	GameServer(ctx context.Context, name string) (projections.Row[*eventsv1.GameServerState], error)
	ListGameServers(ctx context.Context, q projections.GameServerQuery) ([]projections.Row[*eventsv1.GameServerState], error)
	CountGameServers(ctx context.Context, q projections.GameServerQuery) (int, error)
	RequestSequence(ctx context.Context, aggregate, requestID string) (uint64, error)
	Hosts(ctx context.Context, after string, limit int) ([]projections.HostRow, error)
	Host(ctx context.Context, name string) (projections.HostRow, error)
	GameSession(ctx context.Context, name string) (projections.Row[*eventsv1.GameSessionState], error)
	ListGameSessions(ctx context.Context, q projections.GameSessionQuery) ([]projections.Row[*eventsv1.GameSessionState], error)
	AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error)
	AllocationByRequest(ctx context.Context, requestID string) (gameServer string, seq uint64, ok bool, err error)
	MostGamePorts(ctx context.Context) (int32, error)
}

// freshness waits until the views have applied a sequence.
type freshness interface {
	WaitFor(ctx context.Context, seq uint64) error
	Run(ctx context.Context) error
}

// Options configure a Server.
type Options struct {
	// GRPCAddr is the gRPC listen address; default "127.0.0.1:7070".
	GRPCAddr string
	// HTTPAddr is the REST gateway listen address; default "127.0.0.1:7080".
	HTTPAddr string
	// GRPCListener and HTTPListener, when set, are used instead of the addresses.
	GRPCListener, HTTPListener net.Listener
	// Store is the event store (required).
	Store eventStore
	// Views reads the projections (required).
	Views viewReader
	// Freshness lets reads wait for a minimum sequence (required).
	Freshness freshness
	// Tokens signs player-session tokens (required).
	Tokens *playertoken.Ring
	// TokenTTL is how long a player-session token is valid; default 1h.
	TokenTTL time.Duration
	// Commands, when set, tells agents of allocations at once (otherwise
	// they learn at their next periodic sync).
	Commands commandSender
	// ReplicaID names this replica in event producers; default a random id.
	ReplicaID string
	// Installation names the Tether installation this server is part of
	// in the answers that say who answered: the source of an Agones
	// allocation; default DefaultInstallation, Agones' word for "the one
	// asked".
	Installation string
	// ReadWait bounds how long a read waits for min_sequence; default 5s.
	ReadWait time.Duration
	// Keepalive is the interval of HTTP/2 pings on idle gRPC connections,
	// below common load-balancer idle timeouts (default 30s).
	Keepalive time.Duration
	// Watch streams stored events for WatchEvents; default Store when it
	// can (events/natsjs.Store does). Without one WatchEvents answers
	// UNIMPLEMENTED.
	Watch eventWatcher
	// WatchBuffer bounds the events a watch holds for its client; default
	// DefaultWatchBuffer.
	WatchBuffer int
	// WatchStall is how long a watch waits for a client that reads nothing
	// while events wait for it, before it ends the watch with
	// RESOURCE_EXHAUSTED; default DefaultWatchStall.
	WatchStall time.Duration
	// WatchBufferBytes bounds the bytes of the encoded events a watch
	// holds for its client (besides WatchBuffer's count); default
	// DefaultWatchBufferBytes.
	WatchBufferBytes int
	// WatchTotalBytes bounds the bytes of the encoded events every watch
	// of the server holds together: a watch that would take more ends the
	// watch that holds the most (WATCH_FELL_BEHIND); default
	// DefaultWatchTotalBytes.
	WatchTotalBytes int
	// Limits bound each caller's rate, calls in progress and open
	// streams; zero fields take the defaults (DefaultRate, …).
	Limits Limits
	// AuthRecheck is how often an open stream's key is checked again: a
	// revoked or expired key ends the stream (UNAUTHENTICATED); default
	// apikeys.DefaultReloadEvery.
	AuthRecheck time.Duration
	// ProjectionPool and JetStream, when both set, serve the ProjectionService
	// (status, rebuild, check, dead letters; the pool of the live views).
	// JetStream's connection also reads game servers' logs from their
	// hosts' agents (StreamGameServerLogs, logs.go); without it that call
	// answers UNIMPLEMENTED.
	ProjectionPool *pgxpool.Pool
	JetStream      jetstream.JetStream
	// Verifier, when set, judges event writers in rebuilds, checks and
	// dead-letter retries as the live projector does (its --nats-signers).
	Verifier *natsjs.Verifier
	// Archive, when set, is the archive's segment store (archive.Dir over
	// the controller's --archive-dir): history reads and watches started
	// in the past serve archived aggregates' events from it, found
	// through the archive catalog in the views' database (archive.go), and
	// the ArchiveService verifies it. Nil: archive reads are off; the
	// catalog still says what was archived and where.
	Archive archive.SegmentStore
	// Keys, when set, authenticate every call (Authorization: Bearer <key>)
	// and the permission matrix authorises it by the key's role; without
	// them every caller may do everything.
	Keys *apikeys.Keys
	// TLS, when set, serves both listeners over TLS (its certificate, e.g.
	// from tlsfiles, may change while serving); nil serves plain text.
	TLS *tls.Config
	// OIDC, when set, authenticates callers whose bearer token is an
	// OpenID Connect token (a JWT) of the studio's identity provider, with
	// the role its claims give (single sign-on); with or without Keys.
	OIDC *oidcauth.Verifier
	// MetricsNeedKey and OpenAPINeedsKey make the REST address's /metrics
	// and /openapi.json answer only a caller with a valid key (any role);
	// by default they are open, like /healthz (which always is).
	MetricsNeedKey  bool
	OpenAPINeedsKey bool
	// ClientCAs, with TLS and Keys, verify client certificates (mutual
	// TLS): a certificate the keys file names (cert:NAME) authenticates its
	// caller as that principal, in place of an API key.
	ClientCAs *tlsfiles.ClientCAs
	// Insecure allows serving plain text (no TLS) on an address other
	// machines can reach; without it New refuses to.
	Insecure bool
	// MaxBodyBytes bounds a REST request's body (413 above it); default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ReadRequestTimeout bounds reading a whole REST request, its body
	// included (408 past it); default DefaultReadRequestTimeout.
	ReadRequestTimeout time.Duration
	// MetricsHandler, when set, is served at /metrics on the HTTP address.
	MetricsHandler http.Handler
	// Logger; default discards.
	Logger *slog.Logger
	// TracerProvider; default no-op.
	TracerProvider trace.TracerProvider
	// MeterProvider; default no-op.
	MeterProvider metric.MeterProvider
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// maxMaxBodyBytes caps Options.MaxBodyBytes: a body is held in memory.
const maxMaxBodyBytes = 64 << 20

// The flow-control windows of the gateway's connection to the gRPC server:
// a stream's bounds what the gateway holds of an answer its REST client
// does not read; the connection's, returned as data arrives whether read
// or not, only paces the streams together.
const (
	gatewayStreamWindow = 64 << 10
	gatewayConnWindow   = 16 << 20
)

// The defaults of Options, and of the `tether apiserver` flags.
const (
	DefaultGRPCAddr  = "127.0.0.1:7070"
	DefaultHTTPAddr  = "127.0.0.1:7080"
	DefaultTokenTTL  = time.Hour
	DefaultReadWait  = 5 * time.Second
	DefaultKeepalive = 30 * time.Second
	// DefaultReadRequestTimeout is the default of Options.ReadRequestTimeout.
	DefaultReadRequestTimeout = 30 * time.Second
)

func (o *Options) setDefaults() {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	o.MaxBodyBytes = min(o.MaxBodyBytes, maxMaxBodyBytes)
	if o.GRPCAddr == "" {
		o.GRPCAddr = DefaultGRPCAddr
	}
	if o.HTTPAddr == "" {
		o.HTTPAddr = DefaultHTTPAddr
	}
	if o.Installation == "" {
		o.Installation = DefaultInstallation
	}
	if o.ReplicaID == "" {
		o.ReplicaID = events.NewID("api")
	}
	if o.TokenTTL <= 0 {
		o.TokenTTL = DefaultTokenTTL
	}
	if o.ReadWait <= 0 {
		o.ReadWait = DefaultReadWait
	}
	if o.Keepalive <= 0 {
		o.Keepalive = DefaultKeepalive
	}
	if o.ReadRequestTimeout <= 0 {
		o.ReadRequestTimeout = DefaultReadRequestTimeout
	}
	if w, ok := o.Store.(eventWatcher); ok && o.Watch == nil {
		o.Watch = w
	}
	if o.WatchBuffer <= 0 {
		o.WatchBuffer = DefaultWatchBuffer
	}
	if o.WatchStall <= 0 {
		o.WatchStall = DefaultWatchStall
	}
	if o.WatchBufferBytes <= 0 {
		o.WatchBufferBytes = DefaultWatchBufferBytes
	}
	if o.WatchTotalBytes <= 0 {
		o.WatchTotalBytes = DefaultWatchTotalBytes
	}
	if o.AuthRecheck <= 0 {
		o.AuthRecheck = apikeys.DefaultReloadEvery
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
	if o.Now == nil {
		o.Now = time.Now
	}
}

func (o *Options) validate() error {
	switch {
	case o.Store == nil:
		return errors.New("apiserver: Store is required")
	case o.Views == nil:
		return errors.New("apiserver: Views is required")
	case o.Freshness == nil:
		return errors.New("apiserver: Freshness is required")
	case o.Tokens == nil:
		return errors.New("apiserver: Tokens is required")
	case o.ClientCAs != nil && (o.TLS == nil || o.Keys == nil):
		return errors.New("apiserver: client CAs need TLS (a certificate) and API keys (the keys file names the certificates' principals)")
	}
	return nil
}

// Server is one API replica.
type Server struct {
	opts     Options
	log      *slog.Logger
	producer string
	prop     propagation.TextMapPropagator
	tracer   trace.Tracer // the allocation's own steps (allocate.go)

	grpcLis, httpLis net.Listener

	candidates *candidatePool // READY servers to allocate
	beats      *liveBeats     // hosts' and servers' last heartbeats, for reads
	archive    *archiveReader // archived histories (archive.go)
	views      viewsCatchUp   // whether the views reached the stream's position at start (catchup.go)
	watches    *watchBudget   // the bytes the watches hold (watchbudget.go)

	// auth checks the callers (nil: every caller may do everything); the
	// gateway's error handler asks it before refusing a body (gateway.go).
	auth *authenticator

	policyMu sync.Mutex
	policies map[string]cachedPolicy // fleet → player-session policy

	notices     sync.WaitGroup  // allocation notices to agents still being sent
	noticeCtx   context.Context // ends the notices when Run returns
	stopNotices context.CancelFunc
}

// New builds a server and binds its listeners, so the addresses are known
// (and ports taken) before Run.
func New(opts Options) (*Server, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, producer: "apiservers/" + opts.ReplicaID, prop: propagation.TraceContext{}, beats: &liveBeats{},
		tracer:     opts.TracerProvider.Tracer("github.com/tetherhq/tether/services/apiserver"),
		candidates: newCandidatePool(opts.Views, opts.Now, opts.Logger), policies: map[string]cachedPolicy{}}
	s.archive = newArchiveReader(opts)
	s.watches = newWatchBudget(opts.WatchBufferBytes, opts.WatchTotalBytes)
	s.noticeCtx, s.stopNotices = context.WithCancel(context.Background())
	var err error
	if s.grpcLis = opts.GRPCListener; s.grpcLis == nil {
		if s.grpcLis, err = net.Listen("tcp", opts.GRPCAddr); err != nil {
			return nil, fmt.Errorf("apiserver: listen gRPC on %s: %w", opts.GRPCAddr, err)
		}
	}
	if s.httpLis = opts.HTTPListener; s.httpLis == nil {
		if s.httpLis, err = net.Listen("tcp", opts.HTTPAddr); err != nil {
			_ = s.grpcLis.Close() // Releasing the port we just took; its error changes nothing.
			return nil, fmt.Errorf("apiserver: listen REST on %s: %w", opts.HTTPAddr, err)
		}
	}
	if opts.TLS == nil && !opts.Insecure {
		for _, l := range []net.Listener{s.grpcLis, s.httpLis} {
			if !onLoopback(l.Addr()) {
				_ = s.grpcLis.Close() // releasing the ports just taken; their errors change nothing
				_ = s.httpLis.Close()
				return nil, fmt.Errorf("apiserver: refusing to serve the API in plain text on %s, which other machines can reach: "+
					"give a certificate (--tls-cert, --tls-key), or --insecure on a trusted network or behind a proxy that ends TLS", l.Addr())
			}
		}
	}
	return s, nil
}

// onLoopback reports whether a listener's address is reachable from this
// machine only.
func onLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// GRPCAddr returns the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr returns the bound REST address.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// Run serves until ctx ends, then stops gracefully.
func (s *Server) Run(ctx context.Context) error {
	defer func() { // last: notices are best-effort, and the caller closes NATS after Run
		s.stopNotices()
		s.notices.Wait()
	}()
	// The REST gateway calls the gRPC server over a loopback listener of
	// its own, in plain text: the public gRPC listener may be TLS, whose
	// certificate names the API's public name, not 127.0.0.1. The calls
	// carry the caller's key, so they are authenticated like any other.
	gatewayLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("apiserver: gateway listener: %w", err)
	}
	defer gatewayLis.Close() // on a return before it serves; serving, the gRPC server's stop closes it

	// Who may call, then how much: a caller's limits count its principal.
	lim := newLimiter(s.opts.Limits, s.opts.Now)
	lim.gateway = gatewayLis.Addr().String()
	undecoded := &undecodedRequests{} // codec.go: refused after the permission
	unary := []grpc.UnaryServerInterceptor{lim.unary(), unaryErrors(s.log), s.unaryCatchUp(), unaryRequests()}
	stream := []grpc.StreamServerInterceptor{lim.stream(), streamErrors(s.log), s.streamCatchUp(), streamRequests(undecoded)}
	go s.opts.Tokens.Watch(ctx, apikeys.DefaultReloadEvery) // a keys file rotates without a restart
	if s.opts.JetStream != nil {
		go s.beats.run(ctx, s.opts.JetStream, s.log)
		go s.joinReplicas(ctx, s.opts.JetStream) // replicas.go: a slice of the candidates each
	}
	var auth *authenticator // nil: every caller may do everything
	if s.opts.Keys != nil || s.opts.OIDC != nil {
		if s.opts.Keys != nil {
			go s.opts.Keys.Watch(ctx, apikeys.DefaultReloadEvery) // rotation and revocation without a restart
		}
		if s.opts.OIDC != nil {
			go s.opts.OIDC.Watch(ctx, apikeys.DefaultReloadEvery) // the provider's keys rotate
		}
		auth = &authenticator{keys: s.opts.Keys, oidc: s.opts.OIDC, now: s.opts.Now, log: s.log, recheck: s.opts.AuthRecheck, gateway: lim.gateway}
		unary = append([]grpc.UnaryServerInterceptor{auth.unary()}, unary...)
		stream = append([]grpc.StreamServerInterceptor{auth.stream()}, stream...)
	} else {
		s.log.Warn("API authentication is off: every caller may do everything (give the API keys, --api-keys)")
	}
	s.auth = auth
	unary = append([]grpc.UnaryServerInterceptor{undecoded.unaryUndecoded()}, unary...)
	var creds []grpc.ServerOption
	var grpcTLS, restTLS *tls.Config
	if s.opts.TLS != nil {
		grpcTLS, restTLS = s.opts.TLS.Clone(), s.opts.TLS.Clone()
		grpcTLS.NextProtos = []string{"h2"} // gRPC clients insist on HTTP/2 by ALPN
		restTLS.NextProtos = []string{"h2", "http/1.1"}
		if s.opts.ClientCAs != nil {
			go s.opts.ClientCAs.File().Watch(ctx, apikeys.DefaultReloadEvery) // an authority added or retired without a restart
			grpcTLS, restTLS = s.opts.ClientCAs.Require(grpcTLS), s.opts.ClientCAs.Require(restTLS)
		}
		// TLS on the public listener only: the gateway's is loopback and
		// plain. gRPC's TLS credentials also see the client's certificate.
		creds = append(creds, grpc.Creds(newGatewayCreds(grpcTLS, lim.gateway)))
	}
	gs := grpc.NewServer(append(creds,
		grpc.ForceServerCodecV2(pooledCodec{newRequestCodec(undecoded)}), // pooledCodec: watchbudget.go
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(s.opts.TracerProvider),
			otelgrpc.WithMeterProvider(s.opts.MeterProvider),
			otelgrpc.WithPropagators(s.prop))),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: s.opts.Keepalive, Timeout: s.opts.Keepalive / 2}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)...)
	tetherv1.RegisterFleetServiceServer(gs, &fleetService{s: s})
	tetherv1.RegisterGameServerServiceServer(gs, &gameServerService{s: s})
	tetherv1.RegisterHostServiceServer(gs, &hostService{s: s})
	allocMetrics, err := newAllocationMetrics(s.opts.MeterProvider)
	if err != nil {
		return err
	}
	allocator := &allocationService{s: s, metrics: allocMetrics}
	tetherv1.RegisterAllocationServiceServer(gs, allocator)
	agonesallocation.RegisterAllocationServiceServer(gs, &agonesAllocationService{alloc: allocator, source: s.opts.Installation})
	tetherv1.RegisterGameSessionServiceServer(gs, &gameSessionService{s: s})
	tetherv1.RegisterHistoryServiceServer(gs, &historyService{s: s})
	tetherv1.RegisterProjectionServiceServer(gs, &projectionService{s: s})
	tetherv1.RegisterArchiveServiceServer(gs, &archiveService{s: s})
	// Server reflection: grpcurl and buf curl describe and call the API
	// without its protos (any authenticated caller, auth.go).
	reflection.Register(gs)

	conn, err := grpc.NewClient(gatewayLis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// A fixed window per stream: what the gateway holds of an answer
		// its REST client does not read (a watch) is bounded by it. The
		// default grows it to 16 MiB a stream (BDP estimation).
		grpc.WithInitialWindowSize(gatewayStreamWindow), grpc.WithInitialConnWindowSize(gatewayConnWindow),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(s.opts.TracerProvider),
			otelgrpc.WithMeterProvider(s.opts.MeterProvider),
			otelgrpc.WithPropagators(s.prop))))
	if err != nil {
		return fmt.Errorf("apiserver: gateway client: %w", err)
	}
	defer conn.Close()
	gw := s.newGateway()
	for _, register := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		tetherv1.RegisterFleetServiceHandler,
		tetherv1.RegisterGameServerServiceHandler,
		tetherv1.RegisterHostServiceHandler,
		tetherv1.RegisterAllocationServiceHandler,
		tetherv1.RegisterGameSessionServiceHandler,
		tetherv1.RegisterHistoryServiceHandler,
		tetherv1.RegisterProjectionServiceHandler,
		tetherv1.RegisterArchiveServiceHandler,
		agonesallocation.RegisterAllocationServiceHandler,
	} {
		if err := register(ctx, gw, conn); err != nil {
			return fmt.Errorf("apiserver: register gateway: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", guardBody(s.opts.MaxBodyBytes, s.opts.ReadRequestTimeout, auth, keepBody(gw)))
	// Agones' allocation API on its own path (docs/agones.md, "Allocation").
	mux.Handle("POST /gameserverallocation", guardBody(s.opts.MaxBodyBytes, s.opts.ReadRequestTimeout, auth, keepBody(gw)))
	mux.Handle("GET /openapi.json", auth.keyed(s.opts.OpenAPINeedsKey, openapi.Handler()))
	// The web console needs no key to load; its calls to /v1/ carry one.
	mux.Handle("GET /ui/", console.Handler())
	mux.Handle("GET /ui", console.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if s.opts.MetricsHandler != nil {
		mux.Handle("GET /metrics", auth.keyed(s.opts.MetricsNeedKey, s.opts.MetricsHandler))
	}
	// ReadTimeout bounds reading a whole request, its body included, so a
	// client sending slowly cannot hold a connection for ever; answers
	// have no write timeout, since events:watch streams for as long as its
	// client reads.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: min(10*time.Second, s.opts.ReadRequestTimeout), ReadTimeout: s.opts.ReadRequestTimeout, IdleTimeout: 120 * time.Second}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.opts.Freshness.Run(ctx) })
	g.Go(func() error { s.catchUp(ctx); return nil })
	if restTLS != nil {
		hs.TLSConfig = restTLS
	}
	for _, l := range []net.Listener{s.grpcLis, gatewayLis} {
		g.Go(func() error {
			if err := gs.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				return fmt.Errorf("apiserver: gRPC: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		serve := func() error { return hs.Serve(s.httpLis) }
		if s.opts.TLS != nil {
			serve = func() error { return hs.ServeTLS(s.httpLis, "", "") } // the certificate comes from TLSConfig
		}
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("apiserver: REST: %w", err)
		}
		return nil
	})
	s.log.Info("api server listening", "grpc", s.GRPCAddr(), "rest", s.HTTPAddr(), "tls", s.opts.TLS != nil, "replica", s.opts.ReplicaID)
	g.Go(func() error {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := hs.Shutdown(shutdownCtx)
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-shutdownCtx.Done():
			gs.Stop()
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("apiserver: REST shutdown: %w", err)
		}
		return nil
	})
	return g.Wait()
}
