package compose

import (
	"context"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/projector"
)

// ProjectorOptions configure a projector.
type ProjectorOptions struct {
	// Service holds the instance's own settings (its id, its batches).
	// Projector fills in, where Service.Projector left them unset, what
	// the projector is built on: Pool (Env.Pool), JetStream, Verifier and
	// telemetry; Service.Logger defaults to Env's.
	Service projector.Options
	// Alone runs the projector without the projector lease
	// (services/projector): the one projector of a process that runs
	// the whole system on its own NATS (`tether dev`) or of a test.
	// Otherwise it is an instance of the highly available service, which
	// first checks that the events stream is set up (`tether migrate`).
	Alone bool
}

// Projector builds a projector from o on env: the service
// (*projector.Service), or with o.Alone the bare projector
// (*postgres.Projector).
func Projector(ctx context.Context, env Env, o ProjectorOptions) (Runner, error) {
	s := o.Service
	p := &s.Projector
	if p.Pool == nil {
		p.Pool = env.Pool
	}
	if p.JetStream == nil {
		p.JetStream = env.JetStream
	}
	if p.Verifier == nil {
		p.Verifier = env.Verifier
	}
	if p.TracerProvider == nil {
		p.TracerProvider = env.TracerProvider
	}
	if p.MeterProvider == nil {
		p.MeterProvider = env.MeterProvider
	}
	if s.Logger == nil {
		s.Logger = env.Logger
	}
	if o.Alone {
		if p.Logger == nil {
			p.Logger = s.Logger
		}
		proj, err := postgres.NewProjector(*p)
		if err != nil {
			return nil, err
		}
		return proj, nil
	}
	// The services never create storage: without the stream this says to
	// run tether migrate.
	if _, err := natsjs.New(ctx, p.JetStream, natsjs.Options{Logger: env.logger()}); err != nil {
		return nil, err
	}
	svc, err := projector.New(s)
	if err != nil {
		return nil, err
	}
	return svc, nil
}
