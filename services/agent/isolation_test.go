package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// programsDir holds the directories of the programs the tests build
// (publicDir); TestMain makes it, open to every user. The harness's agents
// allow commands from it.
var programsDir string

// TestMain makes programsDir for the tests and removes it after them.
func TestMain(m *testing.M) {
	switch v := os.Getenv(agonesHelperEnv); v {
	case "":
	case pingBench:
		os.Exit(pingBenchHelper()) // the test binary run as the ping benchmark's game server (agones_bench_test.go)
	case conformanceGRPC, conformanceREST:
		os.Exit(agonesConformance(v)) // the test binary run as the conformance game server (agones_conformance_test.go)
	default:
		os.Exit(agonesHelper(v)) // the test binary run by an agent as a game server (agones_test.go)
	}
	dir, err := os.MkdirTemp("", "tether-agent-test-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent tests: a directory for their programs:", err)
		os.Exit(1)
	}
	programsDir = dir
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, "agent tests: remove their programs:", err)
	}
	os.Exit(code)
}

// publicDir makes a directory in programsDir any user may list and run
// programs from (a test's TempDir is its owner's alone), removed when the
// test ends.
func publicDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(programsDir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildExample builds the example game server, which uses the Go SDK, into
// a directory any user may run it from.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(publicDir(t), "gameserver")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/tetherhq/tether/sdk/go/example/gameserver").CombinedOutput()
	if err != nil {
		t.Fatalf("go build the example game server: %v\n%s", err, out)
	}
	return bin
}

// exampleTemplate runs the example game server on loopback.
func exampleTemplate(bin string) *eventsv1.GameServerTemplate {
	return &eventsv1.GameServerTemplate{
		Command: bin, Ports: []*eventsv1.PortSpec{{Name: "game"}},
		Env: map[string]string{"TETHER_EXAMPLE_LISTEN_HOST": "127.0.0.1"},
	}
}

// rawEnviron is a process's environment block as /proc shows it to anyone
// allowed to read it.
func rawEnviron(t *testing.T, pid int32) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// agentSecrets are variables of the agent's environment that no game server
// may see.
var agentSecrets = map[string]string{
	"TETHER_PLAYER_TOKEN_KEYS": "k1:c2VjcmV0LW9mLXRoZS1hZ2VudC1ub3QtdGhlLWdhbWU=",
	"DATABASE_URL":             "postgres://tether:hunter2@db/tether",
	"TETHER_NATS_CREDS":        "/etc/tether/nats/host.creds",
	"NATS_URL":                 "nats://10.0.0.1:4222",
}

// TestGameServerGetsNoAgentSecretsAndItsTokenOnADescriptor runs the example
// game server (the Go SDK) under an agent whose environment holds secrets:
// the process's environment has none of them and no token, yet the SDK
// connects with its token and the server goes READY.
func TestGameServerGetsNoAgentSecretsAndItsTokenOnADescriptor(t *testing.T) {
	bin := buildExample(t)
	for k, v := range agentSecrets {
		t.Setenv(k, v)
	}
	h := newHarness(t)
	name := "fleets/arena/gameServers/gs-sdk"
	h.schedule(name, exampleTemplate(bin))
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)
	token := h.agent.ProcessToken(int(started.GetPid()))
	if token == "" {
		t.Fatal("the agent has no token for the process")
	}
	h.waitEvent(name, "SdkConnected")
	h.waitEvent(name, "GameServerReady")

	raw := rawEnviron(t, started.GetPid())
	if strings.Contains(raw, token) {
		t.Fatalf("the process token is in the process's environment: %q", raw)
	}
	for k, v := range agentSecrets {
		if strings.Contains(raw, k+"=") || strings.Contains(raw, v) {
			t.Errorf("the agent's %s reached the game server's environment", k)
		}
	}
	var keys []string
	for kv := range strings.SplitSeq(strings.TrimSuffix(raw, "\x00"), "\x00") {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"AGONES_SDK_GRPC_HOST", "AGONES_SDK_GRPC_PORT", "AGONES_SDK_HTTP_PORT", "HOME", "PATH", "TETHER_EXAMPLE_LISTEN_HOST", "TETHER_GAMESERVER", "TETHER_GAMESERVER_TOKEN_FD",
		"TETHER_PORT_GAME", "TETHER_SDK_ADDR", "TETHER_SDK_HTTP"}
	if !slices.Equal(keys, want) {
		t.Fatalf("game server environment %v, want exactly %v", keys, want)
	}
	// The SDK read the pipe and closed it: nothing is left for another
	// process of the user to read through /proc/PID/fd.
	if fd, err := os.Readlink("/proc/" + strconv.Itoa(int(started.GetPid())) + "/fd/3"); err == nil && strings.HasPrefix(fd, "pipe:") {
		t.Fatalf("the SDK left the token's pipe open on fd 3")
	}
}

