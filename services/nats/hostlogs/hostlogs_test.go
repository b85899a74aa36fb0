package hostlogs_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	"github.com/tetherhq/tether/services/nats/hostlogs"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// A read of a host nobody answers for is ErrAgentUnavailable at once
// (NATS says there are no responders), not at its deadline.
func TestReadOfAHostWithoutAgent(t *testing.T) {
	nc, _ := natstest.Connect(t, natstest.Start(t))
	start := time.Now()
	_, err := hostlogs.NewClient(nc).Read(context.Background(), "h1", &agentv1.LogsRequest{GameServer: "fleets/f/gameServers/g"})
	if !errors.Is(err, hostlogs.ErrAgentUnavailable) || time.Since(start) > hostlogs.AnswerTimeout {
		t.Fatalf("read without an agent: %v after %s, want ErrAgentUnavailable at once", err, time.Since(start))
	}
}

// Serve answers each request with its handler, concurrently, at most
// inFlight at once: beyond, BUSY at once; it stops with its context,
// after the answers in progress.
func TestServeAnswersBoundedAndStops(t *testing.T) {
	srv := natstest.Start(t)
	agentConn, _ := natstest.Connect(t, srv)
	apiConn, _ := natstest.Connect(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	entered := make(chan string, 4)
	release := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- hostlogs.Serve(ctx, agentConn, "h1", 1, func(_ context.Context, req *agentv1.LogsRequest) *agentv1.LogsReply {
			entered <- req.GetGameServer()
			<-release
			return &agentv1.LogsReply{Lines: []*agentv1.LogLine{{Text: []byte("for " + req.GetGameServer())}}, CaughtUp: true}
		}, slog.New(slog.DiscardHandler))
	}()
	client := hostlogs.NewClient(apiConn)
	read := func(name string) (*agentv1.LogsReply, error) {
		return client.Read(context.Background(), "h1", &agentv1.LogsRequest{GameServer: name})
	}
	// Until the subscription is in place, a read finds nobody.
	first := make(chan *agentv1.LogsReply, 1)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
			reply, err := read("fleets/f/gameServers/a")
			if err == nil {
				first <- reply
				return
			}
			if !errors.Is(err, hostlogs.ErrAgentUnavailable) || time.Now().After(deadline) {
				t.Error(err)
				first <- nil
				return
			}
		}
	}()
	if got := <-entered; got != "fleets/f/gameServers/a" {
		t.Fatalf("the handler got %q", got)
	}
	busy, err := read("fleets/f/gameServers/b")
	if err != nil || busy.GetError() != agentv1.LogsReply_BUSY || busy.GetErrorMessage() == "" {
		t.Fatalf("a read beyond the bound: %v %v, want BUSY", busy, err)
	}
	close(release)
	if reply := <-first; reply == nil || string(reply.GetLines()[0].GetText()) != "for fleets/f/gameServers/a" {
		t.Fatalf("the first read's answer: %v", reply)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not stop with its context")
	}
	if _, err := read("fleets/f/gameServers/c"); !errors.Is(err, hostlogs.ErrAgentUnavailable) {
		t.Fatalf("a read once Serve stopped: %v, want ErrAgentUnavailable", err)
	}
}
