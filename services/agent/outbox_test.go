package agent_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/platform/migrate"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// A process that dies while NATS is down is still recorded: its events wait
// in the outbox and are published once, in order, when NATS returns.
func TestEventsSurviveNATSBeingAway(t *testing.T) {
	storeDir := t.TempDir()
	ns, err := natsembed.Start(natsembed.Options{StoreDir: storeDir})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := migrate.NATS(ctx, js, migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bus, err := commands.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	ports := freeport.Block(t, 10)
	a, err := agent.New(agent.Options{
		HostID: "h1", JetStream: js, Store: store, Commands: bus, LogDir: t.TempDir(), SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0",
		PortMin: ports, PortMax: ports + 9, KillProcessesOnExit: true, AllowedCommands: []string{systemCommands},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	h := &harness{t: t, ctx: ctx, store: store, bus: bus, agent: a}
	name := "fleets/arena/gameServers/gs-away"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	pid := int(h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	env := processEnv(t, int32(pid))
	req, err := http.NewRequest("POST", env["TETHER_SDK_HTTP"]+"/v1/sdk/ready", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.agent.ProcessToken(pid))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h.waitEvent(name, "GameServerReady")

	// NATS goes away; the process dies meanwhile.
	ns.Shutdown()
	wait.For(t, 10*time.Second, "the client to notice NATS is gone", func() bool { return nc.Status() != nats.CONNECTED })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	outboxFile := a.OutboxLen // events kept on disk
	wait.For(t, 10*time.Second, "the exit kept in the outbox", func() bool { return outboxFile() >= 2 })

	// NATS returns on the same port with its store: the outbox drains.
	ns2, err := natsembed.Start(natsembed.Options{StoreDir: storeDir, Port: atoi(t, port)})
	if err != nil {
		t.Fatal(err)
	}
	defer ns2.Shutdown()
	term := h.waitEvent(name, "GameServerTerminated").Data.(*eventsv1.GameServerTerminated)
	if term.GetReason() != eventsv1.Reason_REASON_PROCESS_EXITED || term.GetEvidence().GetSignal() != "killed" {
		t.Fatalf("terminated with %s %v", term.GetReason(), term.GetEvidence())
	}
	wait.For(t, 10*time.Second, "the outbox to drain", func() bool { return outboxFile() == 0 })
	var types []string
	for _, e := range h.history(name) {
		types = append(types, e.Type)
	}
	want := []string{"GameServerScheduled", "ProcessStarted", "SdkConnected", "GameServerReady", "ProcessExited", "GameServerTerminated"}
	if len(types) != len(want) {
		t.Fatalf("history %v, want %v (each event exactly once)", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("history %v, want %v", types, want)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a port: %q", s)
	}
	return n
}
