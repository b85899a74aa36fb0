package compose

import (
	"context"
	"time"

	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/archiver"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/nats/commands"
)

// ControllerOptions configure a controller and the archiver it runs while
// it leads.
type ControllerOptions struct {
	// Controller holds the controller's own settings (its id, its
	// periods). Controller fills in, where left unset, what it is built
	// on: JetStream, Store (the event store on Env.JetStream), Commands,
	// Views and Freshness (Env.Pool), Logger and MeterProvider.
	Controller controller.Options
	// ArchiveDir, when set, has the leading controller archive ended
	// aggregates into segments at this location (archive.OpenStore);
	// Archive instead: a store already open (one the API reads too).
	ArchiveDir string
	Archive    archive.SegmentStore
	// Retention is how long an ended aggregate stays before it is
	// archived; default archiver.DefaultRetention.
	Retention time.Duration
	// ArchiveInterval is the time between archiving passes; default
	// archiver.DefaultInterval.
	ArchiveInterval time.Duration
	// Configure, if set, adjusts the controller's options last, once
	// everything above is filled in (the fleet simulator's periods).
	Configure func(*controller.Options)
}

// Controller builds a controller from o on env, with the views' freshness
// it reads when it built that itself: run the Group it returns.
func Controller(ctx context.Context, env Env, o ControllerOptions) (Group, error) {
	c := o.Controller
	var store *natsjs.Store
	if c.Store == nil {
		var err error
		if store, err = env.store(ctx, natsjs.Options{MeterProvider: env.MeterProvider}); err != nil {
			return nil, err
		}
		c.Store = store
	}
	if c.Commands == nil {
		bus, err := commands.New(ctx, env.JetStream)
		if err != nil {
			return nil, err
		}
		c.Commands = bus
	}
	if c.JetStream == nil {
		c.JetStream = env.JetStream
	}
	var group Group
	if c.Freshness == nil && env.Pool != nil {
		fresh := postgres.NewFreshness(env.Pool, env.logger())
		c.Freshness = fresh
		group = append(group, fresh)
	}
	if c.Views == nil && env.Pool != nil {
		c.Views = postgres.NewViews(env.Pool)
	}
	if c.Logger == nil {
		c.Logger = env.Logger
	}
	if c.MeterProvider == nil {
		c.MeterProvider = env.MeterProvider
	}
	segments := o.Archive
	if segments == nil && o.ArchiveDir != "" {
		var err error
		if segments, err = archive.OpenStore(ctx, o.ArchiveDir); err != nil {
			return nil, err
		}
	}
	if segments != nil {
		if store == nil {
			var err error
			if store, err = env.store(ctx, natsjs.Options{MeterProvider: env.MeterProvider}); err != nil {
				return nil, err
			}
		}
		arch, err := archiver.New(archiver.Options{Stream: store, Pool: env.Pool, Segments: segments, Retention: o.Retention,
			Logger: env.logger().With("component", "archiver"), MeterProvider: env.MeterProvider})
		if err != nil {
			return nil, err
		}
		interval := o.ArchiveInterval
		c.WhileLeading = func(ctx context.Context) error { return arch.Run(ctx, interval) }
	}
	if o.Configure != nil {
		o.Configure(&c)
	}
	ctl, err := controller.New(c)
	if err != nil {
		return nil, err
	}
	return append(group, ctl), nil
}
