package compose

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
	"github.com/tetherhq/tether/services/platform/admin"
	"github.com/tetherhq/tether/services/platform/connect"
	"github.com/tetherhq/tether/services/platform/telemetry"
)

// Minority partitions: how often a control-plane process probes
// JetStream, and how long it may fail before the connection moves to
// another NATS server. A control-plane process moves after 3 s, so an API
// replica attached to a cut-off server answers again within a matchmaker's
// deadline; during an ordinary election (4-9 s) that moves a handful of
// connections once. Agents, thousands of them, wait 6 s.
const (
	jetStreamProbeEvery       = time.Second
	jetStreamFailingMove      = 3 * time.Second
	agentJetStreamFailingMove = 6 * time.Second
)

// ProcessOptions say what the process of one service connects to.
type ProcessOptions struct {
	// Name is the service's telemetry name ("tether-apiserver"), and its
	// NATS connection's unless ConnName is set.
	Name     string
	ConnName string
	// Logger is the process's; default discards.
	Logger *slog.Logger
	// NATSURL is the NATS server (or servers, comma-separated).
	NATSURL string
	// NATS are the identity files; Principal, when set, is whose
	// credentials they must be.
	NATS      NATSFiles
	Principal string
	// DatabaseURL is the PostgreSQL database, for a service that reads
	// the views; empty: none.
	DatabaseURL string
	// SelfObserved: the component reports its own regular JetStream calls
	// (the agent's heartbeats, ObserveJetStream), so no probe runs and
	// the connection moves after 6 s of failures instead of 3 s.
	SelfObserved bool
}

// Process is one service's process: its telemetry, its NATS identity and
// connection, its PostgreSQL pool, and what moves the connection off a
// NATS server cut off from JetStream's quorum.
type Process struct {
	opts      ProcessOptions
	log       *slog.Logger
	tel       *telemetry.Providers
	id        *NATSIdentity
	nc        *nats.Conn
	js        jetstream.JetStream
	pool      *pgxpool.Pool
	reconnect *jsclient.Reconnector
}

// Open connects a service's process; Close releases what it opened.
func Open(ctx context.Context, o ProcessOptions) (*Process, error) {
	p := &Process{opts: o, log: o.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if p.tel, err = telemetry.New(telemetry.Options{ServiceName: o.Name}); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	if p.id, err = LoadNATSIdentity(o.NATS, o.Principal, p.log); err != nil {
		return nil, err
	}
	if p.nc, p.js, err = connect.NATS(o.NATSURL, connect.NATSOptions{Name: cmp.Or(o.ConnName, o.Name), Logger: p.log, Auth: p.id.NATSOptions()}); err != nil {
		return nil, err
	}
	p.id.Watch(ctx, p.nc, p.log)
	if o.DatabaseURL != "" {
		if p.pool, err = connect.Postgres(ctx, o.DatabaseURL, 20); err != nil {
			return nil, err
		}
	}
	move := jetStreamFailingMove
	if o.SelfObserved {
		move = agentJetStreamFailingMove
	}
	p.reconnect = jsclient.NewReconnector(p.nc, move, p.log)
	ok = true
	return p, nil
}

// Env is what the process's component is built on.
func (p *Process) Env() Env {
	return Env{
		Logger: p.log, JetStream: p.js, Signer: p.id.Signer(), Verifier: p.id.Verifier(), Pool: p.pool,
		TracerProvider: p.tel.TracerProvider, MeterProvider: p.tel.MeterProvider, MetricsHandler: p.tel.MetricsHandler,
	}
}

// ObserveJetStream is told the outcome of the component's own regular
// JetStream calls (ProcessOptions.SelfObserved: the agent's
// ObserveJetStream), and moves the connection when they keep failing.
func (p *Process) ObserveJetStream(began time.Time, err error) (moved bool) {
	return p.reconnect.Observe(began, err)
}

// Serve runs the component until ctx ends, probing JetStream unless the
// component observes its own calls, with the admin endpoints (/healthz,
// /readyz, /metrics) on adminAddr unless it is empty.
func (p *Process) Serve(ctx context.Context, r Runner, adminAddr string) error {
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return r.Run(ctx) })
	if !p.opts.SelfObserved {
		eg.Go(func() error { p.reconnect.Watch(ctx, p.js, jetStreamProbeEvery); return nil })
	}
	if adminAddr != "" {
		opts := admin.Options{Metrics: p.tel.MetricsHandler, Logger: p.log, Ready: func() error { return p.ready(r) }}
		if rs, ok := r.(interface{ Status() string }); ok {
			opts.Status = rs.Status
		}
		eg.Go(func() error { return admin.Serve(ctx, adminAddr, opts) })
	}
	return eg.Wait()
}

// ready is the service's readiness: connected to NATS, PostgreSQL
// answering (if it uses it), and whatever the component itself reports
// (its lease, its views).
func (p *Process) ready(r Runner) error {
	if !p.nc.IsConnected() {
		return fmt.Errorf("NATS %s", strings.ToLower(p.nc.Status().String()))
	}
	if p.pool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.pool.Ping(ctx); err != nil {
			return fmt.Errorf("PostgreSQL: %w", err)
		}
	}
	if rr, ok := r.(interface{ Ready() error }); ok {
		return rr.Ready()
	}
	return nil
}

// Close closes the pool and the connection, and flushes telemetry.
func (p *Process) Close() {
	if p.pool != nil {
		p.pool.Close()
	}
	if p.nc != nil {
		p.nc.Close()
	}
	ShutdownTelemetry(p.log, p.tel)
}

// ShutdownTelemetry flushes and stops a process's telemetry, within 5 s.
func ShutdownTelemetry(log *slog.Logger, tel *telemetry.Providers) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		log.Warn("telemetry shutdown", "err", err)
	}
}