// TestTokenComesOnADescriptorAndActsOnItsServerOnly starts two processes
// that do not read their tokens: each finds its own on fd 3 (not in its
// environment), and a call with one server's token acts on that server
// alone.
func TestTokenComesOnADescriptorAndActsOnItsServerOnly(t *testing.T) {
	h := newHarness(t)
	one, other := "fleets/arena/gameServers/gs-one", "fleets/arena/gameServers/gs-other"
	tokens := map[string]string{}
	pids := map[string]int32{}
	for _, name := range []string{one, other} {
		h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
		pid := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid()
		pids[name] = pid
		f, err := os.Open("/proc/" + strconv.Itoa(int(pid)) + "/fd/3")
		if err != nil {
			t.Fatalf("%s: the token's descriptor: %v", name, err)
		}
		line, err := bufio.NewReader(f).ReadString('\n')
		f.Close()
		if err != nil {
			t.Fatalf("%s: read the token's pipe: %v", name, err)
		}
		tokens[name] = strings.TrimSuffix(line, "\n")
		if tokens[name] == "" || tokens[name] != h.agent.ProcessToken(int(pid)) {
			t.Fatalf("%s: fd 3 held %q, not the process's token", name, line)
		}
		if raw := rawEnviron(t, pid); strings.Contains(raw, tokens[name]) || strings.Contains(raw, agent.EnvToken+"=") {
			t.Fatalf("%s: the token is in the environment", name)
		}
	}
	if tokens[one] == tokens[other] {
		t.Fatal("two processes share a token")
	}

	req, err := http.NewRequest(http.MethodPost, "http://"+h.agent.SDKHTTPAddr()+"/v1/sdk/ready", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokens[one])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Ready with %s's token: %d", one, resp.StatusCode)
	}
	h.waitEvent(one, "GameServerReady")
	// The call was answered after its events were recorded: anything it
	// did to the other server would be in the stream now.
	for _, e := range h.history(other) {
		if e.Type == "GameServerReady" || e.Type == "SdkConnected" {
			t.Fatalf("%s's token acted on %s: %s", one, other, e.Type)
		}
	}
}

