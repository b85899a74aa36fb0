package dev_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The console's browser test needs chromium (Debian's package), node, and
// playwright-core in .tools (make tools). Without them it skips, unless
// this variable is set (CI sets it), when it fails instead.
const requireBrowserEnv = "TETHER_REQUIRE_BROWSER"

// screenshotsEnv, when set to a directory, makes the browser test save
// the fleet page, a server's timeline, the fleet page's charts and the
// overview there (docs/images for the README and docs/console.md).
const screenshotsEnv = "TETHER_SCREENSHOTS"

// browserTools finds chromium, node and playwright-core, or says which is
// missing.
func browserTools() (chromium, node, nodeModules string, missing error) {
	var errs []error
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		errs = append(errs, errors.New("no chromium on PATH (apt-get install chromium)"))
	}
	node, err = exec.LookPath("node")
	if err != nil {
		errs = append(errs, errors.New("no node on PATH (apt-get install nodejs)"))
	}
	nodeModules, err = filepath.Abs(filepath.Join("..", "..", ".tools", "node_modules"))
	if err == nil {
		_, err = os.Stat(filepath.Join(nodeModules, "playwright-core", "package.json"))
	}
	if err != nil {
		errs = append(errs, errors.New("no playwright-core in .tools (make tools)"))
	}
	return chromium, node, nodeModules, errors.Join(errs...)
}

// TestConsoleInABrowser drives the web console in chromium against
// `tether dev` (authentication on, as users run it): signing in, a fleet
// created through the API appearing on the overview and on its page, a
// game server killed with kill -9 turning TERMINATED with reason
// PROCESS_EXITED on the fleet page without a reload, the page's watch
// resuming after its connection was cut, the last hour's charts of the
// fleet page and the overview after an allocation (checked against the
// API's counts), and the server's timeline with
// the events and the explanation
// (services/console/browsertest/console.test.mjs).
func TestConsoleInABrowser(t *testing.T) {
	chromium, node, nodeModules, missing := browserTools()
	if missing != nil {
		if os.Getenv(requireBrowserEnv) != "" {
			t.Fatalf("%s is set, and the browser test cannot run: %v", requireBrowserEnv, missing)
		}
		t.Skipf("the browser test cannot run (set %s to fail instead): %v", requireBrowserEnv, missing)
	}
	script, err := filepath.Abs(filepath.Join("..", "console", "browsertest", "console.test.mjs"))
	if err != nil {
		t.Fatal(err)
	}

	dataDir := t.TempDir()
	p := startTether(t, []string{"DATABASE_URL=" + pgtest.NewDatabase(t)}, "--log-level", "warn", "dev", "--data-dir", dataDir,
		"--hosts", "2", "--rest-port", "-1", "--grpc-port", "-1", "--nats-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1",
		"--allowed-commands", filepath.Dir(gameServerBin))
	s := &stack{t: t, addrs: dev.Addresses{REST: restAddress(t, p)}, key: devKey(t, dataDir, "admin")}
	consoleURL := bannerURL(t, p, "Console  ")
	if want := s.addrs.REST + "/ui/"; consoleURL != want {
		t.Fatalf("the banner's console is %s, want %s", consoleURL, want)
	}

	// The console loads without a key (its calls to the API carry one).
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]int{"/ui": http.StatusMovedPermanently, "/ui/": http.StatusOK, "/ui/app.js": http.StatusOK, "/v1/fleets": http.StatusUnauthorized} {
		resp, err := noRedirect.Get(s.addrs.REST + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a key: %d, want %d", path, resp.StatusCode, want)
		}
	}

	// The browser reaches the API through a proxy the test can cut: a
	// network blink for the console's watch to survive.
	proxy := startCutProxy(t, strings.TrimPrefix(s.addrs.REST, "http://"))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(),
		"TETHER_CONSOLE_URL=http://"+proxy.addr()+"/ui/",
		"TETHER_API_KEY="+devKey(t, dataDir, "operator"),
		"TETHER_CHROMIUM="+chromium,
		"TETHER_NODE_MODULES="+nodeModules)
	if dir := os.Getenv(screenshotsEnv); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "TETHER_SCREENSHOTS="+abs)
	}
	// node and its chromium in a process group of their own, ended together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var output syncbuf.Buffer
	cmd.Stderr = &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }) // a chromium left behind

	// The script asks; the test does and answers. A failure here ends
	// the script (cancel), whose output is then shown.
	var failure error
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(&output, line)
		what, ok := strings.CutPrefix(line, "ASK ")
		if !ok || failure != nil {
			continue
		}
		answer, err := answerConsoleTest(t, s, proxy, what)
		if err != nil {
			failure = fmt.Errorf("answering %q: %w", what, err)
			cancel()
			continue
		}
		if _, err := io.WriteString(stdin, answer+"\n"); err != nil {
			failure = fmt.Errorf("answering %q: %w", what, err)
		}
	}
	err = cmd.Wait()
	switch {
	case failure != nil:
		t.Fatalf("%v\nbrowser test output:\n%s", failure, output.String())
	case ctx.Err() != nil:
		t.Fatalf("the browser test did not end within its deadline\noutput:\n%s", output.String())
	case err != nil:
		t.Fatalf("the browser test failed: %v\noutput:\n%s", err, output.String())
	}
	t.Logf("browser test output:\n%s", output.String())
}

