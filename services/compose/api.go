package compose

import (
	"context"
	"errors"

	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/oidcauth"
	"github.com/tetherhq/tether/services/platform/tlsfiles"
)

// APIOptions configure an API server: its own settings, and the files
// and places its authentication and archive reads come from.
type APIOptions struct {
	// Server holds the server's own settings (addresses or listeners,
	// limits, watches, player tokens, …). API fills in, where left unset,
	// what the server is built on: Store and Watch (the event store on
	// Env.JetStream), Commands (the agents' command stream), JetStream,
	// ProjectionPool, Views and Freshness (Env.Pool), Verifier, Logger,
	// telemetry and MetricsHandler.
	Server apiserver.Options
	// TLSCert and TLSKey, both or neither, serve the API over TLS with
	// the certificate in these files, re-read when they change.
	TLSCert, TLSKey string
	// ClientCA verifies client certificates against these authorities
	// (mutual TLS), re-read when the file changes.
	ClientCA string
	// OIDC, when its Issuer is set, accepts the identity provider's
	// OpenID Connect tokens (oidcauth); its Logger defaults to Env's.
	OIDC oidcauth.Options
	// APIKeysFile authenticates callers with the keys of this file,
	// re-read when it changes (Server.Keys instead: keys already loaded).
	APIKeysFile string
	// ArchiveDir reads archived histories from the segments at this
	// location (archive.OpenStore; Server.Archive instead: a store
	// already open).
	ArchiveDir string
}

// API builds an API server from o on env.
func API(ctx context.Context, env Env, o APIOptions) (*apiserver.Server, error) {
	log := env.logger()
	s := o.Server
	if s.Store == nil && env.JetStream != nil {
		store, err := env.store(ctx, natsjs.Options{TracerProvider: env.TracerProvider, MeterProvider: env.MeterProvider})
		if err != nil {
			return nil, err
		}
		s.Store = store
		if s.Watch == nil {
			s.Watch = store
		}
	}
	if s.Commands == nil && env.JetStream != nil {
		bus, err := commands.New(ctx, env.JetStream)
		if err != nil {
			return nil, err
		}
		s.Commands = bus
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("compose: a TLS certificate needs its key, and a key its certificate")
	}
	if o.TLSCert != "" {
		certs, err := tlsfiles.New(o.TLSCert, o.TLSKey, log)
		if err != nil {
			return nil, err
		}
		s.TLS = certs.Config()
	}
	if o.ClientCA != "" {
		cas, err := tlsfiles.LoadClientCAs(o.ClientCA, log)
		if err != nil {
			return nil, err
		}
		s.ClientCAs = cas
	}
	if o.OIDC.Issuer != "" {
		oidcOpts := o.OIDC
		if oidcOpts.Logger == nil {
			oidcOpts.Logger = log
		}
		v, err := oidcauth.New(ctx, oidcOpts)
		if err != nil {
			return nil, err
		}
		s.OIDC = v
		log.Info("API callers may authenticate with OIDC tokens", "issuer", oidcOpts.Issuer, "audience", oidcOpts.Audience)
	}
	if o.APIKeysFile != "" {
		keys, err := apikeys.Load(o.APIKeysFile, log)
		if err != nil {
			return nil, err
		}
		s.Keys = keys
		log.Info("API callers authenticate with the keys of a file", "file", o.APIKeysFile, "keys", keys.Len())
	}
	if o.ArchiveDir != "" {
		segments, err := archive.OpenStore(ctx, o.ArchiveDir)
		if err != nil {
			return nil, err
		}
		s.Archive = segments
	}
	if s.JetStream == nil {
		s.JetStream = env.JetStream
	}
	if s.ProjectionPool == nil {
		s.ProjectionPool = env.Pool
	}
	if s.Verifier == nil {
		s.Verifier = env.Verifier
	}
	if env.Pool != nil {
		if s.Views == nil {
			s.Views = postgres.NewViews(env.Pool)
		}
		if s.Freshness == nil {
			s.Freshness = postgres.NewFreshness(env.Pool, log)
		}
	}
	if s.Logger == nil {
		s.Logger = env.Logger
	}
	if s.TracerProvider == nil {
		s.TracerProvider = env.TracerProvider
	}
	if s.MeterProvider == nil {
		s.MeterProvider = env.MeterProvider
	}
	if s.MetricsHandler == nil {
		s.MetricsHandler = env.MetricsHandler
	}
	return apiserver.New(s)
}
