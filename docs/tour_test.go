package docs

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// TestReadmeTourRunsInOrder runs the README's tour, from "A five-minute
// tour" to the console, command by command in the order written, as a
// reader would: against `tether dev --hosts 3 --demo` (what `make run`
// starts), from a directory holding the binaries in bin/ and the
// repository's deploy/, with a home of its own, and with 7070 and 7080
// (tether dev's default ports) held by another listener, so that
// tetherctl and the curl lines must find the stack where it moved.
//
// Every command must succeed. What a reader fills in (<pid from the PID
// column>, <name>, a token) comes from the stack, as a reader would read
// it off the tables; the ids the README shows "from one run" are swapped
// for this run's. Where the README says what comes out (a reason, a
// state, WELCOME ... reconnected=true), the test checks it, and where a
// reader would wait for something to happen (a replacement READY, a host
// DRAINED) it polls, bounded. A README step the test has no reading for
// still runs and must exit 0.
func TestReadmeTourRunsInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("the README tour starts the whole dev stack and takes minutes; make test runs it")
	}
	for _, tool := range []string{"curl", "nc", "bash", "initdb", "postgres"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README tour needs %s on PATH (Debian: curl, netcat-openbsd, bash, postgresql; .ci/run installs them): %v", tool, err)
		}
	}
	root := repoRoot(t)
	tour := readmeTour(t, filepath.Join(root, "README.md"))
	r := newTourRun(t, root)
	r.holdDefaultPorts()
	r.startDev()
	for _, step := range tour {
		r.run(step)
	}
	for name, done := range r.expected {
		if !done {
			t.Errorf("the README has no step %q any more: the tour test reads it (update the test with the README)", name)
		}
	}
}

// tourStep is one command of the README tour with the sample output lines
// written under it (`#   ...`).
type tourStep struct {
	line    int
	command string
	sample  []string
	// input is the lines a reader types into it (nc ..., then JOIN ...).
	input []string
}

// readmeTour is every command of the README's sh blocks from "## A
// five-minute tour" to "## The console", in order.
func readmeTour(t *testing.T, path string) []tourStep {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var steps []tourStep
	in, inTour := false, false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "## A five-minute tour"):
			inTour = true
			continue
		case strings.HasPrefix(l, "## ") && inTour:
			inTour = false
		}
		if !inTour {
			continue
		}
		if strings.HasPrefix(l, "```") {
			in = !in && strings.TrimSpace(l) == "```sh"
			continue
		}
		if !in || strings.TrimSpace(l) == "" {
			continue
		}
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "#   ") && len(steps) > 0 {
			last := &steps[len(steps)-1]
			last.sample = append(last.sample, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasPrefix(trimmed, "JOIN ") && len(steps) > 0 {
			last := &steps[len(steps)-1]
			last.input = append(last.input, trimmed)
			continue
		}
		cmd, first := l, i+1
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(lines[i])
		}
		steps = append(steps, tourStep{line: first, command: cmd})
	}
	if len(steps) < 20 {
		t.Fatalf("found %d commands in the README's tour: its headings or sh blocks changed", len(steps))
	}
	return steps
}

// tourRun is one run of the tour: the directory it runs in, the dev
// stack, and what a reader learnt so far.
type tourRun struct {
	t    *testing.T
	dir  string
	env  []string
	dev  *exec.Cmd
	logs *syncbuf.Buffer
	// curl is the line the banner printed under "For curl:".
	curl string
	// vars are the placeholders and sample ids a reader fills in, and
	// their values in this run.
	vars map[string]string
	// watch is `gameservers watch` running in its own terminal.
	watch *background
	// expected names the steps the test reads, and whether it met them.
	expected map[string]bool
}

