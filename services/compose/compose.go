// Package compose is Tether's composition root: the one package that
// builds the components (the projector, the API server, the controller
// with its archiver, the host agent) from their options and what they run
// on, and the plumbing a service's process shares (its NATS identity and
// connection, the PostgreSQL pool, telemetry, the admin endpoints).
//
// `tether`'s service subcommands (services/cmd/tether), `tether dev`
// (services/dev: a preset of the same builders, with embedded NATS, a
// throwaway PostgreSQL and keys of its own), the test fixture
// (services/testkit/stack) and the fleet simulator (services/tools/sim)
// all build their components here, so a dependency a component gains is
// wired in one place; TestOnlyComposeConstructsComponents keeps it so.
//
// Each builder takes the component's own options and fills in, where the
// caller left them unset, what the component is built on, from an Env.
package compose

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/events/natsjs"
)

// Env is what a component is built on: the NATS connection of the
// principal it runs as, the signatures of the events it writes and reads,
// the projection database and telemetry. Nil fields are left out.
type Env struct {
	// Logger is the process's: the event store's, and the component's
	// unless its options give one; default discards.
	Logger *slog.Logger
	// JetStream is the connection of the principal the component runs as.
	JetStream jetstream.JetStream
	// Signer signs the events the component writes; nil: unsigned.
	Signer natsjs.Signer
	// Verifier judges who wrote each event the component reads; nil:
	// every writer is taken at its word.
	Verifier *natsjs.Verifier
	// Pool is the projection database's pool (none for an agent).
	Pool *pgxpool.Pool
	// TracerProvider and MeterProvider are the process's telemetry.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// MetricsHandler serves the process's metrics (the API's /metrics).
	MetricsHandler http.Handler
}

// logger is the Env's logger, or one that discards.
func (e Env) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

// store opens the event store on the Env's connection, signing as its
// principal and judging writers with its verifier.
func (e Env) store(ctx context.Context, o natsjs.Options) (*natsjs.Store, error) {
	if e.Signer != nil {
		o.Signer = e.Signer
	}
	o.Verifier = e.Verifier
	if o.Logger == nil {
		o.Logger = e.logger()
	}
	return natsjs.New(ctx, e.JetStream, o)
}

// Runner is a built component: Run serves until ctx ends. Most also say
// whether they are ready (Ready() error) and what they are doing
// (Status() string), which the admin endpoints serve.
type Runner interface {
	Run(ctx context.Context) error
}

// Group runs several components together as one: the controller and the
// views' freshness it reads, say.
type Group []Runner

// Run runs every component until ctx ends or one fails.
func (rs Group) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, r := range rs {
		g.Go(func() error { return r.Run(ctx) })
	}
	return g.Wait()
}

// Ready is the first reason one of the components is not ready, or nil.
func (rs Group) Ready() error {
	for _, r := range rs {
		if rr, ok := r.(interface{ Ready() error }); ok {
			if err := rr.Ready(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Status joins the components' statuses.
func (rs Group) Status() string {
	var out []string
	for _, r := range rs {
		if rr, ok := r.(interface{ Status() string }); ok {
			out = append(out, rr.Status())
		}
	}
	return strings.Join(out, "; ")
}
