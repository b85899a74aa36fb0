package natsjs_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// JetStream failing through a connection for longer than After moves the
// connection to another server of the cluster; refusals (an answer) and a
// short blip do not, nor does anything on a connection that knows no
// other server.
func TestReconnectorMovesAConnectionJetStreamFailsThrough(t *testing.T) {
	nodes := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(natstest.URLs(nodes))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	wait.For(t, 10*time.Second, "the client to learn the cluster's servers", func() bool { return len(nc.Servers()) == 3 })
	r := natsjs.NewReconnector(nc, 200*time.Millisecond, nil)

	wait.Holds(t, 500*time.Millisecond, "no reconnect on refusals", func() bool {
		r.Observe(jetstream.ErrStreamNotFound)
		return nc.Stats().Reconnects == 0
	})
	r.Observe(jetstream.ErrNoStreamResponse)
	r.Observe(nil) // an answer ends the failing stretch
	wait.Holds(t, 300*time.Millisecond, "no reconnect after a blip that ended", func() bool {
		return nc.Stats().Reconnects == 0
	})

	from := nc.ConnectedServerName()
	wait.For(t, 10*time.Second, "the connection to move after failing for longer than After", func() bool {
		r.Observe(jetstream.ErrNoStreamResponse)
		return nc.Stats().Reconnects == 1 && nc.IsConnected()
	})
	if to := nc.ConnectedServerName(); to == from {
		t.Logf("reconnected to the same server %s (picked at random among the cluster's)", to)
	}

	// Alone: nowhere to go.
	single := natstest.Start(t)
	lone, _ := natstest.Connect(t, single)
	rl := natsjs.NewReconnector(lone, 50*time.Millisecond, nil)
	wait.Holds(t, 300*time.Millisecond, "no reconnect of a connection to a single server", func() bool {
		rl.Observe(jetstream.ErrNoStreamResponse)
		return lone.Stats().Reconnects == 0
	})
}
