// Package natsstack starts, inside a test, what every component stands
// on: embedded NATS JetStream (one server, or a cluster) with every stream
// and bucket as `tether migrate` sets them up, and the event store on it.
//
// It is the base of services/testkit/stack, and on its own the fixture of
// the tests that may not import the composition root (services/compose,
// which the stack builds its API and projector with): the internal tests
// of the components compose builds, which would import themselves.
package natsstack

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// Options say how the NATS of a test is made.
type Options struct {
	// Nodes runs NATS as a cluster of this many embedded nodes (3 or 5),
	// with every stream and bucket replicated on all; 0 or 1: one server.
	Nodes int
	// LeaseTTL is the lease bucket's TTL; default 1 s, so that a test's
	// standby takes over from a silent leader quickly.
	LeaseTTL time.Duration
}

// Base is what Start started; it stops when the test ends.
type Base struct {
	// NATS is the embedded server (the first node of a cluster).
	NATS *natsembed.Server
	// NATSNodes are the cluster's nodes (Options.Nodes > 1); nil otherwise.
	NATSNodes []*natsembed.Server
	// Conn and JS are a client of the server (of every node of a cluster,
	// reconnecting to another when one stops).
	Conn *nats.Conn
	JS   jetstream.JetStream
	// Store is the event store on JS.
	Store *natsjs.Store
}

// Start starts NATS with every stream and bucket, and the event store.
func Start(t testing.TB, o Options) *Base {
	t.Helper()
	b := &Base{}
	if o.Nodes > 1 {
		b.NATSNodes = natstest.StartCluster(t, o.Nodes)
		b.NATS = b.NATSNodes[0]
		b.Conn, b.JS = natstest.ConnectAll(t, b.NATSNodes)
	} else {
		b.NATS = natstest.Start(t)
		b.Conn, b.JS = natstest.Connect(t, b.NATS)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// What `tether migrate` does: every stream and bucket.
	if err := migrate.NATS(ctx, b.JS, migrate.Options{Replicas: max(o.Nodes, 1), LeaseTTL: cmp.Or(o.LeaseTTL, time.Second)}); err != nil {
		t.Fatal(err)
	}
	var err error
	if b.Store, err = natsjs.New(ctx, b.JS, natsjs.Options{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// BehindFleet is the one fleet whose events the replica of BehindReplica
// holds.
const BehindFleet = "fleets/behind"

// BehindReplica gives the events stream a replica behind it that answers
// about half of its direct gets (natstest.BehindReplica), as a replica
// catching up, or cut off from the others, does. It holds the events of
// BehindFleet alone (created here), so of every other aggregate it says
// there is nothing: a read that must not be answered from the past
// reads the stream's leader.
func (b *Base) BehindReplica(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created := events.New(BehindFleet, time.Now(), &eventsv1.FleetCreated{})
	created.Producer = "apiservers/behind"
	if _, err := b.Store.Append(ctx, events.MustSubject(BehindFleet), 0, created); err != nil {
		t.Fatalf("natsstack: the behind replica's fleet: %v", err)
	}
	natstest.BehindReplica(t, b.JS, events.StreamName, events.MustSubject(BehindFleet))
}
