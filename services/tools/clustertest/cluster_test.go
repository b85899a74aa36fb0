package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/sdk/go/apiclient"
	"github.com/tetherhq/tether/services/dev/pgtemp"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/testkit/netns"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// Ports every component uses on its own host's address.
const (
	natsPort    = 4222
	routePort   = 6222
	monitorPort = 8222 // NATS monitoring (/jsz, /routez), dumped when a scenario fails
	grpcPort    = 9090
	restPort    = 8080
	adminPort   = 7090
	leaseTTL    = 4 * time.Second
	fleetSize   = 20
	agentHosts  = 4
	hostLostFor = 20 * time.Second
	// unreachableAfter is the controllers' host-unreachable-after,
	// production's default: a host whose heartbeat gap is longer has its
	// servers taken out of allocation. (It was 5 s until 2026-11-28, to
	// see the effect sooner; then the 8.5 s an agent takes to leave a
	// cut-off NATS node (g2) made three of four hosts UNREACHABLE and
	// emptied the pool for up to 4 s, an effect of the test's setting,
	// not of production's.)
	unreachableAfter = 10 * time.Second
)

// cluster is the running topology.
type cluster struct {
	t       *testing.T // the running (sub)test
	root    *testing.T // TestCluster: what outlives a subtest is cleaned up with it
	ctx     context.Context
	bin     string // directory of the binaries
	dir     string // logs and state
	net     *netns.Network
	pg      *pgtemp.Server
	dbURL   string
	natsURL string
	tokens  string

	nats, apis, projectors, controllers, agents []*proc
	api                                         *apiClients

	jsMu sync.Mutex
	js   map[string]jetstream.JetStream // by NATS node
	// lostHosts are hosts the test cut for longer than host-lost-after,
	// as "hosts/{id}": HOST_LOST is their servers' expected end.
	lostHosts map[string]bool
}

