package dev_test

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/dev/devkeys"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The restart tests kill Tether's own processes with SIGKILL and start them
// again, as an operator's kill -9 or a crash would: a `tether agent` on a
// host whose game servers outlive it, and a whole `tether dev`.

var (
	tetherOnce sync.Once
	tetherBin  string
	tetherErr  error
)

// tetherBinary builds the tether command once for the package (with the
// race detector when the tests have it, which reuses their build cache).
func tetherBinary(t *testing.T) string {
	t.Helper()
	tetherOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tether-bin-")
		if err != nil {
			tetherErr = err
			return
		}
		tetherBin = filepath.Join(dir, "tether")
		args := []string{"build", "-o", tetherBin}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/tetherhq/tether/services/cmd/tether")...).CombinedOutput()
		if err != nil {
			tetherErr = fmt.Errorf("build tether: %v\n%s", err, out)
		}
	})
	if tetherErr != nil {
		t.Fatal(tetherErr)
	}
	return tetherBin
}

// process is a tether command running as a process of its own.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *syncLog
	done chan struct{}
}

// syncLog collects a process's output.
type syncLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *syncLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// find returns the first line containing s.
func (l *syncLog) find(s string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return line, true
		}
	}
	return "", false
}

// startTether runs `tether args…`; its output is logged if the test fails.
func startTether(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(tetherBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	p := &process{t: t, cmd: cmd, out: &syncLog{}, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.out.add(sc.Text())
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("output of tether %s:\n%s", strings.Join(args, " "), p.out)
		}
	})
	return p
}

// kill ends the process with SIGKILL and waits for it.
func (p *process) kill() {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Errorf("kill tether: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Error("tether did not end within 30s of SIGKILL")
	}
}

// running reports whether a process runs (not gone, not a zombie: an
// orphan is reaped by init, not by this test).
func running(pid int) bool { return agent.OSProcesses{}.Identity(pid) != "" }

// TestAgentKilledAndRestartedFast and ...Slow: a `tether agent` process is
// killed with SIGKILL while its game servers run on, and started again on
// the same data directory, at once (the host never leaves ONLINE) or after
// its host was judged UNREACHABLE. Every server of the dead agent ends
// TERMINATED with AGENT_RESTARTED, its process stopped, the fleet gets
// fresh READY servers, and no allocation after the restart is given an old
// server.
func TestAgentKilledAndRestartedFast(t *testing.T) { agentKilledAndRestarted(t, false) }

func TestAgentKilledAndRestartedSlow(t *testing.T) { agentKilledAndRestarted(t, true) }

