package dev_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/dev/devkeys"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/nats/lease"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// gameServerBin is the example game server, built once for the package.
var gameServerBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here runs a whole stack with real processes; `make
		// test-short` leaves them to `make test`.
		fmt.Println("services/dev: whole-stack tests skipped with -short")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "tether-dev-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	gameServerBin = filepath.Join(dir, "gameserver")
	if err := buildGameServer(gameServerBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = pgtest.Run(m)
	}
	// The binaries built for the tests go with them: each run used to
	// leave about 80 MB in the temporary directory.
	dirs := []string{dir}
	if tetherBin != "" { // built by a test, in a directory of its own
		dirs = append(dirs, filepath.Dir(tetherBin))
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			fmt.Fprintln(os.Stderr, "remove the tests' binaries:", err)
		}
	}
	os.Exit(code)
}

// buildGameServer builds the example game server to path, in a
// directory every user may read, so that a game server can be launched
// whatever user runs it.
func buildGameServer(path string) error {
	build := exec.Command("go", "build", "-o", path, "github.com/tetherhq/tether/sdk/go/example/gameserver")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build example game server: %w", err)
	}
	return os.Chmod(filepath.Dir(path), 0o755)
}

// stack is a whole Tether (NATS, projector, API, controller, agents) in
// this process, over a test database.
type stack struct {
	t     testing.TB
	ctx   context.Context
	addrs dev.Addresses
	key   string // the API key rest calls with, if any
	store *natsjs.Store
	js    jetstream.JetStream // the test's own client of the stack's NATS
}

func startStack(t testing.TB, hosts int, configure ...func(*dev.Options)) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan dev.Addresses, 1)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		opts := dev.Options{
			DataDir: t.TempDir(), GRPCPort: -1, RESTPort: -1, NATSPort: -1, SDKPort: -1,
			GamePortBase: freeport.Block(t, 100*hosts), Hosts: hosts, HostCapacity: 4,
			DatabaseURL: pgtest.NewDatabase(t), Logger: log, AllowedCommands: []string{filepath.Dir(gameServerBin)},
			Ready: func(a dev.Addresses) { ready <- a },
		}
		for _, c := range configure {
			c(&opts)
		}
		done <- dev.Run(ctx, opts)
	}()
	var addrs dev.Addresses
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("dev stack did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("dev stack did not start within 30s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dev stack stopped with error: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("dev stack did not stop within 30s")
		}
	})
	s := &stack{t: t, ctx: ctx, addrs: addrs}
	s.store = storeFor(t, s)
	return s
}

