package natsauth

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/tetherhq/tether/services/platform/filewatch"
)

// Creds are one user's credentials: its JWT, its key and who it is.
type Creds struct {
	// Principal is the JWT's name: "apiserver", "hosts/h1".
	Principal string
	// PublicKey is the user's public nkey ("U…").
	PublicKey string
	// JWT is the user JWT, signed by the account.
	JWT string
	// Key is the user's key pair (its seed): it authenticates the
	// connection and signs events.
	Key nkeys.KeyPair
}

// ReadCreds reads a credentials file.
func ReadCreds(path string) (Creds, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Creds{}, fmt.Errorf("natsauth: %w", err)
	}
	c, err := parseCreds(data)
	if err != nil {
		return Creds{}, fmt.Errorf("natsauth: %s: %w", path, err)
	}
	return c, nil
}

// parseCreds decodes the content of a credentials file.
func parseCreds(data []byte) (Creds, error) {
	token, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return Creds{}, fmt.Errorf("no user JWT: %w", err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return Creds{}, fmt.Errorf("user JWT: %w", err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(data)
	if err != nil {
		return Creds{}, fmt.Errorf("no user seed: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return Creds{}, err
	}
	if pub != uc.Subject {
		return Creds{}, fmt.Errorf("the seed's key %s is not the JWT's user %s", pub, uc.Subject)
	}
	if err := CheckPrincipal(uc.Name); err != nil {
		return Creds{}, err
	}
	return Creds{Principal: uc.Name, PublicKey: pub, JWT: token, Key: kp}, nil
}

// Credentials are a component's credentials file, kept current: when the
// file changes (a rotation), Watch loads it and calls its onChange, which
// reconnects with them. They give the NATS connection options and sign
// events (natsjs.Signer) with the current key. A file that names another
// principal is refused: a component's identity does not change under it.
// Safe for concurrent use.
type Credentials struct {
	file *filewatch.File[Creds]
}

// LoadCredentials reads the credentials file at path.
func LoadCredentials(path string, log *slog.Logger) (*Credentials, error) {
	first, err := ReadCreds(path)
	if err != nil {
		return nil, err
	}
	parse := func(data []byte) (Creds, error) {
		c, err := parseCreds(data)
		if err == nil && c.Principal != first.Principal {
			return Creds{}, fmt.Errorf("the file now names principal %s, not %s", c.Principal, first.Principal)
		}
		return c, err
	}
	f, err := filewatch.Load(path, "NATS credentials", parse, log)
	if err != nil {
		return nil, fmt.Errorf("natsauth: %w", err)
	}
	return &Credentials{file: f}, nil
}

// Current returns the credentials in force.
func (c *Credentials) Current() Creds { return c.file.Value() }

// Principal is who the credentials are.
func (c *Credentials) Principal() string { return c.file.Value().Principal }

// NATSOptions are the connection options that authenticate with the
// credentials in force at each (re)connection, and keep replies under the
// principal's inbox prefix.
func (c *Credentials) NATSOptions() []nats.Option {
	return []nats.Option{
		nats.UserJWT(func() (string, error) { return c.file.Value().JWT, nil },
			func(nonce []byte) ([]byte, error) { return c.file.Value().Key.Sign(nonce) }),
		nats.CustomInboxPrefix(InboxPrefix(c.Principal())),
	}
}

// Sign implements natsjs.Signer with the key in force.
func (c *Credentials) Sign(content []byte) (string, []byte, error) {
	cur := c.file.Value()
	sig, err := cur.Key.Sign(content)
	return cur.PublicKey, sig, err
}

// Reload re-reads the file now (Watch does it every interval).
func (c *Credentials) Reload() (changed bool, err error) { return c.file.Reload() }

// Watch reloads the file every interval until ctx ends, and calls
// onChange after each change (the caller's nats.Conn.ForceReconnect: the
// connection moves to the new key, so the old one can be revoked).
func (c *Credentials) Watch(ctx context.Context, interval time.Duration, onChange func()) {
	c.file.OnChange(func(Creds) { onChange() })
	c.file.Watch(ctx, interval)
}
