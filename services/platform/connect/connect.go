// Package connect opens Tether's connections to its two dependencies, NATS
// JetStream and PostgreSQL, with the keepalive and pool defaults every
// service shares.
package connect

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/migrations"
)

// NATSOptions configure a NATS connection.
type NATSOptions struct {
	// Name identifies the client to the server, e.g. "tether-apiserver".
	Name string
	// PingInterval is the application-level keepalive: a PING this often,
	// well below load-balancer idle timeouts (default 20s; docs/architecture.md,
	// "The failures it is built against", 2).
	PingInterval time.Duration
	// MaxPingsOutstanding unanswered PINGs mark the connection dead (default 3).
	MaxPingsOutstanding int
	// Logger receives connection state changes.
	Logger *slog.Logger
	// Auth are more options: credentials (natsauth.Credentials.NATSOptions).
	Auth []nats.Option
}

// NATS connects to url and returns the connection and its JetStream
// context. It reconnects forever; state changes are logged.
func NATS(url string, opts NATSOptions) (*nats.Conn, jetstream.JetStream, error) {
	if opts.PingInterval <= 0 {
		opts.PingInterval = 20 * time.Second
	}
	if opts.MaxPingsOutstanding <= 0 {
		opts.MaxPingsOutstanding = 3
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(url, append([]nats.Option{
		nats.Name(opts.Name),
		nats.PingInterval(opts.PingInterval),
		nats.MaxPingsOutstanding(opts.MaxPingsOutstanding),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		// Without an error the process closed the connection itself (a
		// clean stop): no news, where a lost connection is.
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				log.Debug("nats connection closed")
				return
			}
			log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
		}),
		// Asynchronous errors, such as a publish or subscription the
		// credentials do not permit: a misconfiguration, or a probe.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("nats error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("nats error", "err", err)
		}),
	}, opts.Auth...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", Redact(url), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// Redact returns a URL, or a comma-separated list of URLs, with their
// secrets replaced by "xxxxx", for logs, errors and banners: passwords,
// a NATS URL's token (nats://TOKEN@host, where a user name would be) and
// a password query parameter. Text that is no URL is returned as it is.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.Scheme == "" {
			continue
		}
		changed := false
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User, changed = url.UserPassword(u.User.Username(), "xxxxx"), true
			} else if natsScheme[u.Scheme] {
				u.User, changed = url.User("xxxxx"), true
			}
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery, changed = q.Encode(), true
		}
		if changed {
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// natsScheme lists the URL schemes of NATS, whose user part alone is a
// token.
var natsScheme = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}

// Postgres checks that the database at url has every migration of this
// binary (migrations.Check: `tether migrate` applies them) and returns a
// pool over it. TLS and credentials come from the URL (sslmode,
// sslrootcert, sslcert, sslkey, password), as libpq reads them.
func Postgres(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	if err := migrations.Check(ctx, url); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping PostgreSQL: %w", err)
	}
	return pool, nil
}
