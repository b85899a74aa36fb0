package compose

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/filewatch"
)

// NATSFiles name a process's NATS identity files; each may be empty.
type NATSFiles struct {
	// Creds is the credentials file of the component or host (tether
	// nats-auth init); its key also signs the events written.
	Creds string
	// Signers is the signers file: who may write which events.
	Signers string
	// CA is the authority (PEM) NATS servers' TLS certificates are
	// trusted by.
	CA string
}

// NATSIdentity is a process's NATS identity (its credentials) and the
// signers it verifies events with; either may be absent.
type NATSIdentity struct {
	creds   *natsauth.Credentials
	signers *natsauth.Signers
	verify  *natsjs.Verifier // of signers; one per process, its key cache shared
	ca      string
}

// LoadNATSIdentity loads the files. want, when not empty, is the
// principal the credentials must be: a component refuses another's.
func LoadNATSIdentity(files NATSFiles, want string, log *slog.Logger) (*NATSIdentity, error) {
	a := NATSIdentity{ca: files.CA}
	var err error
	if files.Creds != "" {
		if a.creds, err = natsauth.LoadCredentials(files.Creds, log); err != nil {
			return nil, err
		}
		if got := a.creds.Principal(); want != "" && got != want {
			return nil, fmt.Errorf("--nats-creds %s are %s's credentials, not %s's", files.Creds, got, want)
		}
		log.Info("NATS credentials loaded; events are signed", "principal", a.creds.Principal(), "public_key", a.creds.Current().PublicKey)
	}
	if files.Signers != "" {
		if a.signers, err = natsauth.LoadSigners(files.Signers, log); err != nil {
			return nil, err
		}
		a.verify = natsjs.NewVerifier(a.signers)
		log.Info("event writers are verified", "signers", files.Signers, "keys", a.signers.Len())
	}
	return &a, nil
}

// NATSOptions are the connection options of the credentials and the CA.
func (a *NATSIdentity) NATSOptions() []nats.Option {
	var opts []nats.Option
	if a.ca != "" {
		opts = append(opts, nats.RootCAs(a.ca))
	}
	if a.creds != nil {
		opts = append(opts, a.creds.NATSOptions()...)
	}
	return opts
}

// Signer signs events as the credentials' principal; nil without them.
func (a *NATSIdentity) Signer() natsjs.Signer {
	if a.creds == nil {
		return nil
	}
	return a.creds
}

// Verifier verifies event writers; nil without a signers file.
func (a *NATSIdentity) Verifier() *natsjs.Verifier { return a.verify }

// Watch reloads the credentials and signers files until ctx ends: new
// credentials reconnect nc with them (a rotation without a restart).
func (a *NATSIdentity) Watch(ctx context.Context, nc *nats.Conn, log *slog.Logger) {
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
