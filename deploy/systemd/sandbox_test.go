package systemd_test

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// capabilityBits are the bit numbers (linux/capability.h) of the
// capabilities a unit may name here.
var capabilityBits = map[string]uint{"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7}

// TestAgentSandboxRunsGameServersAsTheirUser runs the real `tether agent`
// the way tether-agent.service does, as far as a test can without systemd:
// as root, with the unit's capability bounding set, no inheritable or
// ambient capabilities and no new privileges (setpriv), its log dir root's
// and 0750, its ExecStart flags, and nobody for the unit's game-server
// user. A real game server must come up READY as that user with no
// capabilities, unable to write the agent's log dir; and after the agent
// stops, the next one must end its predecessor's server (AGENT_RESTARTED),
// which takes CAP_KILL. Without the unit's capabilities the server never
// starts, or outlives its agent.
func TestAgentSandboxRunsGameServersAsTheirUser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs tether agent and a game server")
	}
	if os.Geteuid() != 0 {
		t.Skip("the unit runs the agent as root: so must the test")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("setpriv (util-linux) not installed: %v", err)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody on this machine: %v", err)
	}
	const file = "tether-agent.service"
	u := parseUnit(t, file)
	caps, _ := u.get("Service", "CapabilityBoundingSet")
	bounding := "-all"
	var wantCapEff uint64
	for _, c := range strings.Fields(caps) {
		bit, ok := capabilityBits[c]
		if !ok {
			t.Fatalf("%s: capability %s: add its bit to capabilityBits", file, c)
		}
		bounding += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
		wantCapEff |= 1 << bit
	}
	unitArgs := execStart(t, u, file)[1:] // agent --log-dir … --admin-addr … --run-as …
	if flagValue(unitArgs, "--run-as") == "" {
		t.Fatalf("%s: no --run-as", file)
	}

	dir := publicDir(t)
	tether, game := filepath.Join(dir, "tether"), filepath.Join(dir, "gameserver")
	for bin, pkg := range map[string]string{tether: tetherCmdDir, game: "../../sdk/go/example/gameserver"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	logDir := filepath.Join(dir, "state") // StateDirectory: root's, StateDirectoryMode
	mode, _ := u.get("Service", "StateDirectoryMode")
	perm, err := strconv.ParseUint(mode, 8, 32)
	if err != nil {
		t.Fatalf("%s: StateDirectoryMode=%q: %v", file, mode, err)
	}
	if err := os.Mkdir(logDir, os.FileMode(perm)); err != nil {
		t.Fatal(err)
	}

	s := stack.New(t, stack.WithCommands())
	ports := freeport.Block(t, 10)
	args := []string{"--bounding-set", bounding, "--inh-caps", "-all", "--ambient-caps", "-all", "--no-new-privs", "--", tether}
	for i := 0; i < len(unitArgs); i++ {
		switch w := unitArgs[i]; w {
		case "--log-dir", "--admin-addr", "--run-as", "--allowed-commands": // the test's own values
			i++
		default:
			args = append(args, w)
		}
	}
	args = append(args, "--log-dir", logDir, "--admin-addr", "127.0.0.1:0", "--run-as", nobody.Username, "--allowed-commands", dir,
		"--host-id", "h1", "--address", "127.0.0.1", "--nats-url", s.NATS.ClientURL(),
		"--sdk-addr", "127.0.0.1:0", "--sdk-http-addr", "127.0.0.1:0",
		"--port-min", strconv.Itoa(ports), "--port-max", strconv.Itoa(ports+9))
	startAgent := func() *exec.Cmd {
		t.Helper()
		out := &syncbuf.Buffer{}
		cmd := exec.Command(setpriv, args...)
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			if t.Failed() {
				t.Logf("agent %d's output:\n%s", cmd.Process.Pid, out.String())
			}
		})
		return cmd
	}
	first := startAgent()

	name := "fleets/sandbox/gameServers/gs-sandboxed"
	spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{
		Command: game, Ports: []*eventsv1.PortSpec{{Name: "game"}},
		Env: map[string]string{"TETHER_EXAMPLE_LISTEN_HOST": "127.0.0.1"},
	}}
	events.NormalizeFleetSpec(spec)
	msgs, err := events.DecideGameServer(name, nil, events.ScheduleGameServer{Host: "hosts/h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.Append(s.Ctx, events.MustSubject(name), 0, events.New(name, time.Now(), msgs[0])); err != nil {
		t.Fatal(err)
	}
	if err := s.Commands.Send(s.Ctx, "h1", "tests", &agentv1.Command{Action: &agentv1.Command_Start{Start: &agentv1.StartGameServer{
		GameServer: name, Template: spec.Template, Health: spec.Health, SdkDisconnectGraceSeconds: spec.SdkDisconnectGraceSeconds,
	}}}); err != nil {
		t.Fatal(err)
	}
	event := func(typ string) *events.Envelope {
		hist, err := s.Store.History(s.Ctx, events.MustSubject(name), 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range hist {
			if hist[i].Type == typ {
				return &hist[i]
			}
		}
		return nil
	}
	wait.For(t, 60*time.Second, "the game server READY under the sandboxed agent", func() bool {
		return event("GameServerReady") != nil || event("GameServerTerminated") != nil
	})
	if e := event("GameServerTerminated"); e != nil {
		t.Fatalf("the game server ended: %v", e.Data)
	}
	pid := int(event("ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	// Whatever happens below, the game server does not outlive the test
	// (an agent stopped with SIGTERM leaves its game servers running).
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	game1 := procStatus(t, pid)
	for _, key := range []string{"Uid", "Gid"} {
		want := nobody.Uid
		if key == "Gid" {
			want = nobody.Gid
		}
		if ids := strings.Fields(game1[key]); len(ids) != 4 || strings.Count(game1[key], want) != 4 {
			t.Errorf("game server %s (real, effective, saved, filesystem) %v, want %s", key, ids, want)
		}
	}
	for _, key := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if v := capabilities(t, game1, key); v != 0 {
			t.Errorf("game server %s %#x, want none", key, v)
		}
	}
	agentStatus := procStatus(t, first.Process.Pid)
	if v := capabilities(t, agentStatus, "CapEff"); v != wantCapEff {
		t.Errorf("agent CapEff %#x, want %#x (the unit's bounding set)", v, wantCapEff)
	}
	if v := capabilities(t, agentStatus, "CapAmb"); v != 0 {
		t.Errorf("agent CapAmb %#x, want none: its game servers would inherit them", v)
	}
	// The game server's user cannot write the agent's records and outbox.
	probe := exec.Command(setpriv, "--reuid", nobody.Uid, "--regid", nobody.Gid, "--clear-groups", "--",
		"sh", "-c", "echo x > "+filepath.Join(logDir, "probe"))
	if out, err := probe.CombinedOutput(); err == nil {
		t.Errorf("%s wrote into the agent's log dir %s (%s): game servers could rewrite its outbox", nobody.Username, logDir, out)
	}

	// The agent stops (systemctl stop: SIGTERM, KillMode=process); its
	// game server goes on, and the next agent ends it as root with CAP_KILL.
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("the agent stopped with %v", err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the game server ended with its agent (%v): KillMode=process is to leave it to the next agent", err)
	}
	startAgent()
	wait.For(t, 60*time.Second, "the next agent to end its predecessor's game server", func() bool {
		return event("GameServerTerminated") != nil && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	if reason := event("GameServerTerminated").Data.(*eventsv1.GameServerTerminated).GetReason(); reason != eventsv1.Reason_REASON_AGENT_RESTARTED {
		t.Errorf("the server ended with %v, want AGENT_RESTARTED", reason)
	}
}

// procStatus is /proc/PID/status: key → value.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

// capabilities is a capability set of a /proc/PID/status, as a bit mask.
func capabilities(t *testing.T, status map[string]string, key string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(status[key], 16, 64)
	if err != nil {
		t.Fatalf("%s %q: %v", key, status[key], err)
	}
	return v
}

// publicDir is a temporary directory any user may read and search: the
// game server's user must run the binaries built there.
func publicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tether-systemd-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
