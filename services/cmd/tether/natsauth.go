package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/filewatch"
)

// natsAuth is a process's NATS identity (--nats-creds) and the signers it
// verifies events with (--nats-signers); either may be absent.
type natsAuth struct {
	creds   *natsauth.Credentials
	signers *natsauth.Signers
	verify  *natsjs.Verifier // of signers; one per process, its key cache shared
	ca      string           // --nats-ca
}

// natsAuth loads --nats-creds and --nats-signers. want, when not empty, is
// the principal the credentials must be: a component refuses another's.
func (g *global) natsAuth(log *slog.Logger, want string) (*natsAuth, error) {
	a := natsAuth{ca: g.natsCA}
	var err error
	if g.natsCreds != "" {
		if a.creds, err = natsauth.LoadCredentials(g.natsCreds, log); err != nil {
			return nil, err
		}
		if got := a.creds.Principal(); want != "" && got != want {
			return nil, fmt.Errorf("--nats-creds %s are %s's credentials, not %s's", g.natsCreds, got, want)
		}
		log.Info("NATS credentials loaded; events are signed", "principal", a.creds.Principal(), "public_key", a.creds.Current().PublicKey)
	}
	if g.natsSigners != "" {
		if a.signers, err = natsauth.LoadSigners(g.natsSigners, log); err != nil {
			return nil, err
		}
		a.verify = natsjs.NewVerifier(a.signers)
		log.Info("event writers are verified", "signers", g.natsSigners, "keys", a.signers.Len())
	}
	return &a, nil
}

// options are the NATS connection options of the credentials and the CA.
func (a *natsAuth) options() []nats.Option {
	var opts []nats.Option
	if a.ca != "" {
		opts = append(opts, nats.RootCAs(a.ca))
	}
	if a.creds != nil {
		opts = append(opts, a.creds.NATSOptions()...)
	}
	return opts
}

// storeOptions adds the signer and the verifier to an event store's options.
func (a *natsAuth) storeOptions(o natsjs.Options) natsjs.Options {
	if a.creds != nil {
		o.Signer = a.creds
	}
	o.Verifier = a.verifier()
	return o
}

// verifier verifies event writers, or is nil without --nats-signers.
func (a *natsAuth) verifier() *natsjs.Verifier { return a.verify }

// watch reloads the credentials and signers files until ctx ends: new
// credentials reconnect nc with them (a rotation without a restart).
func (a *natsAuth) watch(ctx context.Context, nc *nats.Conn, log *slog.Logger) {
	if a.signers != nil {
		go a.signers.Watch(ctx, filewatch.DefaultInterval)
	}
	if a.creds != nil {
		go a.creds.Watch(ctx, filewatch.DefaultInterval, func() {
			if err := nc.ForceReconnect(); err != nil {
				log.Error("reconnect with the rotated NATS credentials", "err", err)
			}
		})
	}
}
