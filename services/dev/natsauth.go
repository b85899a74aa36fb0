package dev

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/compose"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/connect"
)

// NATSAuthDir is where a dev stack with Options.Auth keeps its NATS
// credentials (natsauth): creds/admin.creds connects the `nats` CLI.
func NATSAuthDir(dataDir string) string { return filepath.Join(dataDir, "nats-auth") }

// natsIdentities connects each component to NATS as its own principal, as
// production does (docs/security.md), when the stack authenticates: then
// one host's agent cannot touch another's. Without authentication every
// component shares one connection.
type natsIdentities struct {
	url     string
	dir     string // "" without authentication
	log     *slog.Logger
	sharedJ jetstream.JetStream
	verify  *natsjs.Verifier // of signers, shared by every reader of the stack
	conns   []*nats.Conn
}

// env is base with principal's connection (a new one with its
// credentials, and its key signing the component's events) when the
// stack authenticates, or the shared connection.
func (n *natsIdentities) env(principal string, base compose.Env) (compose.Env, error) {
	if n.dir == "" {
		base.JetStream = n.sharedJ
		return base, nil
	}
	creds, err := natsauth.LoadCredentials(natsauth.CredsPath(n.dir, principal), n.log)
	if err != nil {
		return compose.Env{}, err
	}
	nc, js, err := connect.NATS(n.url, connect.NATSOptions{Name: "tether-dev-" + principal, Logger: n.log, Auth: creds.NATSOptions()})
	if err != nil {
		return compose.Env{}, fmt.Errorf("dev: connect as %s: %w", principal, err)
	}
	n.conns = append(n.conns, nc)
	base.JetStream, base.Signer = js, creds
	return base, nil
}

// close closes the connections as made.
func (n *natsIdentities) close() {
	for _, nc := range n.conns {
		nc.Close()
	}
}
