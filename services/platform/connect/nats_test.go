package connect_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/services/platform/connect"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// A connection the process closes itself logs no warning (a clean stop
// of tether dev logged one per component, "nats disconnected err=<nil>");
// one the server drops does.
func TestNATSWarnsOnlyOfALostConnection(t *testing.T) {
	srv := natstest.Start(t)
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// The client calls its closed handler after its disconnect handler,
	// from the same queue: once it has, the disconnect has been logged.
	closed := make(chan struct{})
	nc, _, err := connect.NATS(srv.ClientURL(), connect.NATSOptions{Name: "closed-by-us", Logger: log,
		Auth: []nats.Option{nats.ClosedHandler(func(*nats.Conn) { close(closed) })}})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection's closed handler was not called")
	}
	if got := logs.String(); strings.Contains(got, "WARN") {
		t.Errorf("closing the connection logged a warning:\n%s", got)
	}

	lost, _, err := connect.NATS(srv.ClientURL(), connect.NATSOptions{Name: "lost", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer lost.Close()
	srv.Shutdown()
	wait.For(t, 10*time.Second, "a warning that the connection was lost", func() bool {
		return strings.Contains(logs.String(), `level=WARN msg="nats disconnected"`)
	})
}
