package clustertest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/sdk/go/apiclient"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// load allocates from the fleet through both API replicas at a steady
// pace, and ends each match at once (shuts the server down) so the fleet
// keeps replacing servers, recording what a matchmaker would see.
type load struct {
	mu        sync.Mutex
	ok        int
	failures  map[string]int // by gRPC code
	allocated map[string]int // server name → successful allocations of it
	failSince time.Time      // first failure since the last success; zero after a success
	longest   time.Duration  // longest window without a success while failing
	worstHow  string
}

func (l *load) record(name string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if err == nil {
		l.ok++
		l.allocated[name]++
		if !l.failSince.IsZero() {
			if d := now.Sub(l.failSince); d > l.longest {
				l.longest = d
			}
			l.failSince = time.Time{}
		}
		return
	}
	code := status.Code(err).String()
	l.failures[code]++
	if l.failSince.IsZero() {
		l.failSince = now
		l.worstHow = code
	}
}

// run allocates with callers goroutines, each every interval, until ctx ends.
func (l *load) run(ctx context.Context, c *cluster, callers int, interval time.Duration) {
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := c.api.alloc.AllocateGameServer(cctx, &tetherv1.AllocateGameServerRequest{
					Parent: "fleets/arena", RequestId: apiclient.NewRequestID("cluster-"),
				})
				cancel()
				if ctx.Err() != nil {
					return
				}
				name := resp.GetGameServer().GetName()
				l.record(name, err)
				if err == nil {
					sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, _ = c.api.servers.ShutdownGameServer(sctx, &tetherv1.ShutdownGameServerRequest{Name: name, RequestId: apiclient.NewRequestID("cluster-end-")})
					cancel() // a failed shutdown leaves the server allocated: the pool shrinks, nothing more
				}
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
}

// during runs the load while scenario runs, then for settle more, and
// returns it.
func (c *cluster) during(scenario func(), settle time.Duration) *load {
	l := &load{failures: map[string]int{}, allocated: map[string]int{}}
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx, c, 2, 500*time.Millisecond) }()
	scenario()
	select { // the load runs this long more: a duration, not a wait for an outcome
	case <-c.ctx.Done():
	case <-time.After(settle):
	}
	cancel()
	<-done
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.failSince.IsZero() {
		if d := time.Since(l.failSince); d > l.longest {
			l.longest = d
		}
	}
	return l
}

// check asserts what every scenario must keep: allocations succeed, none
// fails for longer than 5 s, no server is allocated twice.
func (l *load) check(t *testing.T, scenario string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("%s: %d allocations, failures %v, longest failing window %s (%s)", scenario, l.ok, l.failures, l.longest.Round(time.Millisecond), l.worstHow)
	if l.ok == 0 {
		t.Errorf("%s: no allocation succeeded", scenario)
	}
	if l.longest > 5*time.Second {
		t.Errorf("%s: allocations failed for %s in a row, more than 5s", scenario, l.longest)
	}
	for name, n := range l.allocated {
		if n > 1 {
			t.Errorf("%s: %s allocated %d times", scenario, name, n)
		}
	}
}

// audit checks the views against a replay of the stream.
func (c *cluster) audit(scenario string) {
	c.t.Helper()
	var endpoints []string
	for _, p := range c.apis {
		endpoints = append(endpoints, fmt.Sprintf("%s:%d", p.host.IP, grpcPort))
	}
	out, err := exec.CommandContext(c.ctx, filepath.Join(c.bin, "tetherctl"), "--addr", strings.Join(endpoints, ","),
		"--timeout", "2m", "projections", "check").CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 0 differences") {
		c.t.Errorf("%s: projections check: %v\n%s", scenario, err, out)
		return
	}
	c.t.Logf("%s: %s", scenario, strings.TrimSpace(string(out)))
}

// takeover kills (or stops) the lease holder of group and returns how long
// until another instance held the lease, then starts the old one again.
func (c *cluster) takeover(group []*proc, sig syscall.Signal) time.Duration {
	c.t.Helper()
	old := c.leader(group)
	killed := time.Now()
	old.signal(c.t, sig)
	wait.For(c.t, 30*time.Second, "a standby to take over from "+old.name, func() bool {
		for _, p := range group {
			if p != old && p.leads() {
				return true
			}
		}
		return false
	})
	d := time.Since(killed)
	old.start(c)
	return d
}

func TestCluster(t *testing.T) {
	clusterTest(t)
	c := startCluster(t)
	code, body := c.rest("POST", "/v1/fleets?fleetId=arena", map[string]any{
		"replicas": fleetSize,
		"template": map[string]any{
			"command": filepath.Join(c.bin, "tether-gameserver"),
			"ports":   []any{map[string]any{"name": "game", "protocol": "UDP"}},
		},
	})
	if code != 200 {
		t.Fatalf("create fleet: %d %s", code, body)
	}
	wait.For(t, 2*time.Minute, fmt.Sprintf("%d READY servers", fleetSize), func() bool { return c.ready() >= fleetSize })

	t.Run("a steady state through both API replicas", func(t *testing.T) {
		l := c.during(func() {}, 20*time.Second)
		l.check(t, "steady")
		c.audit("steady")
	})
	t.Run("c kill -9 the active controller", func(t *testing.T) {
		var d time.Duration
		l := c.during(func() { d = c.takeover(c.controllers, syscall.SIGKILL) }, 10*time.Second)
		t.Logf("controller takeover after kill -9: %s (lease TTL %s)", d.Round(time.Millisecond), leaseTTL)
		if d > leaseTTL+2*time.Second {
			t.Errorf("controller takeover took %s, more than the lease TTL + 2s", d)
		}
		l.check(t, "controller kill")
		c.audit("controller kill")
	})
	t.Run("c2 SIGTERM the active controller", func(t *testing.T) {
		var d time.Duration
		l := c.during(func() { d = c.takeover(c.controllers, syscall.SIGTERM) }, 5*time.Second)
		t.Logf("controller takeover after SIGTERM: %s", d.Round(time.Millisecond))
		if d > 2*time.Second {
			t.Errorf("controller takeover after a clean stop took %s, more than 2s", d)
		}
		l.check(t, "controller stop")
	})
	t.Run("d kill -9 the active projector", func(t *testing.T) {
		var d time.Duration
		l := c.during(func() { d = c.takeover(c.projectors, syscall.SIGKILL) }, 10*time.Second)
		t.Logf("projector takeover after kill -9: %s", d.Round(time.Millisecond))
		if d > 5*time.Second {
			t.Errorf("projector takeover took %s, more than 5s", d)
		}
		l.check(t, "projector kill")
		c.audit("projector kill")
	})
}

// ready counts the fleet's READY servers.
func (c *cluster) ready() int {
	resp, err := c.api.servers.ListGameServers(c.ctx, &tetherv1.ListGameServersRequest{Parent: "fleets/arena", PageSize: 500})
	if err != nil {
		return 0
	}
	n := 0
	for _, g := range resp.GetGameServers() {
		if g.GetState() == tetherv1.GameServer_READY {
			n++
		}
	}
	return n
}
