package jsclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
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
	r := jsclient.NewReconnector(nc, 200*time.Millisecond, nil)

	wait.Holds(t, 500*time.Millisecond, "no reconnect on refusals", func() bool {
		r.Observe(time.Now(), jetstream.ErrStreamNotFound)
		return nc.Stats().Reconnects == 0
	})
	r.Observe(time.Now(), jetstream.ErrNoStreamResponse)
	r.Observe(time.Now(), nil) // an answer ends the failing stretch
	wait.Holds(t, 300*time.Millisecond, "no reconnect after a blip that ended", func() bool {
		return nc.Stats().Reconnects == 0
	})

	from := nc.ConnectedServerName()
	wait.For(t, 10*time.Second, "the connection to move after failing for longer than After", func() bool {
		r.Observe(time.Now(), jetstream.ErrNoStreamResponse)
		return nc.Stats().Reconnects == 1 && nc.IsConnected()
	})
	if to := nc.ConnectedServerName(); to == from {
		t.Logf("reconnected to the same server %s (picked at random among the cluster's)", to)
	}

	// A leader seen cut off from its peers moves the connection at once,
	// on the first observation (After here is far longer than the test).
	rc := jsclient.NewReconnector(nc, time.Hour, nil)
	before := nc.Stats().Reconnects
	rc.Observe(time.Now(), fmt.Errorf("probe: %w", jsclient.ErrCutOff))
	wait.For(t, 10*time.Second, "the connection to move on a leader cut off", func() bool {
		return nc.Stats().Reconnects == before+1 && nc.IsConnected()
	})

	// A stretch counts from when its first failed call began: one call
	// that waited longer than After before it failed moves the connection
	// on its own (the agents' heartbeat puts waited 5 s each, and moved
	// 7.5 s after a server was cut off instead of 6).
	rs := jsclient.NewReconnector(nc, time.Second, nil)
	before = nc.Stats().Reconnects
	if rs.Observe(time.Now().Add(-500*time.Millisecond), jetstream.ErrNoStreamResponse) {
		t.Fatal("moved after a call that failed for half of After")
	}
	// A call begun before the last answer failed on what came before it:
	// its stretch starts at the answer.
	ra := jsclient.NewReconnector(nc, time.Second, nil)
	ra.Observe(time.Now(), nil)
	if ra.Observe(time.Now().Add(-1100*time.Millisecond), context.DeadlineExceeded) {
		t.Fatal("moved on a call that began before the last answer")
	}
	if !jsclient.NewReconnector(nc, time.Second, nil).Observe(time.Now().Add(-1100*time.Millisecond), context.DeadlineExceeded) {
		t.Fatal("did not move after a call that failed for longer than After")
	}
	wait.For(t, 10*time.Second, "the connection to move after one long failed call", func() bool {
		return nc.Stats().Reconnects == before+1 && nc.IsConnected()
	})

	// Alone: nowhere to go.
	single := natstest.Start(t)
	lone, _ := natstest.Connect(t, single)
	rl := jsclient.NewReconnector(lone, 50*time.Millisecond, nil)
	wait.Holds(t, 300*time.Millisecond, "no reconnect of a connection to a single server", func() bool {
		rl.Observe(time.Now(), jetstream.ErrNoStreamResponse)
		return lone.Stats().Reconnects == 0
	})
}

// A stream's leader counts only the replicas it heard from lately: one cut
// off from the others (a minority partition) goes on answering stream info
// until it steps down, and the Reconnector's probe must see that as
// failing.
func TestQuorate(t *testing.T) {
	peer := func(name string, active time.Duration, offline bool) *jetstream.PeerInfo {
		return &jetstream.PeerInfo{Name: name, Current: true, Active: active, Offline: offline}
	}
	for _, tc := range []struct {
		name   string
		leader string
		peers  []*jetstream.PeerInfo
		ok     bool
	}{
		{"one replica", "n1", nil, true},
		{"both followers heard from", "n1", []*jetstream.PeerInfo{peer("n2", 300*time.Millisecond, false), peer("n3", time.Second, false)}, true},
		{"one follower silent: still a majority", "n1", []*jetstream.PeerInfo{peer("n2", 300*time.Millisecond, false), peer("n3", 9*time.Second, false)}, true},
		{"both followers silent: the leader is cut off", "n1", []*jetstream.PeerInfo{peer("n2", 6*time.Second, false), peer("n3", 9*time.Second, false)}, false},
		{"a follower offline, the other silent", "n1", []*jetstream.PeerInfo{peer("n2", 0, true), peer("n3", 5*time.Second, false)}, false},
		{"no leader", "", []*jetstream.PeerInfo{peer("n2", 0, false), peer("n3", 0, false)}, false},
		{"R5, two of four followers heard from", "n1", []*jetstream.PeerInfo{peer("n2", 0, false), peer("n3", 0, false), peer("n4", time.Minute, false), peer("n5", time.Minute, false)}, true},
		{"R5, one of four followers heard from", "n1", []*jetstream.PeerInfo{peer("n2", 0, false), peer("n3", time.Minute, false), peer("n4", time.Minute, false), peer("n5", time.Minute, false)}, false},
	} {
		info := &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: "TETHER_EVENTS"}}
		if tc.peers != nil || tc.leader == "" {
			info.Cluster = &jetstream.ClusterInfo{Leader: tc.leader, Replicas: tc.peers}
		}
		err := jsclient.Quorate(info, 4*time.Second)
		if (err == nil) != tc.ok {
			t.Errorf("%s: Quorate = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, events.ErrUnavailable) {
			t.Errorf("%s: %v does not wrap events.ErrUnavailable", tc.name, err)
		}
	}
}
