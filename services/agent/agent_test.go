package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/platform/migrate"

	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/natstest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer = syncbuf.Buffer

type harness struct {
	t     testing.TB
	ctx   context.Context
	js    jetstream.JetStream
	store *natsjs.Store
	bus   *commands.Bus
	agent *agent.Agent
	logs  *syncBuffer
	// crash stops the agent's work without waiting for its supervisors,
	// whose processes run on (as after kill -9); done yields Run's error.
	crash func()
	done  chan error
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	return newHarnessWith(t, 0)
}

// newHarnessWith sets the SDK stream keepalive (0: the default).
func newHarnessWith(t testing.TB, keepalive time.Duration) *harness {
	t.Helper()
	return newHarnessOpts(t, func(o *agent.Options) { o.StreamKeepalive = keepalive })
}

// newHarnessOpts lets a test change the agent's options.
func newHarnessOpts(t testing.TB, opts func(*agent.Options)) *harness {
	t.Helper()
	k := kit.New(t, kit.WithCommands())
	h := &harness{t: t, ctx: k.Ctx, js: k.JS, store: k.Store, bus: k.Commands}
	h.startAgent(opts)
	return h
}

// systemCommands is the directory of the system programs the tests run as
// game servers (/bin/sleep, /bin/sh): the tests' agents allow commands
// from it.
const systemCommands = "/bin"

// startAgent runs an agent for host h1 on the harness's NATS, allowing
// commands from systemCommands and programsDir (the example game server).
func (h *harness) startAgent(opts func(*agent.Options)) {
	t := h.t
	t.Helper()
	logs := &syncBuffer{}
	ports := freeport.Block(t, 10)
	o := agent.Options{
		HostID: "h1", JetStream: h.js, Store: h.store, Commands: h.bus, LogDir: t.TempDir(), SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0",
		PortMin: ports, PortMax: ports + 9,
		KillProcessesOnExit: true, Logger: slog.New(slog.NewTextHandler(logs, nil)), SyncInterval: 100 * time.Millisecond,
		AllowedCommands: []string{systemCommands, programsDir},
	}
	opts(&o)
	a, err := agent.New(o)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	h.agent, h.logs, h.crash, h.done = a, logs, cancel, done
}

// restart starts another agent for the same host on the same NATS, with
// its own options (the first one is crashed or stopped beforehand).
func (h *harness) restart(opts func(*agent.Options)) *harness {
	h.t.Helper()
	next := &harness{t: h.t, ctx: h.ctx, js: h.js, store: h.store, bus: h.bus}
	next.startAgent(opts)
	return next
}

// waitHostRegistered waits until the host has registered n times and
// returns those events.
func (h *harness) waitHostRegistered(n int) []events.Envelope {
	h.t.Helper()
	var regs []events.Envelope
	wait.For(h.t, 15*time.Second, fmt.Sprintf("%d host registrations", n), func() bool {
		hist, err := h.store.History(h.ctx, events.MustSubject("hosts/h1"), 0)
		if err != nil {
			h.t.Fatal(err)
		}
		regs = regs[:0]
		for _, e := range hist {
			if e.Type == "HostRegistered" {
				regs = append(regs, e)
			}
		}
		return len(regs) >= n
	})
	return regs
}

// schedule appends GameServerScheduled for a server on h1 and sends the
// start command, as the controller would.
func (h *harness) schedule(name string, tmpl *eventsv1.GameServerTemplate) {
	h.t.Helper()
	h.scheduleSpec(name, &eventsv1.FleetSpec{Template: tmpl})
}

