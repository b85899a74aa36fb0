// Package natstest starts embedded JetStream servers for tests:
// integration tests run against real NATS, not a fake.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/wait"
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

// StartCluster runs an n-node JetStream cluster on loopback, each node's
// store in a t.TempDir(), waits until it has a JetStream meta leader, and
// shuts every node down when the test ends. A test may Shutdown a node
// itself to lose it.
func StartCluster(t testing.TB, n int) []*natsembed.Server {
	t.Helper()
	base := freeport.Block(t, n)
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", base+i)
	}
	nodes := make([]*natsembed.Server, n)
	var g errgroup.Group // a node waits for routes to its peers: start them together
	for i := range n {
		g.Go(func() error {
			s, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), ReadyTimeout: 30 * time.Second, Cluster: &natsembed.Cluster{
				Name: "tether-test", ServerName: fmt.Sprintf("n%d", i+1), Port: base + i,
				Routes: append(slices.Clone(routes[:i]), routes[i+1:]...),
			}})
			nodes[i] = s
			return err
		})
	}
	err := g.Wait()
	for _, s := range nodes {
		if s != nil {
			t.Cleanup(s.Shutdown)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	nc, js := Connect(t, nodes[0])
	defer nc.Close()
	wait.For(t, 30*time.Second, fmt.Sprintf("the %d-node cluster's JetStream meta leader", n), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	// A leader is not enough: until it has every node's stats, an R3
	// stream is refused "no suitable peers for placement" (seen with
	// both cores busy).
	wait.For(t, 30*time.Second, fmt.Sprintf("the meta leader to see the %d nodes as placement peers", n), func() bool {
		return slices.ContainsFunc(nodes, func(s *natsembed.Server) bool { return s.PlacementPeers() >= n })
	})
	return nodes
}

// URLs returns the client URLs of servers, comma-separated, as a client
// that reconnects across a cluster takes them.
func URLs(servers []*natsembed.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Connect returns a client of s and its JetStream API, closed when the test
// ends (before the server stops).
func Connect(t testing.TB, s *natsembed.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectURL(t, s.ClientURL(), nats.Name(t.Name()))
}

// ConnectAll returns a client of a cluster's servers and its JetStream
// API, closed when the test ends: it reconnects to another server when
// the one it is on stops, for as long as the test runs.
func ConnectAll(t testing.TB, servers []*natsembed.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectURL(t, URLs(servers), nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
}

// ConnectURL returns a client of url (one server's, or a comma-separated
// list) with opts, and its JetStream API, closed when the test ends.
func ConnectURL(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
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

// BehindReplica makes a replica of stream that is behind it and answers
// its direct gets, as a replica catching up or cut off from the others
// does: a mirror of stream that holds only the messages of subject (at
// least one must be stored already) and serves direct gets for stream
// (MirrorDirect). Direct gets then go to stream or to the mirror at
// random; a read that must not be answered from the past asks the stream's
// leader instead. The mirror is deleted when the test ends.
func BehindReplica(t testing.TB, js jetstream.JetStream, stream, subject string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := stream + "_behind"
	mirror, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, MirrorDirect: true,
		Mirror: &jetstream.StreamSource{Name: stream, FilterSubject: subject},
	})
	if err != nil {
		t.Fatalf("natstest: a replica of %s behind it: %v", stream, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) &&
			!errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("natstest: delete %s: %v", name, err)
		}
	})
	// The mirror answers direct gets once it has mirrored a message.
	wait.For(t, 10*time.Second, "the mirror of "+stream+" holds a message of "+subject, func() bool {
		info, err := mirror.Info(ctx)
		return err == nil && info.State.Msgs > 0
	})
}

// StallConsumers pauses every consumer of stream on the server for an
// hour and returns how many there were: what their clients see of a
// consumer lost with a NATS node, or of a node that stopped delivering
// (nothing, and no error). Consumers made afterwards are not paused.
func StallConsumers(t testing.TB, js jetstream.JetStream, stream string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("natstest: stall the consumers of %s: %v", stream, err)
	}
	n := 0
	names := s.ConsumerNames(ctx)
	for name := range names.Name() {
		if _, err := s.PauseConsumer(ctx, name, time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("natstest: pause %s > %s: %v", stream, name, err)
		}
		n++
	}
	if err := names.Err(); err != nil {
		t.Fatalf("natstest: the consumers of %s: %v", stream, err)
	}
	return n
}