// newTourRun builds the binaries `make build` builds into dir/bin, links
// the repository's deploy/ beside them, and gives the tour a home of its
// own (tether dev's data dir and keys live in ~/.cache/tether/dev).
func newTourRun(t *testing.T, root string) *tourRun {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	// PostgreSQL runs as its own user when the tests run as root: it must
	// be able to reach the data dir under home.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "bin")
	for _, b := range [][]string{
		{"-o", bin + "/", "./services/cmd/tether", "./services/cmd/tetherctl"},
		{"-o", filepath.Join(bin, "tether-gameserver"), "./sdk/go/example/gameserver"},
	} {
		build := exec.Command("go", append([]string{"build"}, b...)...)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", b, err, out)
		}
	}
	if err := os.Symlink(filepath.Join(root, "deploy"), filepath.Join(dir, "deploy")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "HOME="+home, "NO_COLOR=1")
	return &tourRun{
		t: t, dir: dir, env: env, vars: map[string]string{},
		expected: map[string]bool{
			"kill -9":                false,
			"gameservers list --all": false,
			"gameservers get":        false,
			"hosts drain":            false,
			"allocate lobby":         false,
			"fleets get lobby":       false,
			"allocate demo":          false,
			"JOIN":                   false,
			"players reconnect":      false,
			"STATE":                  false,
			"audit explain":          false,
			"gameservers watch":      false,
			"projections check":      false,
			"gameservers logs":       false,
			"gameservers shutd":      false,
			"standalone debug-1":     false,
		},
	}
}

// holdDefaultPorts listens on 127.0.0.1:7070 and :7080 for the test's
// length, as another program on the machine might; a port something else
// already holds is taken all the same.
func (r *tourRun) holdDefaultPorts() {
	for _, port := range []string{"7070", "7080"} {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			r.t.Logf("port %s is already taken (%v): as good for the test", port, err)
			continue
		}
		r.t.Cleanup(func() { _ = l.Close() })
	}
}

// startDev starts `bin/tether dev --hosts 3 --demo`, as `make run` does,
// and waits for its banner.
func (r *tourRun) startDev() {
	t := r.t
	r.logs = &syncbuf.Buffer{}
	r.dev = exec.Command(filepath.Join(r.dir, "bin", "tether"), "dev", "--hosts", "3", "--demo")
	r.dev.Dir, r.dev.Env = r.dir, r.env
	r.dev.Stdout, r.dev.Stderr = r.logs, r.logs
	if err := r.dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- r.dev.Wait() }()
	t.Cleanup(func() {
		_ = r.dev.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = r.dev.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("tether dev's output:\n%s", r.logs.String())
		}
	})
	curl := regexp.MustCompile(`(?m)^For curl:\n\s+(REST=\S+ KEY=.*)$`)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if m := curl.FindStringSubmatch(r.logs.String()); m != nil {
			r.curl = m[1]
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("tether dev exited before its banner: %v\n%s", err, r.logs.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner from tether dev within 90 s:\n%s", r.logs.String())
		}
	}
	if strings.Contains(r.curl, ":7080") {
		t.Fatalf("tether dev's REST address is the port the test holds: %s", r.curl)
	}
	r.until(60*time.Second, "the demo fleet's 3 READY servers", func() bool { return len(r.servers("demo", "READY")) == 3 })
}

// shell runs one command line as the reader's shell would, with the
// "For curl:" line pasted first, in the tour's directory.
func (r *tourRun) shell(ctx context.Context, command string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-c", r.curl+"\n"+command)
	cmd.Dir, cmd.Env = r.dir, r.env
	return cmd
}

// out runs a command line to its end (at most 2 minutes) and returns its
// output; a failure fails the test, naming the README's line.
func (r *tourRun) out(step tourStep, command string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := r.shell(ctx, command).CombinedOutput()
	if err != nil {
		r.t.Fatalf("README line %d: %s\n  failed: %v\n%s", step.line, command, err, out)
	}
	return string(out)
}

// gameServer is what the tour reads off `gameservers list -o json`.
type gameServer struct {
	Name   string `json:"name"`
	Host   string `json:"host"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	Pid    int    `json:"pid"`
	Ports  []struct {
		Port int `json:"port"`
	} `json:"ports"`
}

// servers lists a fleet's servers in a state ("" for all), through
// tetherctl as a reader would.
func (r *tourRun) servers(fleet, state string) []gameServer {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := r.shell(ctx, "bin/tetherctl gameservers list --all --fleet "+fleet+" -o json").Output()
	if err != nil {
		return nil // not up yet: the callers poll
	}
	var list struct {
		GameServers []gameServer `json:"gameServers"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		r.t.Fatalf("gameservers list -o json: %v\n%s", err, raw)
	}
	var out []gameServer
	for _, g := range list.GameServers {
		if state == "" || g.State == state {
			out = append(out, g)
		}
	}
	return out
}

// server is one game server by name, as listed.
func (r *tourRun) server(name string) (gameServer, bool) {
	fleet := strings.Split(name, "/")[0]
	for _, g := range r.servers(fleet, "") {
		if strings.HasSuffix(g.Name, strings.TrimPrefix(name, fleet+"/")) {
			return g, true
		}
	}
	return gameServer{}, false
}