// TestTemplateCannotLeakOrReplaceTheToken starts a template stored before
// the API refused it (issue 39, item 4): its arguments name the token and
// its environment sets the agent's variables. The token is in neither the
// process's command line (ps) nor its environment, fd 3 holds the agent's
// token (not the template's), the agent's variables keep their values, and
// the agent says what it left out.
func TestTemplateCannotLeakOrReplaceTheToken(t *testing.T) {
	h := newHarness(t)
	name := "fleets/arena/gameServers/gs-leaky"
	h.schedule(name, &eventsv1.GameServerTemplate{
		Command: "/bin/sh", Args: []string{"-c", "sleep 600", "game", "--token=${TETHER_GAMESERVER_TOKEN}", "$TETHER_GAMESERVER_TOKEN", "--port=${TETHER_PORT_GAME}"},
		Ports: []*eventsv1.PortSpec{{Name: "game"}},
		Env: map[string]string{
			agent.EnvToken: "forged", "TETHER_SDK_ADDR": "10.0.0.1:1", "TETHER_PORT_GAME": "1", "TETHER_GAMESERVER": "fleets/x/gameServers/y",
			"MODE": "ranked",
		},
	})
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)
	pid := strconv.Itoa(int(started.GetPid()))
	token := h.agent.ProcessToken(int(started.GetPid()))
	port := strconv.Itoa(int(started.GetPorts()[0].GetPort()))

	raw, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	want := []string{"/bin/sh", "-c", "sleep 600", "game", "--token=", "", "--port=" + port}
	if !slices.Equal(args, want) {
		t.Fatalf("command line %q, want %q (the token never expanded, the port still)", args, want)
	}
	env := processEnv(t, started.GetPid())
	if _, ok := env[agent.EnvToken]; ok || strings.Contains(rawEnviron(t, started.GetPid()), token) {
		t.Fatalf("the token is in the environment: %v", env)
	}
	if env["TETHER_SDK_ADDR"] != h.agent.SDKAddr() || env["TETHER_PORT_GAME"] != port || env["TETHER_GAMESERVER"] != name || env["MODE"] != "ranked" {
		t.Fatalf("the template replaced the agent's variables, or lost its own: %v", env)
	}
	f, err := os.Open("/proc/" + pid + "/fd/3")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(f).ReadString('\n')
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSuffix(line, "\n"); got != token {
		t.Fatalf("fd 3 held %q, not the agent's token", got)
	}
	for _, logged := range []string{"template variable ignored: the agent sets it", "variable=" + agent.EnvToken,
		"template argument names the SDK token"} {
		if !strings.Contains(h.logs.String(), logged) {
			t.Errorf("the agent's log does not say %q:\n%s", logged, h.logs.String())
		}
	}
}

// TestGameServerInheritsNoStrayDescriptors opens a descriptor without
// close-on-exec, as an agent's parent may leave it one (fds 10 and 251
// were seen in game servers: issue 39, item 5), before the agent starts:
// its game server holds stdin, stdout and stderr, the token's pipe and the
// agent's keep-open pipes, and not that descriptor.
func TestGameServerInheritsNoStrayDescriptors(t *testing.T) {
	stray, err := os.Create(filepath.Join(t.TempDir(), "inherited-from-the-parent"))
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	fd, err := unix.FcntlInt(stray.Fd(), unix.F_DUPFD, 200) // not close-on-exec, as a parent's would be
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	h := newHarness(t)
	name := "fleets/arena/gameServers/gs-fds"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	pid := strconv.Itoa(int(h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid()))

	entries, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if target, _ := os.Readlink("/proc/" + pid + "/fd/" + e.Name()); target == stray.Name() {
			t.Errorf("the game server holds the agent's inherited descriptor %d as its fd %d", fd, n)
		}
		fds = append(fds, n)
	}
	slices.Sort(fds)
	// stdin, stdout, stderr, the token, and the read ends of its output
	// pipes (ProcessSpec.KeepOpen).
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(fds, want) {
		t.Fatalf("the game server's descriptors are %v, want %v", fds, want)
	}
	if !strings.Contains(h.logs.String(), "descriptors inherited from the agent's parent are closed in game servers") {
		t.Errorf("the agent did not say which descriptors it found inherited:\n%s", h.logs.String())
	}
}