// storeFor connects a test's own client to the stack's NATS.
func storeFor(t testing.TB, s *stack) *natsjs.Store {
	t.Helper()
	nc, err := nats.Connect(s.addrs.NATS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s.js = js
	store, err := natsjs.New(s.ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func (s *stack) rest(method, path string, body any, out any) int {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.addrs.REST+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	if resp.StatusCode != http.StatusOK {
		s.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// gameServer is the REST shape tests read.
type gameServer struct {
	Name    string `json:"name"`
	State   string `json:"state"`
	Pid     int    `json:"pid"`
	Address string `json:"address"`
	Reason  string `json:"reason"`
	Ports   []struct {
		Name string `json:"name"`
		Port int    `json:"port"`
	} `json:"ports"`
}

func (s *stack) gameServers(fleet string) []gameServer {
	s.t.Helper()
	var out struct {
		GameServers []gameServer `json:"gameServers"`
	}
	if code := s.rest("GET", "/v1/fleets/"+fleet+"/gameServers?pageSize=1000", nil, &out); code != http.StatusOK {
		s.t.Fatalf("list game servers: %d", code)
	}
	return out.GameServers
}

func byState(list []gameServer, state string) []gameServer {
	var out []gameServer
	for _, g := range list {
		if g.State == state {
			out = append(out, g)
		}
	}
	return out
}

func fleetSpec(replicas int, env map[string]string) map[string]any {
	return map[string]any{
		"replicas": replicas,
		"template": map[string]any{
			"command": gameServerBin,
			"ports":   []any{map[string]any{"name": "game", "protocol": "UDP"}},
			"env":     env,
		},
	}
}

// echo sends a datagram to a game server and expects it back.
func echo(t testing.TB, g gameServer) {
	t.Helper()
	if len(g.Ports) == 0 {
		t.Fatalf("%s has no port", g.Name)
	}
	conn, err := net.Dial("udp", net.JoinHostPort(g.Address, fmt.Sprint(g.Ports[0].Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 64)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := conn.Write([]byte("ping " + g.Name)); err != nil {
			t.Fatal(err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err == nil && string(buf[:n]) == "ping "+g.Name {
			return
		}
	}
	t.Fatalf("%s on port %d did not echo", g.Name, g.Ports[0].Port)
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// history returns the events of a game server, in order.
func (s *stack) history(name string) []events.Envelope {
	s.t.Helper()
	h, err := s.store.History(s.ctx, serverSubject(s.t, s.ctx, s.store, name), 0)
	if err != nil {
		s.t.Fatal(err)
	}
	return h
}

// serverSubject is the subject of a game server's events: the host
// subject its first event is on, as the real agents of these stacks write
// them; the subject without a host when it has none there.
func serverSubject(t testing.TB, ctx context.Context, store *natsjs.Store, name string) string {
	t.Helper()
	h, err := store.History(ctx, events.GameServerHostSubjects(name), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) == 0 {
		return events.MustSubject(name)
	}
	return h[0].Subject
}

func types(h []events.Envelope) string {
	var out []string
	for _, e := range h {
		out = append(out, e.Type)
	}
	return strings.Join(out, " → ")
}

func TestFleetRunsRealProcessesAndHealsAndScales(t *testing.T) {
	s := startStack(t, 2)
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(3, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var ready []gameServer
	wait.For(t, 10*time.Second, "3 READY game servers", func() bool {
		ready = byState(s.gameServers("arena"), "READY")
		return len(ready) == 3
	})
	for _, g := range ready {
		if !alive(g.Pid) {
			t.Fatalf("%s: process %d is not running", g.Name, g.Pid)
		}
		echo(t, g)
	}

	// SIGKILL one process: its exit is recorded with the signal, and the
	// controller brings the fleet back to 3 READY.
	victim := ready[0]
	killedAt := time.Now()
	if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var last events.Envelope
	wait.For(t, 10*time.Second, "the killed server to be terminated", func() bool {
		h := s.history(victim.Name)
		last = h[len(h)-1]
		return last.Type == "GameServerTerminated"
	})
	h := s.history(victim.Name)
	exited := h[len(h)-2]
	if x, ok := exited.Data.(*eventsv1.ProcessExited); !ok || x.GetSignal() != "killed" {
		t.Fatalf("event before termination: %s %v (history %s)", exited.Type, exited.Data, types(h))
	}
	// The exit is observed by the agent waiting on the process, not by a
	// missed heartbeat (which would take seconds). Its latency is a
	// benchmark figure (docs/benchmarks.md), not asserted here.
	if exited.Time.Before(killedAt) {
		t.Fatalf("exit recorded at %s, before the kill at %s", exited.Time, killedAt)
	}
	t.Logf("exit recorded %s after the kill", exited.Time.Sub(killedAt))
	term := last.Data.(*eventsv1.GameServerTerminated)
	if term.GetReason() != eventsv1.Reason_REASON_PROCESS_EXITED || term.GetEvidence().GetSignal() != "killed" {
		t.Fatalf("termination: reason %s evidence %v", term.GetReason(), term.GetEvidence())
	}
	wait.For(t, 10*time.Second, "the fleet back at 3 READY, without the killed server", func() bool {
		ready = byState(s.gameServers("arena"), "READY")
		for _, g := range ready {
			if g.Name == victim.Name {
				return false // the views have not applied its termination yet
			}
		}
		return len(ready) == 3
	})

	// Scale to 1: two servers end with FLEET_SCALED_DOWN and their processes go.
	if code := s.rest("PATCH", "/v1/fleets/arena?updateMask=replicas", map[string]any{"replicas": 1}, nil); code != http.StatusOK {
		t.Fatalf("scale: %d", code)
	}
	var gone []gameServer
	wait.For(t, 15*time.Second, "2 servers scaled down", func() bool {
		gone = nil
		for _, g := range byState(s.gameServers("arena"), "TERMINATED") {
			if g.Reason == "FLEET_SCALED_DOWN" {
				gone = append(gone, g)
			}
		}
		return len(gone) == 2 && len(byState(s.gameServers("arena"), "READY")) == 1
	})
	for _, g := range gone {
		for _, r := range ready {
			if r.Name == g.Name && alive(r.Pid) {
				t.Fatalf("%s was scaled down but its process %d still runs", g.Name, r.Pid)
			}
		}
	}
}

func TestCrashBeforeReadyIsRestartedThenGivenUp(t *testing.T) {
	s := startStack(t, 1)
	spec := fleetSpec(1, map[string]string{"TETHER_EXAMPLE_CRASH_BEFORE_READY": "true"})
	if code := s.rest("POST", "/v1/fleets?fleetId=crashy", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var first string
	wait.For(t, 15*time.Second, "a server crashed before Ready", func() bool {
		for _, g := range byState(s.gameServers("crashy"), "TERMINATED") {
			if g.Reason == "PROCESS_CRASHED_BEFORE_READY" {
				first = g.Name
				return true
			}
		}
		return false
	})
	h := s.history(first)
	var starts, restarts int
	for _, e := range h {
		switch d := e.Data.(type) {
		case *eventsv1.ProcessStarted:
			starts++
		case *eventsv1.ProcessExited:
			if d.GetWillRestart() {
				restarts++
			}
			if !d.GetBeforeReady() {
				t.Fatalf("exit not marked before Ready: %v", d)
			}
		case *eventsv1.GameServerReady:
			t.Fatalf("a crashing server became Ready: %s", types(h))
		}
	}
	if starts != 3 || restarts != 2 {
		t.Fatalf("%d starts and %d restarts, want 3 and 2 (bounded): %s", starts, restarts, types(h))
	}
}

func fleetWithHealth(replicas int, env map[string]string) map[string]any {
	f := fleetSpec(replicas, env)
	f["health"] = map[string]any{"initialDelaySeconds": 1, "periodSeconds": 1, "failureThreshold": 2}
	f["sdkDisconnectGraceSeconds"] = 2
	return f
}

func TestHungServerIsDetectedTerminatedAndReplaced(t *testing.T) {
	s := startStack(t, 1)
	for _, tc := range []struct {
		fleet string
		env   map[string]string
	}{
		{"hung", map[string]string{"TETHER_EXAMPLE_STOP_HEARTBEAT_AFTER": "500ms"}},
		// A live connection is not a heartbeat: reopening streams must not hide a hang.
		{"hung-flappy", map[string]string{"TETHER_EXAMPLE_STOP_HEARTBEAT_AFTER": "500ms", "TETHER_EXAMPLE_RECONNECT_EVERY": "300ms"}},
	} {
		t.Run(tc.fleet, func(t *testing.T) { checkHungDetected(t, s, tc.fleet, tc.env) })
	}
}

func checkHungDetected(t *testing.T, s *stack, fleet string, env map[string]string) {
	if code := s.rest("POST", "/v1/fleets?fleetId="+fleet, fleetWithHealth(1, env), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var hung string
	wait.For(t, 20*time.Second, "a server terminated for failed health", func() bool {
		for _, g := range byState(s.gameServers(fleet), "TERMINATED") {
			if g.Reason == "HEALTH_CHECK_FAILED" {
				hung = g.Name
				return true
			}
		}
		return false
	})
	h := s.history(hung)
	var degraded int
	var unhealthy *eventsv1.GameServerUnhealthy
	var unhealthyAt time.Time
	for _, e := range h {
		switch d := e.Data.(type) {
		case *eventsv1.HealthDegraded:
			degraded++
		case *eventsv1.GameServerUnhealthy:
			unhealthy, unhealthyAt = d, e.Time
		}
	}
	if degraded < 2 || unhealthy == nil {
		t.Fatalf("want HealthDegraded ×2 then GameServerUnhealthy: %s", types(h))
	}
	ev := unhealthy.GetEvidence()
	if ev.GetMissedPeriods() != 2 || ev.GetPeriodSeconds() != 1 || ev.GetLastHeartbeatTime() == nil {
		t.Fatalf("evidence %v", ev)
	}
	// docs/benchmarks.md's target: detected within initialDelay + period ×
	// threshold + 1 s (1 + 1×2 + 1 = 4 s) of the last heartbeat, and not
	// before period × threshold.
	if lag := unhealthyAt.Sub(ev.GetLastHeartbeatTime().AsTime()); lag > 4*time.Second || lag < 2*time.Second {
		for _, e := range h {
			t.Logf("%s %s %v", e.Time.Format("15:04:05.000"), e.Type, e.Data)
		}
		t.Fatalf("unhealthy %s after the last heartbeat, want within [2s, 4s]", lag)
	}
	// The lifecycle chain (connection events may interleave as the process dies).
	var chain []events.Envelope
	for _, e := range h {
		switch e.Type {
		case "GameServerUnhealthy", "ShutdownRequested", "ProcessExited", "GameServerTerminated":
			chain = append(chain, e)
		}
	}
	want := "GameServerUnhealthy → ShutdownRequested → ProcessExited → GameServerTerminated"
	if got := types(chain); got != want {
		t.Fatalf("lifecycle chain %s, want %s (history %s)", got, want, types(h))
	}
	if term := chain[3].Data.(*eventsv1.GameServerTerminated); term.GetReason() != eventsv1.Reason_REASON_HEALTH_CHECK_FAILED {
		t.Fatalf("terminated with %s", term.GetReason())
	}
	// A replacement is scheduled (it will hang too, which is what it is told).
	wait.For(t, 10*time.Second, "a replacement", func() bool {
		for _, g := range s.gameServers(fleet) {
			if g.Name != hung {
				return true
			}
		}
		return false
	})
}

// A server whose SDK connection drops and comes back every 300 ms, while it
// keeps heartbeating, is never terminated (docs/architecture.md, "The
// failures it is built against", 1).
func TestReconnectingServerIsNeverKilled(t *testing.T) {
	s := startStack(t, 1)
	spec := fleetWithHealth(2, map[string]string{"TETHER_EXAMPLE_RECONNECT_EVERY": "300ms"})
	if code := s.rest("POST", "/v1/fleets?fleetId=blinky", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var ready []gameServer
	wait.For(t, 10*time.Second, "2 READY servers", func() bool {
		ready = byState(s.gameServers("blinky"), "READY")
		return len(ready) == 2
	})
	// Watch for longer than the grace window (2 s) and many health periods.
	var disconnects int
	wait.Holds(t, 6*time.Second, "every flapping server READY", func() bool {
		for _, g := range s.gameServers("blinky") {
			if g.State != "READY" {
				t.Logf("%s left READY: %+v", g.Name, g)
				return false
			}
		}
		return true
	})
	for _, g := range ready {
		if !alive(g.Pid) {
			t.Fatalf("%s: process %d is gone", g.Name, g.Pid)
		}
		for _, e := range s.history(g.Name) {
			if e.Type == "SdkDisconnected" {
				disconnects++
			}
		}
	}
	if disconnects < 2*10 {
		t.Fatalf("%d disconnects over 6 s of reconnects every 300 ms on 2 servers: the flapping was not recorded", disconnects)
	}
	// Every drop is followed by a reconnect in the history.
	for _, g := range ready {
		var conn []string
		for _, e := range s.history(g.Name) {
			if e.Type == "SdkConnected" || e.Type == "SdkDisconnected" {
				conn = append(conn, e.Type)
			}
		}
		for i := 1; i < len(conn); i++ {
			if conn[i] == conn[i-1] {
				t.Fatalf("%s: connection history does not alternate: %v", g.Name, conn)
			}
		}
	}
}

// TestSecondStackTakesAnotherGamePortRange starts two stacks with the same
// game port base, as two `tether dev` on one machine: the second finds the
// first's range claimed and takes the next free one, so their game servers
// never share a range (a second stack used to draw on the first's ports
// and loop on "no 1 free ports").
func TestSecondStackTakesAnotherGamePortRange(t *testing.T) {
	base := freeport.Block(t, 200)
	block := func(s *stack) map[int]bool {
		t.Helper()
		if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(2, nil), nil); code != http.StatusOK {
			t.Fatalf("create fleet: %d", code)
		}
		var ready []gameServer
		wait.For(t, 20*time.Second, "2 READY game servers", func() bool {
			ready = byState(s.gameServers("arena"), "READY")
			return len(ready) == 2
		})
		blocks := map[int]bool{}
		for _, g := range ready {
			echo(t, g)
			p := g.Ports[0].Port
			if p < base || (p-base)%100 == 99 {
				t.Errorf("%s got port %d: outside the blocks from %d, or a block's claim port", g.Name, p, base)
			}
			blocks[(p-base)/100] = true
		}
		return blocks
	}
	first := block(startStack(t, 1, func(o *dev.Options) { o.GamePortBase = base }))
	second := block(startStack(t, 1, func(o *dev.Options) { o.GamePortBase = base }))
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("each stack's servers should share one block: first %v, second %v", first, second)
	}
	for b := range second {
		if first[b] {
			t.Fatalf("both stacks gave game servers ports from block %d (from port %d)", b, base+100*b)
		}
	}
}

// TestRestartIsNotHeldUpByAnEarlierRunsLease restarts a stack on the data
// dir of a run that was killed while its controller led, leaving its lease
// in the NATS store. The new controller must act at once: waiting for that
// lease to expire (its 10 s TTL, and more) held every decision up, and the
// views sat at one sequence meanwhile.
func TestRestartIsNotHeldUpByAnEarlierRunsLease(t *testing.T) {
	dir := t.TempDir()
	ns, err := natsembed.Start(natsembed.Options{StoreDir: filepath.Join(dir, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: lease.Bucket, TTL: 10 * time.Second, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "controller", []byte("ctl-killed")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	ns.Shutdown()

	s := startStack(t, 1, func(o *dev.Options) { o.DataDir = dir })
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(1, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	// Well within the earlier lease's TTL.
	wait.For(t, 5*time.Second, "the new controller to schedule a server", func() bool { return len(s.gameServers("arena")) > 0 })
}

// `tether dev --demo` (make run) creates the demo fleet through the REST
// API, and its 3 servers become READY: the API's rules for bodies apply
// to the stack's own call too.
func TestDemoFleetIsCreated(t *testing.T) {
	s := startStack(t, 1, func(o *dev.Options) { o.DemoGameServer = gameServerBin })
	wait.For(t, 20*time.Second, "the demo fleet's 3 READY servers", func() bool {
		return len(byState(s.gameServers(dev.DemoFleet), "READY")) == 3
	})
}

// A running stack writes its API's addresses to its data dir, for
// tetherctl on this machine, and removes them when it stops.
func TestStackWritesItsAddressesWhileItRuns(t *testing.T) {
	var dataDir string
	t.Cleanup(func() { // runs after the stack's own cleanup has stopped it
		if _, err := os.Stat(devkeys.AddressesFile(dataDir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the stopped stack's addresses are still there: %v", err)
		}
	})
	s := startStack(t, 1, func(o *dev.Options) { dataDir = o.DataDir })
	a, err := devkeys.ReadAddresses(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if a.GRPC != s.addrs.GRPC || a.REST != s.addrs.REST || a.PID != os.Getpid() {
		t.Errorf("addresses %+v, want gRPC %s and REST %s of process %d", a, s.addrs.GRPC, s.addrs.REST, os.Getpid())
	}
}