// until polls cond for at most d, as a reader waits for what the README
// says happens next.
func (r *tourRun) until(d time.Duration, what string, cond func() bool) {
	r.t.Helper()
	wait.For(r.t, d, what, cond)
}

// ready is a READY server of fleet, waiting for one.
func (r *tourRun) ready(fleet string) gameServer {
	r.t.Helper()
	var g gameServer
	r.until(60*time.Second, "a READY server in "+fleet, func() bool {
		list := r.servers(fleet, "READY")
		if len(list) > 0 {
			g = list[0]
		}
		return len(list) > 0
	})
	return g
}

// id is a server's name without "fleets/" and "gameServers/": FLEET/ID.
func id(name string) string {
	p := strings.Split(name, "/")
	if len(p) == 4 {
		return p[1] + "/" + p[3]
	}
	return name
}

var (
	placeholder = regexp.MustCompile(`<[^<>]+>`)
	sampleIDs   = regexp.MustCompile(`\b(gsess|ps|gs)-[a-z0-9]{10}\b`)
)

// fill puts this run's values for the placeholders and the sample ids in
// command.
func (r *tourRun) fill(step tourStep, command string) string {
	command = placeholder.ReplaceAllStringFunc(command, func(p string) string {
		v, ok := r.vars[p]
		if !ok {
			r.t.Fatalf("README line %d: the test has no value for %s in %q", step.line, p, command)
		}
		return v
	})
	command = sampleIDs.ReplaceAllStringFunc(command, func(s string) string {
		if v, ok := r.vars[s]; ok {
			return v
		}
		return s
	})
	if p, ok := r.vars["7300"]; ok {
		command = strings.ReplaceAll(command, "127.0.0.1 7300", p)
	}
	return command
}

// met marks a step the test reads as met.
func (r *tourRun) met(name string) { r.expected[name] = true }