// proc is one component's process in its host's namespace.
type proc struct {
	name string
	host *netns.Host
	args []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start(c *cluster) {
	c.t.Helper()
	f, err := os.OpenFile(p.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := p.host.Command(context.Background(), p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "TETHER_PLAYER_TOKEN_KEYS="+c.tokens)
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its exit is the test's doing, or shows in its log
		_ = f.Close()  // the child has its own descriptor
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// signal sends sig and waits until the process has exited.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig) // already gone is fine
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s did not exit within 30s of %s", p.name, sig)
	}
}

func (p *proc) adminURL(path string) string {
	return fmt.Sprintf("http://%s:%d%s", p.host.IP, adminPort, path)
}

// status is the body of the process's /readyz, or the error.
func (p *proc) status() string {
	resp, err := http.Get(p.adminURL("/readyz"))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // a short body; a read error shows as a truncated status
	return strings.TrimSpace(string(b))
}

func (p *proc) leads() bool { return strings.Contains(p.status(), "holds the") }

// clusterTest skips (or, under make cluster-test, fails) where network
// namespaces cannot be built.
func clusterTest(t *testing.T) {
	if err := netns.Available(); err != nil {
		if os.Getenv("TETHER_CLUSTER_TEST") == "require" {
			t.Fatalf("the cluster test cannot run here: %v", err)
		}
		t.Skipf("skipping the multi-host cluster test: %v (run as root, or make cluster-test to require it)", err)
	}
	if os.Getenv("TETHER_CLUSTER_TEST") == "" {
		t.Skip("skipping the multi-host cluster test: set TETHER_CLUSTER_TEST=1 or run make cluster-test")
	}
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, root: t, ctx: t.Context(), dir: t.TempDir(), tokens: playertoken.NewKeySpec("cluster"), lostHosts: map[string]bool{}, js: map[string]jetstream.JetStream{}}
	c.bin = build(t)
	c.net = netns.New(t)
	var err error
	c.pg, err = pgtemp.Start(c.ctx, pgtemp.Options{ListenAddresses: []string{c.net.BridgeIP()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.pg.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := c.pg.CreateDatabase(c.ctx, "tether", ""); err != nil {
		t.Fatal(err)
	}
	c.dbURL = strings.Replace(c.pg.URL("tether"), "127.0.0.1", c.net.BridgeIP(), 1)

	// Processes stop before the namespaces go (cleanups run last first).
	t.Cleanup(func() {
		var view strings.Builder // the NATS nodes' view, asked before they stop
		if t.Failed() {
			c.dumpNATS(func(format string, args ...any) { fmt.Fprintf(&view, format+"\n", args...) })
		}
		for _, group := range [][]*proc{c.agents, c.apis, c.controllers, c.projectors, c.nats} {
			for _, p := range group {
				p.signal(t, syscall.SIGTERM)
			}
		}
		// A stopped agent leaves its game servers running (the next agent
		// of the host deals with them); this test's are stopped here.
		c.killGameServers()
		if t.Failed() || os.Getenv("TETHER_CLUSTER_KEEP_LOGS") != "" {
			c.keepLogs(t.Failed(), view.String())
		}
	})

	var hosts []*netns.Host
	var urls, routes []string
	for i := range 3 {
		h := c.net.Host(fmt.Sprintf("nats%d", i+1))
		hosts = append(hosts, h)
		urls = append(urls, fmt.Sprintf("nats://%s:%d", h.IP, natsPort))
		routes = append(routes, fmt.Sprintf("nats://%s:%d", h.IP, routePort))
	}
	c.natsURL = strings.Join(urls, ",")
	conf, err := filepath.Abs(natsClusterConf)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hosts {
		args := []string{"-c", conf, "--jetstream", "--store_dir", filepath.Join(c.dir, h.Name),
			"--server_name", h.Name, "--addr", h.IP, "--port", fmt.Sprint(natsPort), "--http_port", fmt.Sprint(monitorPort),
			"--cluster_name", "tether", "--cluster", routes[i], "--routes", strings.Join(routes, ",")}
		if os.Getenv("TETHER_CLUSTER_NATS_DEBUG") != "" {
			args = append(args, "-D") // raft elections and votes in the nodes' logs
		}
		p := c.proc(h, filepath.Join(c.bin, "nats-server"), args...)
		c.nats = append(c.nats, p)
		p.start(c)
	}
	// tether migrate, from the test's own namespace, once the cluster has
	// a JetStream meta leader (it retries until then).
	wait.Until(t, time.Minute, "tether migrate --stream-replicas 3", func() error {
		out, err := exec.CommandContext(c.ctx, filepath.Join(c.bin, "tether"), "migrate", "--stream-replicas", "3",
			"--lease-ttl", leaseTTL.String(), "--nats-url", c.natsURL, "--database-url", c.dbURL, "--log-level", "warn").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})

	tether := filepath.Join(c.bin, "tether")
	common := func(h *netns.Host) []string {
		return []string{"--nats-url", c.natsURL, "--admin-addr", fmt.Sprintf("%s:%d", h.IP, adminPort), "--log-level", "info"}
	}
	for i := range 2 {
		h := c.net.Host(fmt.Sprintf("api%d", i+1))
		c.apis = append(c.apis, c.proc(h, tether, append([]string{"apiserver", "--database-url", c.dbURL,
			"--grpc-addr", fmt.Sprintf("%s:%d", h.IP, grpcPort), "--http-addr", fmt.Sprintf("%s:%d", h.IP, restPort),
			"--insecure"}, common(h)...)...)) // the test's own network
		h = c.net.Host(fmt.Sprintf("proj%d", i+1))
		c.projectors = append(c.projectors, c.proc(h, tether, append([]string{"projector", "--database-url", c.dbURL, "--id", h.Name}, common(h)...)...))
		h = c.net.Host(fmt.Sprintf("ctl%d", i+1))
		c.controllers = append(c.controllers, c.proc(h, tether, append([]string{"controller", "--database-url", c.dbURL, "--id", h.Name,
			"--host-lost-after", hostLostFor.String(), "--host-unreachable-after", unreachableAfter.String()}, common(h)...)...))
	}
	for i := range agentHosts {
		h := c.net.Host(fmt.Sprintf("host%d", i+1))
		c.agents = append(c.agents, c.proc(h, tether, append([]string{"agent", "--host-id", h.Name, "--address", h.IP,
			"--log-dir", filepath.Join(c.dir, h.Name+"-logs"), "--capacity", "10", "--labels", "zone=" + h.Name,
			"--allow-root-game-servers", "--allowed-commands", c.bin}, common(h)...)...)) // the test runs as root; it tests failover, not isolation
	}
	for _, group := range [][]*proc{c.projectors, c.controllers, c.apis, c.agents} {
		for _, p := range group {
			p.start(c)
		}
	}
	for _, group := range [][]*proc{c.projectors, c.controllers, c.apis, c.agents} {
		for _, p := range group {
			wait.For(t, time.Minute, p.name+" to be ready", func() bool { return strings.HasPrefix(p.status(), "ready") })
		}
	}
	var endpoints []string
	for _, p := range c.apis {
		endpoints = append(endpoints, fmt.Sprintf("%s:%d", p.host.IP, grpcPort))
	}
	c.api = newAPIClients(t, endpoints)
	return c
}

func (c *cluster) proc(h *netns.Host, bin string, args ...string) *proc {
	return &proc{name: h.Name, host: h, args: append([]string{bin}, args...), log: filepath.Join(c.dir, h.Name+".log")}
}

// killGameServers kills every game-server process started from this
// test's binaries.
func (c *cluster) killGameServers() {
	procs, err := gameServerProcesses()
	if err != nil {
		c.root.Error(err)
		return
	}
	for _, pids := range procs {
		for _, pid := range pids {
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			if err != nil || !strings.HasPrefix(exe, c.bin+string(os.PathSeparator)) {
				continue // gone, or not ours
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				c.root.Errorf("kill game server %d: %v", pid, err)
			}
		}
	}
}

// dumpLogs writes the tail of every component's log, and its last
// warnings and errors, to w.
func (c *cluster) dumpLogs(w io.Writer) {
	for _, group := range [][]*proc{c.nats, c.apis, c.projectors, c.controllers, c.agents} {
		for _, p := range group {
			b, err := os.ReadFile(p.log)
			if err != nil {
				fmt.Fprintf(w, "--- %s: %v\n", p.name, err)
				continue
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var problems []string
			for _, l := range lines {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					problems = append(problems, l)
				}
			}
			fmt.Fprintf(w, "--- %s (last 30 lines)\n%s\n--- %s (last 40 warnings and errors)\n%s\n", p.name, strings.Join(lines[max(0, len(lines)-30):], "\n"),
				p.name, strings.Join(problems[max(0, len(problems)-40):], "\n"))
		}
	}
}

// keepLogs copies every component's log (and the agents' game server
// logs) out of the test's temporary directory, which is removed, into a
// directory that stays, and says where; after a failure it adds the NATS
// nodes' view (natsView) and each log's tail (tailsFile).
func (c *cluster) keepLogs(failed bool, natsView string) {
	dst, err := os.MkdirTemp("", "tether-cluster-logs-")
	if err != nil {
		c.root.Logf("keep logs: %v", err)
		return
	}
	err = filepath.WalkDir(c.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		rel, err := filepath.Rel(c.dir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		c.root.Logf("keep logs: %v", err)
	}
	if failed {
		// The tails go to a file rather than the test's output, whose
		// last lines are then the failures (make cluster-test repeats
		// each failed subtest's output at the end).
		var tails strings.Builder
		tails.WriteString(natsView)
		c.dumpLogs(&tails)
		if err := os.WriteFile(filepath.Join(dst, tailsFile), []byte(tails.String()), 0o644); err != nil {
			c.root.Logf("keep logs: %v", err)
		}
		c.root.Logf("logs kept in %s; the NATS nodes' view and each component's last lines in %s", dst, tailsFile)
		return
	}
	c.root.Logf("logs kept in %s", dst)
}

// tailsFile is where keepLogs puts the NATS nodes' view and each
// component's last lines after a failure.
const tailsFile = "tails.txt"

// dumpNATS writes each NATS node's view of the cluster with logf: its
// routes and the events stream's replicas and leader, as its monitoring
// port reports them.
func (c *cluster) dumpNATS(logf func(format string, args ...any)) {
	client := http.Client{Timeout: 2 * time.Second}
	for _, p := range c.nats {
		for _, path := range []string{"/routez", "/jsz?streams=true&consumers=false&raft=true"} {
			url := fmt.Sprintf("http://%s:%d%s", p.host.IP, monitorPort, path)
			resp, err := client.Get(url)
			if err != nil {
				logf("--- %s %s: %v", p.name, path, err)
				continue
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close() // read in full or failed above
			if err != nil {
				logf("--- %s %s: %v", p.name, path, err)
				continue
			}
			logf("--- %s %s\n%s", p.name, path, b)
		}
	}
}

// natsClusterConf is the route settings a Tether NATS cluster runs with
// (deploy/nats/tether-cluster.conf says why), relative to this package.
const natsClusterConf = "../../../deploy/nats/tether-cluster.conf"

// metaLeader is the JetStream meta leader as node's monitoring port
// reports it, or "" if it knows none.
func (c *cluster) metaLeader(node *proc) (string, error) {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s:%d/jsz", node.host.IP, monitorPort))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return "", fmt.Errorf("%s /jsz: %w", node.name, err)
	}
	if jsz.Meta == nil {
		return "", nil
	}
	return jsz.Meta.Leader, nil
}

// leader returns the one process of group whose lease status says it
// holds the lease, waiting for one.
func (c *cluster) leader(group []*proc) *proc {
	c.t.Helper()
	var l *proc
	wait.For(c.t, 30*time.Second, "one instance to hold the lease", func() bool {
		l = nil
		n := 0
		for _, p := range group {
			if p.leads() {
				l, n = p, n+1
			}
		}
		return n == 1
	})
	return l
}

// build compiles the binaries the cluster runs into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := t.TempDir()
	for _, args := range [][]string{
		{"build", "-o", bin + "/", "./services/cmd/tether", "./services/cmd/tetherctl"},
		{"build", "-o", filepath.Join(bin, "tether-gameserver"), "./sdk/go/example/gameserver"},
		{"build", "-o", filepath.Join(bin, "nats-server"), "github.com/nats-io/nats-server/v2"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The agents run it as their game servers' command.
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// rest sends a JSON request to the first API replica's REST gateway.
func (c *cluster) rest(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, fmt.Sprintf("http://%s:%d%s", c.apis[0].host.IP, restPort, path), r)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// apiClients are gRPC stubs over both API replicas (apiclient: round robin,
// retried on another replica).
type apiClients struct {
	alloc       tetherv1.AllocationServiceClient
	servers     tetherv1.GameServerServiceClient
	projections tetherv1.ProjectionServiceClient
}

func newAPIClients(t *testing.T, endpoints []string) *apiClients {
	t.Helper()
	conn, err := apiclient.Dial(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &apiClients{alloc: tetherv1.NewAllocationServiceClient(conn), servers: tetherv1.NewGameServerServiceClient(conn),
		projections: tetherv1.NewProjectionServiceClient(conn)}
}