func agentKilledAndRestarted(t *testing.T, slow bool) {
	s := startStack(t, 1, func(o *dev.Options) {
		// The stack's own host beats never, so every server goes to the
		// agent under test.
		o.AgentOptions = func(_ int, a *agent.Options) error {
			a.SkipHeartbeat = func() bool { return true }
			return nil
		}
		o.ControllerOptions = func(c *controller.Options) { c.UnreachableAfter, c.LostAfter = time.Second, time.Hour }
	})
	wait.For(t, 15*time.Second, "the stack's own host UNREACHABLE", func() bool { return s.hostState("h1") == "UNREACHABLE" })

	logDir := t.TempDir()
	base := freeport.Block(t, 20)
	// As root (CI), the test's game servers run as root too: an opt-out.
	agentArgs := []string{"--nats-url", s.addrs.NATS, "agent", "--host-id", "ext1", "--log-dir", logDir, "--allow-root-game-servers",
		"--allowed-commands", filepath.Dir(gameServerBin),
		"--sdk-addr", "127.0.0.1:0", "--sdk-http-addr", "127.0.0.1:0",
		"--port-min", strconv.Itoa(base), "--port-max", strconv.Itoa(base + 19)}
	first := startTether(t, nil, agentArgs...)
	wait.For(t, 30*time.Second, "host ext1 ONLINE", func() bool { return s.hostState("ext1") == "ONLINE" })
	// A `tether agent` stopped leaves its game servers running, by design:
	// when the test ends, the fleet's last servers are ended here (this
	// runs before the stack stops, so the API still answers).
	t.Cleanup(func() {
		for _, g := range s.gameServers("arena") {
			if g.Pid > 0 {
				_ = syscall.Kill(-g.Pid, syscall.SIGKILL)
			}
		}
	})

	if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(3, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var old []gameServer
	wait.For(t, 30*time.Second, "3 READY servers", func() bool {
		old = byState(s.gameServers("arena"), "READY")
		return len(old) == 3
	})
	for _, g := range old {
		t.Cleanup(func() { _ = syscall.Kill(-g.Pid, syscall.SIGKILL) }) // whatever happens below
	}

	first.kill()
	for _, g := range old {
		if !running(g.Pid) {
			t.Fatalf("game server %s (pid %d) did not outlive its agent", g.Name, g.Pid)
		}
	}
	if slow {
		wait.For(t, 15*time.Second, "host ext1 UNREACHABLE", func() bool { return s.hostState("ext1") == "UNREACHABLE" })
	}
	startTether(t, nil, agentArgs...)

	// Once the views show the new registration, no old server is READY or
	// ALLOCATED, and none is ever handed out again.
	reg := s.waitRegistrations("ext1", 2)
	oldNames := map[string]bool{}
	for _, g := range old {
		oldNames[g.Name] = true
	}
	var fresh []gameServer
	allocated := map[string]bool{}
	wait.For(t, 30*time.Second, "3 fresh READY servers", func() bool {
		list := s.gameServersAfter("arena", reg)
		for _, g := range list {
			if oldNames[g.Name] && (g.State == "READY" || g.State == "ALLOCATED") {
				t.Fatalf("%s of the dead agent is %s in views that include its host's new registration", g.Name, g.State)
			}
		}
		if a, ok := s.tryAllocate("arena"); ok {
			if oldNames[a] {
				t.Fatalf("allocation after the agent restarted returned %s, a server of the dead agent", a)
			}
			allocated[a] = true
		}
		fresh = fresh[:0]
		for _, g := range byState(list, "READY") {
			if !oldNames[g.Name] {
				fresh = append(fresh, g)
			}
		}
		return len(fresh)+len(allocated) >= 3
	})
	for _, g := range s.gameServers("arena") {
		if !oldNames[g.Name] {
			continue
		}
		if g.State != "TERMINATED" || g.Reason != "AGENT_RESTARTED" {
			t.Errorf("%s of the dead agent is %s (%s), want TERMINATED (AGENT_RESTARTED)", g.Name, g.State, g.Reason)
		}
	}
	wait.For(t, 15*time.Second, "the dead agent's processes stopped", func() bool {
		return !slices.ContainsFunc(old, func(g gameServer) bool { return running(g.Pid) })
	})
}

// TestDevKilledAndRestarted: `tether dev` is killed with SIGKILL (its game
// servers die with it) and started again with the same data directory and
// database. The servers that were READY end TERMINATED with
// AGENT_RESTARTED, and the fleet is READY again with fresh servers.
func TestDevKilledAndRestarted(t *testing.T) {
	dataDir := t.TempDir()
	env := []string{"DATABASE_URL=" + pgtest.NewDatabase(t)}
	args := []string{"--log-level", "warn", "dev", "--data-dir", dataDir, "--hosts", "1",
		"--rest-port", "-1", "--grpc-port", "-1", "--nats-port", "-1", "--sdk-port", "-1", "--allowed-commands", filepath.Dir(gameServerBin)}
	first := startTether(t, env, args...)
	s := &stack{t: t, addrs: dev.Addresses{REST: restAddress(t, first)}, key: devKey(t, dataDir, "admin")}
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(3, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var old []gameServer
	wait.For(t, 30*time.Second, "3 READY servers", func() bool {
		old = byState(s.gameServers("arena"), "READY")
		return len(old) == 3
	})
	first.kill()

	second := startTether(t, env, args...)
	s.addrs.REST, s.key = restAddress(t, second), devKey(t, dataDir, "admin") // keys are made at each start
	wait.For(t, 60*time.Second, "the old servers terminated and 3 fresh READY", func() bool {
		list := s.gameServers("arena")
		ended := 0
		for _, g := range list {
			if slices.ContainsFunc(old, func(o gameServer) bool { return o.Name == g.Name }) {
				if g.State == "TERMINATED" && g.Reason == "AGENT_RESTARTED" {
					ended++
				}
			}
		}
		return ended == 3 && len(byState(list, "READY")) == 3
	})
}

// restAddress waits for `tether dev` to say where its REST API listens.
func restAddress(t *testing.T, p *process) string {
	t.Helper()
	var line string
	wait.For(t, 60*time.Second, "tether dev to print its REST address", func() bool {
		var ok bool
		line, ok = p.out.find("REST     http://")
		return ok
	})
	for f := range strings.FieldsSeq(line) {
		if strings.HasPrefix(f, "http://") {
			return f
		}
	}
	t.Fatalf("no address in %q", line)
	return ""
}

// hostState returns a host's state through the API ("" if unknown).
func (s *stack) hostState(id string) string {
	s.t.Helper()
	var h struct {
		State string `json:"state"`
	}
	if code := s.rest("GET", "/v1/hosts/"+id, nil, &h); code != http.StatusOK {
		return ""
	}
	return h.State
}

// waitRegistrations waits until a host has registered n times and returns
// the stream sequence of the last registration.
func (s *stack) waitRegistrations(id string, n int) uint64 {
	s.t.Helper()
	var last uint64
	wait.For(s.t, 30*time.Second, fmt.Sprintf("%d registrations of %s", n, id), func() bool {
		hist, err := s.store.History(s.ctx, events.MustSubject(events.HostName(id)), 0)
		if err != nil {
			s.t.Fatal(err)
		}
		count := 0
		for _, e := range hist {
			if e.Type == "HostRegistered" {
				count, last = count+1, e.Sequence
			}
		}
		return count >= n
	})
	return last
}

// gameServersAfter lists a fleet's servers from views that include the
// stream up to seq.
func (s *stack) gameServersAfter(fleet string, seq uint64) []gameServer {
	s.t.Helper()
	var out struct {
		GameServers []gameServer `json:"gameServers"`
	}
	if code := s.rest("GET", fmt.Sprintf("/v1/fleets/%s/gameServers?pageSize=1000&minSequence=%d", fleet, seq), nil, &out); code != http.StatusOK {
		s.t.Fatalf("list game servers: %d", code)
	}
	return out.GameServers
}

// tryAllocate allocates a server of the fleet; ok is false when none is
// READY.
func (s *stack) tryAllocate(fleet string) (string, bool) {
	s.t.Helper()
	var out struct {
		GameServer gameServer `json:"gameServer"`
	}
	switch code := s.rest("POST", "/v1/fleets/"+fleet+"/gameServers:allocate", map[string]any{}, &out); code {
	case http.StatusOK:
		return out.GameServer.Name, true
	case http.StatusTooManyRequests:
		return "", false
	default:
		s.t.Fatalf("allocate: %d", code)
		return "", false
	}
}

// devKey reads a role's API key that `tether dev` made in dataDir (it is
// written before the banner that restAddress waits for).
func devKey(t *testing.T, dataDir, role string) string {
	t.Helper()
	b, err := os.ReadFile(devkeys.File(dataDir, role))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