// run runs one step of the tour: it learns what the reader would fill in
// before it, runs it, and checks what the README says comes out.
func (r *tourRun) run(step tourStep) {
	t := r.t
	t.Helper()
	c := step.command
	switch {
	case strings.HasPrefix(c, "REST=") && strings.Contains(c, "KEY="):
		return // the "For curl:" line the banner printed stands for it
	case strings.Contains(c, "<port from the PORTS column>"):
		g := r.ready("demo")
		r.vars["<port from the PORTS column>"] = fmt.Sprint(g.Ports[0].Port)
		if out := r.out(step, r.fill(step, c)); !strings.Contains(out, "hello") {
			t.Errorf("README line %d: the game server echoed %q, want hello", step.line, out)
		}
		return
	case strings.Contains(c, "gameservers watch"):
		r.watch = r.start(step, c)
		r.met("gameservers watch")
		return
	case strings.HasPrefix(c, "kill -9 <pid"):
		r.until(60*time.Second, "5 READY arena servers", func() bool { return len(r.servers("arena", "READY")) == 5 })
		victim := r.ready("arena")
		r.vars["<pid from the PID column>"] = fmt.Sprint(victim.Pid)
		r.vars["<name>"] = id(victim.Name)
		r.out(step, r.fill(step, c))
		r.until(30*time.Second, "the killed server TERMINATED and a replacement READY", func() bool {
			g, _ := r.server(id(victim.Name))
			return g.State == "TERMINATED" && len(r.servers("arena", "READY")) == 5
		})
		if r.watch != nil {
			r.until(10*time.Second, "the watch to show the killed server end", func() bool {
				return strings.Contains(r.watch.out.String(), "TERMINATED")
			})
			r.watch.stop()
		}
		r.met("kill -9")
		return
	case strings.HasPrefix(c, "bin/tetherctl gameservers list --fleet arena"):
		out := r.out(step, r.fill(step, c))
		killed := r.vars["<name>"]
		ended := strings.Contains(c, "--all")
		if killed == "" || strings.Contains(out, killed) != ended || strings.Contains(out, "ended not shown") == ended {
			t.Errorf("README line %d: %s\n  should list the killed %s only with --all, and count it under the table without:\n%s", step.line, c, killed, out)
		}
		r.met("gameservers list --all")
		return
	case strings.Contains(c, "gameservers get <name>"):
		out := r.out(step, r.fill(step, c))
		for _, want := range []string{"state: TERMINATED", "reason: PROCESS_EXITED", "signal: killed"} {
			if !strings.Contains(out, want) {
				t.Errorf("README line %d: %s\n  prints no %q:\n%s", step.line, c, want, out)
			}
		}
		r.met("gameservers get")
		return
	case strings.Contains(c, "gameservers logs <name>"):
		if out := r.out(step, r.fill(step, c)); strings.TrimSpace(out) == "" {
			t.Errorf("README line %d: no output logged by the killed server", step.line)
		}
		r.met("gameservers logs")
		return
	case strings.Contains(c, "gameservers shutdown arena/<id>"):
		// The scale down to 1 above may still be ending servers that the
		// views show READY: a server picked among them was TERMINATED when
		// the shutdown reached it (INVALID_TRANSITION). Wait until the
		// fleet has settled at its one server, as a reader who lists it
		// would see it, before picking it.
		r.until(60*time.Second, "arena settled at one live server, READY", func() bool {
			live, ready := 0, 0
			for _, g := range r.servers("arena", "") {
				if g.State != "TERMINATED" {
					live++
				}
				if g.State == "READY" {
					ready++
				}
			}
			return live == 1 && ready == 1
		})
		g := r.ready("arena")
		r.vars["<id>"] = strings.Split(id(g.Name), "/")[1]
		r.out(step, r.fill(step, c))
		r.until(30*time.Second, "the server shut down by hand to end, and the fleet to replace it", func() bool {
			s, _ := r.server(id(g.Name))
			return s.State == "TERMINATED" && len(r.servers("arena", "READY")) >= 1
		})
		r.met("gameservers shutd")
		return
	case strings.Contains(c, "gameServerId=debug-1"):
		if out := r.out(step, r.fill(step, c)); !strings.Contains(out, "debug-1") {
			t.Errorf("README line %d: creating debug-1 answered %s", step.line, out)
		}
		r.until(30*time.Second, "debug-1 READY", func() bool { return len(r.servers("standalone", "READY")) == 1 })
		r.met("standalone debug-1")
		return
	case strings.Contains(c, "hosts drain h1"):
		r.out(step, c)
		r.until(90*time.Second, "h1 DRAINED", func() bool {
			return strings.Contains(r.out(step, "bin/tetherctl hosts list | grep -w h1"), "DRAINED")
		})
		r.met("hosts drain")
		return
	case strings.HasPrefix(c, "bin/tetherctl allocate lobby"):
		r.until(60*time.Second, "3 READY lobby servers", func() bool { return len(r.servers("lobby", "READY")) == 3 })
		r.out(step, c)
		r.met("allocate lobby")
		return
	case strings.HasPrefix(c, "bin/tetherctl fleets get lobby"):
		// 3 → 5, or 4 → 5 after a 3 → 4 when the controller saw the
		// two allocations in two passes, as the README says.
		want, last := "→ 5 by buffer 3: 2 allocated + 0 reserved", ""
		r.until(60*time.Second, "the lobby fleet scaled "+want, func() bool {
			last = r.out(step, c)
			if !strings.Contains(last, want) {
				r.t.Logf("fleets get lobby, not yet %q:\n%s", want, last)
				return false
			}
			return true
		})
		r.met("fleets get lobby")
		return
	case strings.HasPrefix(c, "bin/tetherctl allocate demo"):
		r.learnAllocation(step, r.out(step, c))
		r.met("allocate demo")
		return
	case len(step.input) > 0:
		r.join(step)
		return
	case strings.HasPrefix(c, "bin/tetherctl players list"):
		want := "DISCONNECTED"
		r.until(30*time.Second, "bob "+want, func() bool { return strings.Contains(r.out(step, r.fill(step, c)), want) })
		return
	case strings.HasPrefix(c, "bin/tetherctl players reconnect"):
		out := r.out(step, r.fill(step, c))
		m := regexp.MustCompile(`Token:\s+(\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("README line %d: reconnect printed no token:\n%s", step.line, out)
		}
		r.vars["<the fresh token>"] = m[1]
		r.met("players reconnect")
		return
	case strings.HasPrefix(c, "echo STATE"):
		if out := r.out(step, r.fill(step, c)); !strings.Contains(out, "STATE ALLOCATED") || !strings.Contains(out, "map=dust") {
			t.Errorf("README line %d: the game server was told %q, want STATE ALLOCATED ... map=dust", step.line, out)
		}
		r.met("STATE")
		return
	case strings.HasPrefix(c, "bin/tetherctl audit explain") && !strings.Contains(c, "fleets/"):
		out := r.out(step, r.fill(step, c))
		if !strings.Contains(out, "PROCESS_EXITED") || !strings.Contains(out, "TERMINATED") {
			t.Errorf("README line %d: explain of the killed server says:\n%s", step.line, out)
		}
		r.met("audit explain")
		return
	case strings.HasPrefix(c, "bin/tetherctl audit tail"):
		b := r.start(step, r.fill(step, c))
		b.stop()
		return
	case strings.HasPrefix(c, "bin/tetherctl projections check"):
		if out := r.out(step, c); !strings.Contains(out, "0 differences") && !strings.Contains(strings.ToLower(out), "no difference") {
			t.Errorf("README line %d: projections check says:\n%s", step.line, out)
		}
		r.met("projections check")
		return
	}
	r.out(step, r.fill(step, c))
}

// learnAllocation reads the allocation the matchmaker's step printed, and
// maps the README's sample ids (from one run) to this run's.
func (r *tourRun) learnAllocation(step tourStep, out string) {
	t := r.t
	field := func(text, name string) string {
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s+(\S+)`).FindStringSubmatch(text)
		if m == nil {
			return ""
		}
		return m[1]
	}
	sample := strings.Join(step.sample, "\n")
	for _, name := range []string{"Game server:", "Game session:"} {
		from, to := field(sample, name), field(out, name)
		if to == "" {
			t.Fatalf("README line %d: the allocation printed no %s:\n%s", step.line, name, out)
		}
		r.vars[strings.TrimPrefix(from, "demo/")] = strings.TrimPrefix(to, "demo/")
	}
	from, to := field(sample, "Endpoint:"), field(out, "Endpoint:")
	r.vars["7300"] = strings.Replace(to, ":", " ", 1)
	if from != "127.0.0.1:7300" {
		t.Fatalf("README line %d: the sample endpoint is %s; the test swaps 127.0.0.1 7300", step.line, from)
	}
	// The token table: the same player in the sample and in this run.
	players := func(text string) map[string][2]string {
		m := map[string][2]string{}
		for _, l := range strings.Split(text, "\n") {
			f := strings.Fields(l)
			if len(f) == 4 && strings.Contains(f[0], "/ps-") {
				m[f[1]] = [2]string{strings.Split(f[0], "/")[1], f[3]}
			}
		}
		return m
	}
	was, is := players(sample), players(out)
	for player, s := range was {
		now, ok := is[player]
		if !ok {
			t.Fatalf("README line %d: no player session for %s in:\n%s", step.line, player, out)
		}
		r.vars[s[0]] = now[0]
		r.vars["<"+player+"'s token>"] = now[1]
	}
}