// scheduleSpec schedules a server of a fleet spec (its template, health
// contract and disconnect grace; defaults fill the rest).
func (h *harness) scheduleSpec(name string, spec *eventsv1.FleetSpec) {
	h.t.Helper()
	events.NormalizeFleetSpec(spec)
	msgs, err := events.DecideGameServer(name, nil, events.ScheduleGameServer{Host: "hosts/h1", Spec: spec})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.store.Append(h.ctx, events.MustSubject(name), 0, events.New(name, time.Now(), msgs[0])); err != nil {
		h.t.Fatal(err)
	}
	err = h.bus.Send(h.ctx, "h1", "tests", &agentv1.Command{Action: &agentv1.Command_Start{Start: &agentv1.StartGameServer{
		GameServer: name, Template: spec.Template, Health: spec.Health, SdkDisconnectGraceSeconds: spec.SdkDisconnectGraceSeconds,
	}}})
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) history(name string) []events.Envelope {
	h.t.Helper()
	hist, err := h.store.History(h.ctx, events.MustSubject(name), 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return hist
}

// waitEvent polls the stream until the server has an event of a type.
func (h *harness) waitEvent(name, typ string) events.Envelope {
	h.t.Helper()
	var found events.Envelope
	wait.For(h.t, 10*time.Second, name+" to get "+typ, func() bool {
		for _, e := range h.history(name) {
			if e.Type == typ {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// processEnv reads a running process's environment from /proc.
func processEnv(t testing.TB, pid int32) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for kv := range strings.SplitSeq(string(raw), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

func TestProcessGetsItsIdentityAndTheSDKAuthenticatesByToken(t *testing.T) {
	h := newHarness(t)
	name := "fleets/arena/gameServers/gs-one"
	h.schedule(name, &eventsv1.GameServerTemplate{
		Command: "/bin/sleep", Args: []string{"600"},
		Ports: []*eventsv1.PortSpec{{Name: "game"}, {Name: "query-tcp", Protocol: eventsv1.Protocol_PROTOCOL_TCP}},
	})
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)
	env := processEnv(t, started.GetPid())
	for _, k := range []string{"TETHER_GAMESERVER", "TETHER_GAMESERVER_TOKEN_FD", "TETHER_SDK_ADDR", "TETHER_SDK_HTTP", "TETHER_PORT_GAME", "TETHER_PORT_QUERY_TCP"} {
		if env[k] == "" {
			t.Fatalf("process environment lacks %s: %v", k, env)
		}
	}
	token := h.agent.ProcessToken(int(started.GetPid()))
	if env["TETHER_GAMESERVER"] != name || env["TETHER_SDK_ADDR"] != h.agent.SDKAddr() {
		t.Fatalf("process identity: %v", env)
	}
	if len(started.GetPorts()) != 2 || strconv.Itoa(int(started.GetPorts()[0].GetPort())) != env["TETHER_PORT_GAME"] {
		t.Fatalf("ports in ProcessStarted %v, env %s", started.GetPorts(), env["TETHER_PORT_GAME"])
	}

	conn, err := grpc.NewClient(h.agent.SDKAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sdk := sdkv1.NewSDKServiceClient(conn)
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"no token", ""},
		{"wrong token", "not-the-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := h.ctx
			if tc.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
			}
			_, err := sdk.Ready(ctx, &sdkv1.ReadyRequest{})
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("Ready with %s: %v, want Unauthenticated", tc.name, err)
			}
		})
	}
	if !strings.Contains(h.logs.String(), "SDK call rejected") {
		t.Fatalf("rejected calls were not logged:\n%s", h.logs.String())
	}
	req, err := http.NewRequest("POST", env["TETHER_SDK_HTTP"]+"/v1/sdk/ready", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("REST Ready without a token: %d, want 401", resp.StatusCode)
	}

	// With the token, over REST (no held connection): connected, then Ready.
	req, err = http.NewRequest("POST", env["TETHER_SDK_HTTP"]+"/v1/sdk/ready", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("REST Ready with the token: %d", resp.StatusCode)
	}
	connected := h.waitEvent(name, "SdkConnected").Data.(*eventsv1.SdkConnected)
	if connected.GetTransport() != "rest" {
		t.Fatalf("transport %q, want rest", connected.GetTransport())
	}
	h.waitEvent(name, "GameServerReady")

	// The same process over gRPC, on another connection: same server.
	ctx := metadata.AppendToOutgoingContext(h.ctx, "authorization", "Bearer "+token)
	gs, err := sdk.GetGameServer(ctx, &sdkv1.GetGameServerRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if gs.GetName() != name || gs.GetState() != "READY" || len(gs.GetPorts()) != 2 {
		t.Fatalf("GetGameServer = %v", gs)
	}
	if _, err := sdk.SetLabel(ctx, &sdkv1.SetLabelRequest{Key: "map", Value: "dust"}); err != nil {
		t.Fatal(err)
	}
	labels := h.waitEvent(name, "LabelsChanged").Data.(*eventsv1.LabelsChanged)
	if labels.GetSet()["map"] != "dust" {
		t.Fatalf("labels %v", labels.GetSet())
	}
}

func TestStopCommandTerminatesWithTheShutdownReason(t *testing.T) {
	h := newHarness(t)
	name := "fleets/arena/gameServers/gs-stop"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)

	// The controller's side of a scale-down: the decision as an event, then the command.
	last := h.history(name)
	msgs, err := events.DecideGameServer(name, fold(t, last), events.RequestShutdown{
		Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN, Deadline: time.Now().Add(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(h.ctx, events.MustSubject(name), last[len(last)-1].Sequence, events.New(name, time.Now(), msgs[0])); err != nil {
		t.Fatal(err)
	}
	if err := h.bus.Send(h.ctx, "h1", "tests", &agentv1.Command{Action: &agentv1.Command_Stop{Stop: &agentv1.StopGameServer{
		GameServer: name, Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN}}}); err != nil {
		t.Fatal(err)
	}
	term := h.waitEvent(name, "GameServerTerminated").Data.(*eventsv1.GameServerTerminated)
	if term.GetReason() != eventsv1.Reason_REASON_FLEET_SCALED_DOWN || term.GetEvidence().GetSignal() != "terminated" {
		t.Fatalf("terminated with %s, evidence %v", term.GetReason(), term.GetEvidence())
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(int(started.GetPid()))); err == nil {
		t.Fatalf("process %d still exists", started.GetPid())
	}
	if got := stopSteps(h.history(name)); got != "ShutdownRequested → ProcessSignalled(terminated) → ProcessExited → GameServerTerminated" {
		t.Fatalf("termination steps: %s", got)
	}
}

// stopSteps renders the termination steps of a history.
func stopSteps(hist []events.Envelope) string {
	var out []string
	for _, e := range hist {
		switch d := e.Data.(type) {
		case *eventsv1.ShutdownRequested, *eventsv1.ProcessExited, *eventsv1.GameServerTerminated:
			out = append(out, e.Type)
		case *eventsv1.ProcessSignalled:
			out = append(out, e.Type+"("+d.GetSignal()+")")
		}
	}
	return strings.Join(out, " → ")
}

// A process that ignores SIGTERM is killed when the shutdown deadline
// passes on the agent's clock, and not before: the test moves the clock
// past the deadline instead of waiting for it.
func TestProcessIgnoringSIGTERMIsKilledAtTheDeadline(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h := newHarnessOpts(t, func(o *agent.Options) { o.Clock = clk })
	name := "fleets/arena/gameServers/gs-stubborn"
	// The shell and its child both ignore SIGTERM (an ignored signal survives exec).
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sh", Args: []string{"-c", "trap '' TERM; sleep 600"}})
	pid := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid()
	// The shell ignores SIGTERM once it has run its trap: on a busy
	// machine the agent's signal could otherwise come first, and end it.
	wait.Until(t, 10*time.Second, "the game server's shell to ignore SIGTERM", func() error { return ignores(pid, syscall.SIGTERM) })
	last := h.history(name)
	// Shorter than the health contract's first verdict (initial delay plus
	// a period), which the moved clock would otherwise reach.
	const grace = 4 * time.Second
	deadline := clk.Now().Add(grace)
	msgs, err := events.DecideGameServer(name, fold(t, last), events.RequestShutdown{Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN, Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(h.ctx, events.MustSubject(name), last[len(last)-1].Sequence, events.New(name, clk.Now(), msgs[0])); err != nil {
		t.Fatal(err)
	}
	if err := h.bus.Send(h.ctx, "h1", "tests", &agentv1.Command{Action: &agentv1.Command_Stop{Stop: &agentv1.StopGameServer{
		GameServer: name, Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN, Deadline: timestamppb.New(deadline)}}}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "ProcessSignalled")

	// A millisecond before the deadline the process still runs.
	clk.Advance(grace - time.Millisecond)
	alive := func() bool { return syscall.Kill(int(pid), 0) == nil }
	wait.Holds(t, 300*time.Millisecond, "the process alive before its deadline", alive)
	clk.Advance(time.Millisecond)
	term := h.waitEvent(name, "GameServerTerminated").Data.(*eventsv1.GameServerTerminated)
	if term.GetEvidence().GetSignal() != "killed" || term.GetReason() != eventsv1.Reason_REASON_FLEET_SCALED_DOWN {
		t.Fatalf("terminated %s, evidence %v", term.GetReason(), term.GetEvidence())
	}
	want := "ShutdownRequested → ProcessSignalled(terminated) → ProcessSignalled(killed) → ProcessExited → GameServerTerminated"
	if got := stopSteps(h.history(name)); got != want {
		t.Fatalf("termination steps:\n got %s\nwant %s", got, want)
	}
}

// ignores is nil once process pid ignores sig (its SigIgn mask in
// /proc/<pid>/status has the signal's bit), else what it ignores.
func ignores(pid int32, sig syscall.Signal) error {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		mask, ok := strings.CutPrefix(line, "SigIgn:")
		if !ok {
			continue
		}
		bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
		if err != nil {
			return fmt.Errorf("SigIgn %q: %w", mask, err)
		}
		if bits&(1<<(uint(sig)-1)) == 0 {
			return fmt.Errorf("it ignores the signals of mask %016x, not %v", bits, sig)
		}
		return nil
	}
	return errors.New("no SigIgn line in its status")
}

func fold(t testing.TB, hist []events.Envelope) *eventsv1.GameServerState {
	t.Helper()
	var s *eventsv1.GameServerState
	for _, e := range hist {
		var err error
		if s, err = events.ApplyGameServer(s, e); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestServerTerminatedElsewhereIsStopped(t *testing.T) {
	h := newHarness(t)
	name := "fleets/arena/gameServers/gs-lost"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)

	// The controller declared the host lost while the agent was out of sight.
	hist := h.history(name)
	msgs, err := events.DecideGameServer(name, fold(t, hist), events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(h.ctx, events.MustSubject(name), hist[len(hist)-1].Sequence, events.New(name, time.Now(), msgs[0])); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 15*time.Second, "the process of the terminated server to end", func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(int(started.GetPid())))
		return os.IsNotExist(err)
	})
	for _, e := range h.history(name)[len(hist)+1:] {
		t.Fatalf("the agent wrote %s after the server was terminated", e.Type)
	}
}

// TestAgentStoppedWhileStartingStopsCleanly: an agent whose context ends
// before its start-up steps finish (here: before it could register) returns
// no error, as a stop during service does; a supervisor does not mistake a
// shutdown for a failure.
func TestAgentStoppedWhileStartingStopsCleanly(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
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
	a, err := agent.New(agent.Options{
		HostID: "h1", JetStream: js, Store: store, Commands: bus, LogDir: t.TempDir(), SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0",
		PortMin: 22000, PortMax: 22009, Logger: slog.New(slog.NewTextHandler(&syncBuffer{}, nil)), AllowedCommands: []string{systemCommands},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(ctx)
	stop()
	if err := a.Run(stopped); err != nil {
		t.Fatalf("an agent stopped while starting returned %v", err)
	}
}
