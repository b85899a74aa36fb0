// Package natstest starts embedded JetStream servers for tests
// (DESIGN.md §9: real NATS in integration tests).
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/dev/natsembed"
)

// Start runs a server on a free port with its store in t.TempDir(), and
// shuts it down when the test ends.
func Start(t testing.TB) *natsembed.Server {
	t.Helper()
	s, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Connect returns a client of s and its JetStream API, closed when the test
// ends (before the server stops).
func Connect(t testing.TB, s *natsembed.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