// answerConsoleTest does what the browser test asks for and returns its
// answer: "create-fleet" creates a fleet (answer: its id and replicas);
// "kill F" kills a READY server of fleet F with SIGKILL (answer: its
// name), and "kill-and-wait F" also waits until the API shows it
// TERMINATED; "allocate F" allocates a server of fleet F and, once the
// fleet is settled (its servers READY or ALLOCATED, as many as its
// replicas), answers what the console's charts of the last hour must show
// (chartCounts, as JSON); "cut" cuts the browser's connections to the API
// and refuses new ones until "restore".
func answerConsoleTest(t *testing.T, s *stack, proxy *cutProxy, what string) (string, error) {
	switch verb, arg, _ := strings.Cut(what, " "); verb {
	case "create-fleet":
		const fleet, replicas = "arena", 3
		if code := s.rest("POST", "/v1/fleets?fleetId="+fleet, fleetSpec(replicas, nil), nil); code != http.StatusOK {
			return "", fmt.Errorf("create fleet %s: HTTP %d", fleet, code)
		}
		return fmt.Sprintf("%s %d", fleet, replicas), nil
	case "kill", "kill-and-wait":
		var ready []gameServer
		wait.For(t, 30*time.Second, "a READY server of "+arg, func() bool {
			ready = byState(s.gameServers(arg), "READY")
			return len(ready) > 0
		})
		victim := ready[0]
		if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
			return "", fmt.Errorf("kill -9 %d (%s): %w", victim.Pid, victim.Name, err)
		}
		if verb == "kill-and-wait" {
			wait.For(t, 30*time.Second, victim.Name+" TERMINATED", func() bool {
				var g gameServer
				return s.rest("GET", "/v1/"+victim.Name, nil, &g) == http.StatusOK && g.State == "TERMINATED"
			})
		}
		return victim.Name, nil
	case "allocate":
		if code := s.rest("POST", "/v1/fleets/"+arg+"/gameServers:allocate", map[string]any{}, nil); code != http.StatusOK {
			return "", fmt.Errorf("allocate from %s: HTTP %d", arg, code)
		}
		var want chartCounts
		wait.For(t, 30*time.Second, arg+" settled after the allocation", func() bool {
			var f struct {
				Replicas int `json:"replicas"`
			}
			if s.rest("GET", "/v1/fleets/"+arg, nil, &f) != http.StatusOK {
				return false
			}
			fleet := countCharts(s.gameServers(arg))
			if fleet.Allocated != 1 || fleet.Ready+fleet.Allocated != f.Replicas || fleet.Live != f.Replicas {
				return false
			}
			want = chartCounts{Fleet: fleet, All: countCharts(s.gameServers("-"))}
			var hosts struct {
				Hosts []struct {
					Capacity       int `json:"capacity"`
					AllocatedSlots int `json:"allocatedSlots"`
				} `json:"hosts"`
			}
			if s.rest("GET", "/v1/hosts", nil, &hosts) != http.StatusOK {
				return false
			}
			want.Used, want.Capacity = 0, 0
			for _, h := range hosts.Hosts {
				want.Used += h.AllocatedSlots
				want.Capacity += h.Capacity
			}
			return true
		})
		b, err := json.Marshal(want)
		return string(b), err
	case "cut":
		proxy.cut()
		return "ok", nil
	case "restore":
		proxy.restore()
		return "ok", nil
	default:
		return "", fmt.Errorf("unknown question %q", what)
	}
}

// chartCounts is what the console's charts of the last hour show, from
// the API's lists: the servers now per state (the state chart's last
// point), the servers started (all of them: every one began within the
// hour) and ended by reason, of the fleet and of all fleets, and the
// hosts' slots used of their capacity.
type chartCounts struct {
	Fleet, All     serverCounts
	Used, Capacity int
}

type serverCounts struct {
	Ready, Allocated, Reserved, Live, Started int
	Terminated                                map[string]int
}

func countCharts(servers []gameServer) serverCounts {
	c := serverCounts{Started: len(servers), Terminated: map[string]int{}}
	for _, g := range servers {
		switch g.State {
		case "READY":
			c.Ready++
		case "ALLOCATED":
			c.Allocated++
		case "RESERVED":
			c.Reserved++
		case "TERMINATED":
			c.Terminated[g.Reason]++
			continue
		}
		c.Live++
	}
	return c
}

// cutProxy forwards TCP connections to an address until it is cut: then
// it closes every connection and refuses new ones until restored.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

// startCutProxy listens on a free loopback port and forwards to target
// until the test ends.
func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at the end of the test
			}
			if !p.track(c) {
				continue
			}
			wg.Go(func() { p.forward(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// track keeps c to cut it later; while the proxy is cut it closes c
// instead and returns false.
func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// forward copies between c and a connection to the target until either
// side ends or the proxy is cut.
func (p *cutProxy) forward(c net.Conn) {
	defer p.drop(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		return
	}
	defer p.drop(up)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, c) // ends when either side closes
		p.drop(up)
	}()
	_, _ = io.Copy(c, up)
	p.drop(c)
	<-done
}

// drop closes c and forgets it.
func (p *cutProxy) drop(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	_ = c.Close()
}

// cut closes every connection and refuses new ones until restore.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// restore lets connections through again.
func (p *cutProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// bannerURL waits for a line of `tether dev`'s banner that starts with
// label and returns the URL on it.
func bannerURL(t *testing.T, p *process, label string) string {
	t.Helper()
	var line string
	wait.For(t, 60*time.Second, "tether dev to print "+strings.TrimSpace(label), func() bool {
		var ok bool
		line, ok = p.out.find("  " + label + "http")
		return ok
	})
	for f := range strings.FieldsSeq(line) {
		if strings.HasPrefix(f, "http://") {
			return f
		}
	}
	t.Fatalf("no URL in %q", line)
	return ""
}