// TestRunAsStartsGameServersAsThatUser runs the example game server as
// nobody: its uid and gid are nobody's, with no supplementary groups, its
// HOME is nobody's, it still writes its log and its SDK goes READY.
func TestRunAsStartsGameServersAsThatUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a game server as another user needs the test to run as root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody on this machine: %v", err)
	}
	bin := buildExample(t)
	h := newHarnessOpts(t, func(o *agent.Options) { o.RunAs = "nobody" })
	name := "fleets/arena/gameServers/gs-nobody"
	h.schedule(name, exampleTemplate(bin))
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)
	h.waitEvent(name, "GameServerReady")

	status, err := os.ReadFile("/proc/" + strconv.Itoa(int(started.GetPid())) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string][]string{}
	for line := range strings.Lines(string(status)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Fields(v)
		}
	}
	for _, f := range []struct{ key, want string }{{"Uid", nobody.Uid}, {"Gid", nobody.Gid}} {
		if got := fields[f.key]; len(got) != 4 || slices.ContainsFunc(got, func(id string) bool { return id != f.want }) {
			t.Errorf("%s (real, effective, saved, filesystem) %v, want %s", f.key, got, f.want)
		}
	}
	if groups := fields["Groups"]; len(groups) != 0 {
		t.Errorf("supplementary groups %v, want none", groups)
	}
	if env := processEnv(t, started.GetPid()); env["HOME"] != nobody.HomeDir {
		t.Errorf("HOME=%q, want nobody's %q", env["HOME"], nobody.HomeDir)
	}
	// Its output reaches the agent's log files, which the agent writes.
	wait.For(t, 10*time.Second, "the game server's output in its log files", func() bool {
		files, err := filepath.Glob(filepath.Join(started.GetLogPath(), "*.log"))
		if err != nil || len(files) == 0 {
			return false
		}
		log, err := os.ReadFile(files[0])
		return err == nil && len(log) > 0
	})
}

// TestNewRefusesToRunAnyCommandUnlessTold: an agent given no directory to
// run game server commands from does not start (an operator's fleet could
// run /bin/sh -c anything on the host), and its error names both ways
// out; told explicitly, it starts.
func TestNewRefusesToRunAnyCommandUnlessTold(t *testing.T) {
	k := kit.New(t, kit.WithCommands())
	options := func(allowed []string, anyCommand bool) agent.Options {
		return agent.Options{
			HostID: "h1", JetStream: k.JS, Store: k.Store, Commands: k.Commands, LogDir: t.TempDir(),
			SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0", AllowedCommands: allowed, AllowAnyCommand: anyCommand,
		}
	}
	for name, allowed := range map[string][]string{"no directories": nil, "an empty name": {""}} {
		_, err := agent.New(options(allowed, false))
		if !errors.Is(err, agent.ErrAnyCommand) || !strings.Contains(err.Error(), "--allowed-commands") || !strings.Contains(err.Error(), "--allow-any-command") {
			t.Errorf("%s: New = %v, want ErrAnyCommand naming --allowed-commands and --allow-any-command", name, err)
		}
	}
	a, err := agent.New(options(nil, true))
	if err != nil {
		t.Fatalf("New with AllowAnyCommand: %v", err)
	}
	stopped, stop := context.WithCancel(k.Ctx)
	stop()
	if err := a.Run(stopped); err != nil { // releases its listeners
		t.Fatal(err)
	}
}

