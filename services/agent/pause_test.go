package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/natstest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// agentProcessEnv, set, makes TestAgentProcess run an agent: its value is
// the NATS URL, the first and last port for game servers and the
// directory game server commands may be in, separated by spaces.
const agentProcessEnv = "TETHER_TEST_AGENT_PROCESS"

// TestAgentProcess is not a test of its own: run as a process of its own
// (the test binary started again by startAgentProcess, with
// agentProcessEnv set), it is the agent of host h1 until SIGTERM. Its
// game servers die with it.
func TestAgentProcess(t *testing.T) {
	cfg := os.Getenv(agentProcessEnv)
	if cfg == "" {
		t.Skip("the agent process of TestAgentStoppedAndContinued; runs only when that test starts it")
	}
	var url, allowed string
	var portMin, portMax int
	if _, err := fmt.Sscan(cfg, &url, &portMin, &portMax, &allowed); err != nil {
		t.Fatalf("%s=%q: %v", agentProcessEnv, cfg, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_, js := natstest.ConnectURL(t, url, nats.Name("agent process"), nats.MaxReconnects(-1))
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bus, err := commands.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Options{
		HostID: "h1", JetStream: js, Store: store, Commands: bus, LogDir: t.TempDir(),
		SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0", PortMin: portMin, PortMax: portMax,
		AllowedCommands: []string{allowed}, KillProcessesOnExit: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// startAgentProcess runs the agent of host h1 as a process of its own on
// the stack's NATS, game servers in bin's directory allowed, and returns
// it with its output (shown if the test fails). It is stopped when the
// test ends, before the stack.
func startAgentProcess(t *testing.T, k *kit.Stack, bin string) (*os.Process, *syncBuffer) {
	t.Helper()
	ports := freeport.Block(t, 20)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentProcess$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %s", agentProcessEnv, k.NATS.ClientURL(), ports, ports+19, filepath.Dir(bin)))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // if the test stopped it
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent process: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the agent process did not stop within 30 s of SIGTERM")
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("agent process output:\n%s", out)
		}
	})
	return cmd.Process, out
}

// processState is a process's state as /proc shows it ('R', 'S', 'T'
// stopped, 'Z' a zombie…), 0 if there is no such process.
func processState(pid int) byte {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command, in parentheses, may hold anything: the state follows
	// its last parenthesis.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}

// TestAgentStoppedAndContinued is issue 39's pause, with real processes:
// an agent process is stopped with SIGSTOP for 6 s, twice the time its
// game servers' health contract gives them (period 1 s, threshold 3),
// while its six game servers (the example, whose SDK beats every 200 ms)
// run and beat on, their beats waiting in the agent's sockets. On SIGCONT
// the agent's own ticks come first and the queued beats a moment later:
// it logs the pause and judges no server for it. Before, it counted its
// pause as the servers' silence and terminated some (3 of 6 in the
// issue) with HEALTH_CHECK_FAILED at once.
func TestAgentStoppedAndContinued(t *testing.T) {
	bin := buildExample(t)
	k := kit.New(t, kit.WithCommands())
	h := &harness{t: t, ctx: k.Ctx, js: k.JS, store: k.Store, bus: k.Commands}
	proc, out := startAgentProcess(t, k, bin)
	h.waitHostRegistered(1)

	var names []string
	for i := range 6 {
		tmpl := exampleTemplate(bin)
		tmpl.Env["TETHER_EXAMPLE_HEARTBEAT_INTERVAL"] = "200ms"
		names = append(names, fmt.Sprintf("fleets/arena/gameServers/gs-%d", i))
		h.scheduleSpec(names[i], &eventsv1.FleetSpec{Template: tmpl,
			Health: &eventsv1.HealthPolicy{InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 3}})
	}
	pids := make([]int, len(names))
	for i, name := range names {
		h.waitEvent(name, "GameServerReady")
		for _, e := range h.history(name) {
			if s, ok := e.Data.(*eventsv1.ProcessStarted); ok {
				pids[i] = int(s.GetPid())
			}
		}
	}
	terminated := func() error {
		for _, name := range names {
			for _, e := range h.history(name) {
				if u, ok := e.Data.(*eventsv1.GameServerUnhealthy); ok {
					return fmt.Errorf("%s UNHEALTHY: %s, evidence %v", name, u.GetReason(), u.GetEvidence())
				}
			}
		}
		return nil
	}
	// The servers are healthy: a second of them, beating, judges none.
	wait.Holds(t, time.Second, "healthy servers before the pause", func() bool { return terminated() == nil })

	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the agent process stopped", func() bool { return processState(proc.Pid) == 'T' })
	// The pause: the agent stays stopped and its game servers run on.
	wait.Holds(t, 6*time.Second, "the agent stopped and its game servers running", func() bool {
		if processState(proc.Pid) != 'T' {
			return false
		}
		for _, pid := range pids {
			if s := processState(pid); s == 0 || s == 'T' || s == 'Z' {
				return false
			}
		}
		return true
	})
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the agent process running again", func() bool { return processState(proc.Pid) != 'T' })

	// Over three periods and the settle after the pause: a verdict for
	// the pause would have come by then (before the fix, at once).
	wait.Holds(t, 6*time.Second, "no server judged for the agent's pause", func() bool {
		if err := terminated(); err != nil {
			t.Log(err)
			return false
		}
		return true
	})
	wait.For(t, 10*time.Second, "the agent to log its pause", func() bool {
		return strings.Contains(out.String(), "agent did not run for a while")
	})
}
