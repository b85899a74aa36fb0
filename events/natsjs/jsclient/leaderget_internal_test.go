package jsclient

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// replicated starts a cluster of three with a stream T of three replicas
// holding one message on t.a, and returns the nodes, the stream's leader
// and a client connected to a node that is not the leader.
func replicated(t *testing.T) ([]*natsembed.Server, string, *nats.Conn) {
	t.Helper()
	ctx := t.Context()
	nodes := natstest.StartCluster(t, 3)
	_, js := natstest.Connect(t, nodes[0])
	// Until every node has joined the meta group, there are no three
	// peers to place the stream on.
	wait.Until(t, 20*time.Second, "a stream of three replicas", func() error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
		return err
	})
	if _, err := js.Publish(ctx, "t.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var leader string
	wait.For(t, 10*time.Second, "the stream to have a leader", func() bool {
		s, err := js.Stream(ctx, "T")
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err == nil && info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		return leader != ""
	})
	for _, n := range nodes {
		if n.Name() != leader {
			nc, _ := natstest.Connect(t, n)
			return nodes, leader, nc
		}
	}
	t.Fatal("no node but the leader")
	return nil, "", nil
}

// runBounded runs f and fails the test if it has not returned within
// limit: a read that never returns must fail the test, not hang it.
func runBounded(t *testing.T, limit time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("still waiting after %s", limit)
	}
}

// A leader read during an election (the leader's node stopped) waits for
// the next leader, as an append does, instead of failing at once or
// waiting for ever on a request no node answers; the caller set no
// deadline.
func TestLeaderGetWaitsOutAnElection(t *testing.T) {
	nodes, leader, nc := replicated(t)
	for _, n := range nodes {
		if n.Name() == leader {
			n.Shutdown()
		}
	}
	runBounded(t, 30*time.Second, func() {
		m, found, err := LeaderGet(context.Background(), nc, "T", MsgRequest{LastFor: "t.a"})
		if err != nil || !found || string(m.Data) != "x" {
			t.Errorf("leader read during an election: %q found %v, %v; want the message", m.Data, found, err)
		}
	})
}

// With no leader to come (two nodes of three stopped: no quorum), a leader
// read gives up after its wait with an error a caller can tell from a
// refusal (events.ErrUnavailable), even when the caller set no deadline.
func TestLeaderGetGivesUpWithoutALeader(t *testing.T) {
	nodes, _, nc := replicated(t)
	var kept string // the node nc is connected to, left running
	for _, n := range nodes {
		if n.ClientURL() == nc.ConnectedUrl() {
			kept = n.Name()
		}
	}
	// The stream's leader may have moved to the kept node since replicated
	// asked (a CI run under load saw it), and a leader cut off from its
	// peers goes on answering (for more than 30 s, tried): the kept node
	// must be a follower. Its leader is stopped first, then the other node,
	// before the two left could elect another.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	wait.Until(t, 20*time.Second, "a leader of T other than the node kept", func() error {
		s, err := js.Stream(t.Context(), "T")
		if err != nil {
			return err
		}
		if c := s.CachedInfo().Cluster; c != nil {
			leader = c.Leader
		}
		switch leader {
		case "":
			return errors.New("no leader yet")
		case kept:
			if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.T", nil, 2*time.Second); err != nil {
				return fmt.Errorf("the kept node leads, and its step-down: %w", err)
			}
			return errors.New("the kept node led; it was asked to step down")
		}
		return nil
	})
	for _, n := range nodes {
		if n.Name() == leader {
			n.Shutdown()
		}
	}
	for _, n := range nodes {
		if n.Name() != kept && n.Name() != leader {
			n.Shutdown()
		}
	}
	// The two left may still have elected the kept node between the two
	// stops (make test-short, under load, read the message from it). Alone,
	// it leads on until asked to step down, and then cannot be elected
	// again: a leader read is then the one with no leader to come.
	wait.Until(t, 20*time.Second, "no leader of T", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "T")
		if err != nil {
			return nil // no one answers for T
		}
		if c := s.CachedInfo().Cluster; c != nil && c.Leader != "" {
			if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.T", nil, 2*time.Second); err != nil {
				return fmt.Errorf("%s leads T alone, and its step-down: %w", c.Leader, err)
			}
			return fmt.Errorf("%s led T alone; it was asked to step down", c.Leader)
		}
		return nil
	})
	runBounded(t, 30*time.Second, func() {
		_, _, err := LeaderGetWaiting(context.Background(), nc, "T", MsgRequest{LastFor: "t.a"}, 3*time.Second)
		if !errors.Is(err, events.ErrUnavailable) {
			t.Errorf("leader read without a leader: %v, want events.ErrUnavailable", err)
		}
	})
}