func TestCommandOutsideAllowedCommandsIsRefused(t *testing.T) {
	root := t.TempDir()
	allowed := filepath.Join(root, "games")
	if err := os.Mkdir(allowed, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nexec sleep 600\n"
	for _, p := range []string{filepath.Join(allowed, "server.sh"), filepath.Join(root, "outside.sh")} {
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleep, filepath.Join(allowed, "link-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("server.sh", filepath.Join(allowed, "link-in")); err != nil {
		t.Fatal(err)
	}
	h := newHarnessOpts(t, func(o *agent.Options) { o.AllowedCommands = []string{allowed} })
	tests := []struct {
		name    string
		command string
		allowed bool
	}{
		{"in the directory", filepath.Join(allowed, "server.sh"), true},
		{"a link in the directory to a program in it", filepath.Join(allowed, "link-in"), true},
		{"an absolute path elsewhere", sleep, false},
		{"a name found in PATH elsewhere", "sleep", false},
		{"a link in the directory to a program elsewhere", filepath.Join(allowed, "link-out"), false},
		{"a path that climbs out of the directory", allowed + "/../outside.sh", false},
		{"the shell", "/bin/sh", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "fleets/arena/gameServers/gs-cmd-" + strconv.Itoa(i)
			h.schedule(name, &eventsv1.GameServerTemplate{Command: tt.command, Args: []string{"-c", "sleep 600"}})
			if tt.allowed {
				h.waitEvent(name, "ProcessStarted")
				return
			}
			term := h.waitEvent(name, "GameServerTerminated").Data.(*eventsv1.GameServerTerminated)
			if term.GetReason() != eventsv1.Reason_REASON_PROCESS_START_FAILED ||
				!strings.Contains(term.GetEvidence().GetDetail(), "not in a directory the agent allows commands from") {
				t.Fatalf("terminated with %s: %q; want PROCESS_START_FAILED saying the command is not allowed", term.GetReason(), term.GetEvidence().GetDetail())
			}
			for _, e := range h.history(name) {
				if e.Type == "ProcessStarted" {
					t.Fatalf("a refused command was started")
				}
			}
		})
	}
}

// inspectChildEnv makes the test binary, run again, the process of
// TestDenyInspection whose environment another process tries to read.
const inspectChildEnv = "TETHER_AGENT_TEST_INSPECT_CHILD"

// TestInspectChild is that process: it denies inspection if told to, says
// so, and waits until its stdin closes. It does nothing in a normal run.
func TestInspectChild(t *testing.T) {
	switch os.Getenv(inspectChildEnv) {
	case "":
		t.Skip("the child process of TestDenyInspection")
	case "deny":
		if err := agent.DenyInspection(); err != nil {
			t.Fatal(err)
		}
	}
	os.Stdout.WriteString("ready\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestDenyInspection runs a process as nobody, as the agent's game servers
// would run as the agent's user, and another process of nobody tries to
// read its environment: it can, unless the first called DenyInspection.
func TestDenyInspection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running processes as another user needs the test to run as root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody on this machine: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(publicDir(t), "agent.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	const secret = "TETHER_PLAYER_TOKEN_KEYS=k1:aW5zcGVjdGVkLW9yLW5vdA=="
	for _, tt := range []struct {
		mode     string
		readable bool
	}{{"allow", true}, {"deny", false}} {
		t.Run(tt.mode, func(t *testing.T) {
			child := exec.Command(bin, "-test.run=^TestInspectChild$", "-test.count=1")
			child.Env = []string{inspectChildEnv + "=" + tt.mode, secret}
			child.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
			stdin, err := child.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				stdin.Close()
				_ = child.Wait()
			}()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || line != "ready\n" {
				t.Fatalf("child: %q, %v", line, err)
			}
			reader := exec.Command("/bin/cat", "/proc/"+strconv.Itoa(child.Process.Pid)+"/environ")
			reader.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			out, err := reader.CombinedOutput()
			read := err == nil && strings.Contains(string(out), secret)
			if read != tt.readable {
				t.Fatalf("another process of the same user read the environment: %v, want %v (%v: %q)", read, tt.readable, err, out)
			}
		})
	}
}

// TestStartUpWarnsOfWhatIsNotIsolated: an agent told to allow any command
// says so at start-up, and one given directories does not; one that runs
// game servers as root says so.
func TestStartUpWarnsOfWhatIsNotIsolated(t *testing.T) {
	const anyCommand = "every command is allowed"
	open := newHarnessOpts(t, func(o *agent.Options) { o.AllowedCommands, o.AllowAnyCommand = nil, true })
	closed := newHarnessOpts(t, func(o *agent.Options) { o.AllowedCommands = []string{t.TempDir()} })
	for _, h := range []*harness{open, closed} {
		wait.For(t, 10*time.Second, "the agent to start", func() bool { return strings.Contains(h.logs.String(), "agent started") })
	}
	if !strings.Contains(open.logs.String(), anyCommand) {
		t.Errorf("an agent allowing any command did not warn:\n%s", open.logs)
	}
	if strings.Contains(closed.logs.String(), anyCommand) {
		t.Errorf("an agent with allowed directories warned that any command is allowed:\n%s", closed.logs)
	}
	if root := strings.Contains(open.logs.String(), "game servers run as root"); root != (os.Geteuid() == 0) {
		t.Errorf("warned of game servers running as root: %v, running as root: %v:\n%s", root, os.Geteuid() == 0, open.logs)
	}
}