// join is `nc HOST PORT` and the JOIN line a reader types into it: the
// game server must answer what the README's sample says (WELCOME ...
// reconnected=...). Then nc is closed, as with Ctrl-C.
func (r *tourRun) join(step tourStep) {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := r.shell(ctx, r.fill(step, step.command))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	for _, in := range step.input {
		if _, err := io.WriteString(stdin, r.fill(step, in)+"\n"); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() {
			t.Fatalf("README line %d: no answer to %s", step.line, in)
		}
		got := lines.Text()
		for _, want := range step.sample {
			if strings.HasPrefix(want, "WELCOME") && got != want {
				t.Errorf("README line %d: the game server answered %q, the README says %q", step.line, got, want)
			}
		}
	}
	_ = stdin.Close()
	_ = cmd.Process.Kill() // Ctrl-C
	_ = cmd.Wait()
	r.met("JOIN")
}

// background is a command left running, as in a terminal of its own.
type background struct {
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan struct{}
}

// start starts a command that runs until stopped.
func (r *tourRun) start(step tourStep, command string) *background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{cmd: r.shell(ctx, command), out: &syncbuf.Buffer{}, cancel: cancel, done: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		r.t.Fatalf("README line %d: %v", step.line, err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	r.t.Cleanup(b.stop)
	wait.Holds(r.t, time.Second, fmt.Sprintf("README line %d: %s running", step.line, command), func() bool {
		select {
		case <-b.done:
			return false
		default:
			return true
		}
	})
	return b
}

// stop ends a background command.
func (b *background) stop() {
	b.cancel()
	<-b.done
}
