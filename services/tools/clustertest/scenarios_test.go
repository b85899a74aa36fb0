package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/sdk/go/apiclient"
	"github.com/tetherhq/tether/services/nats/hostbeat"
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
	failSince time.Time      // start of the first failed call since the last success; zero after a success
	lastOK    time.Time      // end of the last successful call
	longest   time.Duration  // longest span from a failed call's start to the next success
	slowest   time.Duration  // longest successful call
	worstHow  string
	failed    []string // the first failed calls: when, how long, the error
}

// failedKept bounds load.failed.
const failedKept = 10

// record notes the outcome of a call that started at start. A failing
// window runs from the start of its first failed call (when the
// matchmaker asked, or the last success, whichever is later) to the end
// of the next successful one.
func (l *load) record(start time.Time, name string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if err == nil {
		l.ok++
		l.allocated[name]++
		l.lastOK = now
		l.slowest = max(l.slowest, now.Sub(start))
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
	if len(l.failed) < failedKept {
		l.failed = append(l.failed, fmt.Sprintf("%s +%s: %v", start.Format("15:04:05.000"), now.Sub(start).Round(time.Millisecond), err))
	}
	from := start
	if from.Before(l.lastOK) {
		from = l.lastOK
	}
	if l.failSince.IsZero() || from.Before(l.failSince) {
		l.failSince = from
		l.worstHow = code
	}
}

// callDeadline is the load's deadline on each allocation, as a
// matchmaker's should be: longer than the API waits for the events stream
// (jsclient.DefaultUnavailableWait), so a call made when the stream loses
// its leader rides out the election (4-9 s, and up to 10 s seen here
// under load) and succeeds, or is answered UNAVAILABLE. A shorter one
// (10 s until 2026-11-28) can run out while the API still waits: a
// failed call of a slow election, not of an unavailable API.
const callDeadline = jsclient.DefaultUnavailableWait + 3*time.Second

// run allocates with callers goroutines, each every interval, until ctx ends.
func (l *load) run(ctx context.Context, c *cluster, callers int, interval time.Duration) {
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for ctx.Err() == nil {
				start := time.Now()
				cctx, cancel := context.WithTimeout(ctx, callDeadline)
				resp, err := c.api.alloc.AllocateGameServer(cctx, &tetherv1.AllocateGameServerRequest{
					Parent: "fleets/arena", RequestId: apiclient.NewRequestID("cluster-"),
				})
				cancel()
				if ctx.Err() != nil {
					return
				}
				name := resp.GetGameServer().GetName()
				l.record(start, name, err)
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
	go func() { defer close(done); l.run(ctx, c, 2, time.Second) }()
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
	t.Logf("%s: %d allocations, slowest %s; failures %v, longest failing window %s (%s)", scenario, l.ok,
		l.slowest.Round(time.Millisecond), l.failures, l.longest.Round(time.Millisecond), l.worstHow)
	if l.ok == 0 {
		t.Errorf("%s: no allocation succeeded", scenario)
	}
	if l.longest > 5*time.Second {
		t.Errorf("%s: allocations failed for %s in a row, more than 5s", scenario, l.longest)
	}
	if len(l.failed) > 0 {
		t.Logf("%s: failed calls (started, took, error):\n  %s", scenario, strings.Join(l.failed, "\n  "))
	}
	for name, n := range l.allocated {
		if n > 1 {
			t.Errorf("%s: %s allocated %d times", scenario, name, n)
		}
	}
}

// audit checks what every scenario must keep: the views equal a replay
// of the stream, every event the agents published is in the stream once
// and applied, and no server ended for a reason the test did not cause.
func (c *cluster) audit(scenario string) {
	c.t.Helper()
	c.auditRunning(scenario)
	c.auditStream(scenario)
	c.auditTerminations(scenario)
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

// scenario runs fn under allocation load in subtest t, then the load for
// settle more, and checks the load and the audit; it logs the projection
// lag seen meanwhile.
func (c *cluster) scenario(t *testing.T, name string, fn func(), settle time.Duration) {
	parent := c.t
	c.t = t // helpers fail the subtest
	defer func() { c.t = parent }()
	ctx, cancel := context.WithCancel(c.ctx)
	lag := c.sampleLag(ctx)
	l := c.during(fn, settle)
	cancel()
	l.check(t, name)
	t.Logf("%s: %s", name, lag)
	c.audit(name)
}

// auditRunning checks that every component's process runs: a scenario
// starts again whatever it stops, so one that has exited did so on its
// own (a crash, whose panic is in its log). Its clients would retry
// another replica and hide it until the scenario that needs it.
func (c *cluster) auditRunning(scenario string) {
	c.t.Helper()
	for _, group := range [][]*proc{c.nats, c.apis, c.projectors, c.controllers, c.agents} {
		for _, p := range group {
			p.mu.Lock()
			done := p.done
			p.mu.Unlock()
			select {
			case <-done:
				c.t.Errorf("%s: %s exited on its own (its log: %s)", scenario, p.name, p.log)
			default:
			}
		}
	}
}

// hold lets the load run for d: a duration the scenario chose, not a wait
// for an outcome.
func (c *cluster) hold(d time.Duration) {
	select {
	case <-c.ctx.Done():
	case <-time.After(d):
	}
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
	c.waitReady(old)
	return d
}

// waitReady waits until p's /readyz answers ready.
func (c *cluster) waitReady(p *proc) {
	c.t.Helper()
	wait.For(c.t, time.Minute, p.name+" to be ready", func() bool { return strings.HasPrefix(p.status(), "ready") })
}

// byName is the process of group on the host so named.
func byName(group []*proc, name string) *proc {
	for _, p := range group {
		if p.name == name {
			return p
		}
	}
	return nil
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
		c.scenario(t, "steady", func() {}, 20*time.Second)
	})
	t.Run("b kill -9 the NATS node leading the events stream", func(t *testing.T) {
		var elected, current time.Duration
		var node string
		var before uint64
		c.scenario(t, "events stream leader kill", func() {
			node = c.streamLeader()
			p := byName(c.nats, node)
			// It leads the heartbeat bucket too: no host can beat until
			// the bucket has a leader again, which is not the hosts' silence.
			c.leading(p, "KV_"+hostbeat.Bucket)
			info, err := c.anyStreamInfo()
			if err != nil {
				t.Fatal(err)
			}
			before = info.State.LastSeq
			killed := time.Now()
			p.signal(t, syscall.SIGKILL)
			wait.Until(t, 30*time.Second, "a new events stream leader", func() error {
				info, err := c.anyStreamInfo()
				if err != nil {
					return err
				}
				if l := info.Cluster.Leader; l == "" || l == node {
					return fmt.Errorf("leader %q", l)
				}
				return nil
			})
			elected = time.Since(killed)
			c.hold(5 * time.Second)
			p.start(c)
			restarted := time.Now()
			c.replicasCurrent(time.Minute)
			current = time.Since(restarted)
		}, 10*time.Second)
		t.Logf("events stream: new leader %s after kill -9 of %s; the restarted node current again after %s",
			elected.Round(time.Millisecond), node, current.Round(time.Millisecond))
		verdicts, err := c.hostEvents(before)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("events stream leader kill: host events %v", verdicts)
		for _, v := range verdicts {
			if strings.HasSuffix(v, " HostUnreachable") {
				t.Errorf("events stream leader kill: a host was taken for unreachable while the heartbeat bucket had no leader: %v", verdicts)
				break
			}
		}
	})
	t.Run("c kill -9 the active controller", func(t *testing.T) {
		var d time.Duration
		c.scenario(t, "controller kill", func() { d = c.takeover(c.controllers, syscall.SIGKILL) }, 10*time.Second)
		t.Logf("controller takeover after kill -9: %s (lease TTL %s)", d.Round(time.Millisecond), leaseTTL)
		if d > leaseTTL+2*time.Second {
			t.Errorf("controller takeover took %s, more than the lease TTL + 2s", d)
		}
	})
	t.Run("c2 SIGTERM the active controller", func(t *testing.T) {
		var d time.Duration
		c.scenario(t, "controller stop", func() { d = c.takeover(c.controllers, syscall.SIGTERM) }, 5*time.Second)
		t.Logf("controller takeover after SIGTERM: %s", d.Round(time.Millisecond))
		if d > 2*time.Second {
			t.Errorf("controller takeover after a clean stop took %s, more than 2s", d)
		}
	})
	t.Run("d kill -9 the active projector", func(t *testing.T) {
		var d time.Duration
		c.scenario(t, "projector kill", func() { d = c.takeover(c.projectors, syscall.SIGKILL) }, 10*time.Second)
		t.Logf("projector takeover after kill -9: %s", d.Round(time.Millisecond))
		if d > 5*time.Second {
			t.Errorf("projector takeover took %s, more than 5s", d)
		}
	})
	t.Run("e kill -9 one API replica under allocation load", func(t *testing.T) {
		c.scenario(t, "API replica kill", func() {
			p := c.apis[0]
			p.signal(t, syscall.SIGKILL)
			c.hold(10 * time.Second) // the load goes on through the other replica
			p.start(c)
			c.waitReady(p)
		}, 5*time.Second)
	})
	t.Run("f cut a host's link, shorter then longer than host-lost-after", func(t *testing.T) {
		c.hostCut(t)
	})
	t.Run("g isolate one NATS node from the other two", func(t *testing.T) {
		var elected, metaElected time.Duration
		var node, meta string
		c.scenario(t, "NATS minority partition", func() {
			node = c.streamLeader()
			p := byName(c.nats, node)
			meta, _ = c.metaLeader(p) // only reported: "" if p cannot tell
			majority := c.natsBut(p)
			cut := time.Now()
			heal := isolate(p, majority)
			defer func() {
				if t.Failed() {
					c.dumpNATS(t.Logf) // the nodes' view, still partitioned if it failed before the heal below
				}
				heal()
			}()
			wait.Until(t, 30*time.Second, "the majority to elect an events stream leader", func() error {
				info, err := c.streamInfo(majority[0])
				if err != nil {
					return err
				}
				if l := info.Cluster.Leader; l == "" || l == node {
					return fmt.Errorf("leader %q", l)
				}
				return nil
			})
			elected = time.Since(cut)
			wait.Until(t, 30*time.Second, "the majority to have a JetStream meta leader", func() error {
				l, err := c.metaLeader(majority[0])
				if err != nil {
					return err
				}
				if l == "" || l == node {
					return fmt.Errorf("meta leader %q", l)
				}
				return nil
			})
			metaElected = time.Since(cut)
			c.hold(15 * time.Second)
			heal()
			c.replicasCurrent(time.Minute)
		}, 10*time.Second)
		t.Logf("NATS minority partition: the majority elected a new events stream leader %s and had a meta leader %s after %s (meta leader then: %q) was isolated",
			elected.Round(time.Millisecond), metaElected.Round(time.Millisecond), node, meta)
	})
	t.Run("g2 isolate the NATS node most agents are connected to", func(t *testing.T) {
		c.agentsNodeCut(t)
	})
	t.Run("h restart PostgreSQL", func(t *testing.T) {
		var down time.Duration
		c.scenario(t, "PostgreSQL restart", func() {
			start := time.Now()
			if err := c.pg.Restart(c.ctx); err != nil {
				t.Fatal(err)
			}
			down = time.Since(start)
		}, 15*time.Second)
		t.Logf("PostgreSQL restart took %s", down.Round(time.Millisecond))
	})
	t.Run("i restart every NATS node, one after another", func(t *testing.T) {
		// An upgrade's rolling restart. The agents' command consumers keep
		// their state in memory: each restarted node takes it again from
		// the others, and commands go on reaching the agents.
		var took []string
		c.scenario(t, "NATS rolling restart", func() {
			for _, p := range c.nats {
				began := time.Now()
				p.signal(t, syscall.SIGTERM)
				c.rejoined(p, c.restart(p))
				took = append(took, fmt.Sprintf("%s %s", p.name, time.Since(began).Round(time.Millisecond)))
			}
		}, 10*time.Second)
		t.Logf("NATS nodes stopped and current again: %s", strings.Join(took, ", "))
		c.replacesShutdowns(t, 4)
	})
	t.Run("j kill -9 every NATS node at once, then start them", func(t *testing.T) {
		c.wholeNATSOutage(t)
	})
}

// replacesShutdowns shuts down up to n READY servers and waits for as many
// replacements made after that to be READY: their start commands reached
// the agents.
func (c *cluster) replacesShutdowns(t *testing.T, n int) {
	t.Helper()
	since := time.Now()
	shut := c.shutdownReady(t, n)
	wait.For(t, time.Minute, fmt.Sprintf("%d replacements made after the shutdowns READY", shut), func() bool {
		resp, err := c.api.servers.ListGameServers(c.ctx, &tetherv1.ListGameServersRequest{Parent: "fleets/arena", Filter: "state=READY", PageSize: 1000})
		if err != nil {
			return false
		}
		fresh := 0
		for _, g := range resp.GetGameServers() {
			if g.GetCreateTime().AsTime().After(since) {
				fresh++
			}
		}
		return fresh >= shut
	})
}

// natsOutage is how long wholeNATSOutage keeps every NATS node down:
// longer than an agent's outbox waits between tries and than the lease
// TTL, shorter than host-lost-after.
const natsOutage = 8 * time.Second

// wholeNATSOutage kills every NATS node at once (kill -9: their machines
// keep the page cache, so this is not a power cut, whose loss depends on
// nats-server's sync interval), keeps them down for natsOutage and starts
// them again. While
// they are down nothing can be appended, so allocations fail; once the
// events stream has a leader again they must succeed within seconds. The
// game servers run on (their health is judged on their hosts), nothing an
// agent published is lost, no host is taken for lost because its
// heartbeats stopped while NATS was away, and commands reach the agents
// again: the command consumers kept their state in memory, so every one
// was lost and the agents make them anew.
func (c *cluster) wholeNATSOutage(t *testing.T) {
	parent := c.t
	c.t = t
	defer func() { c.t = parent }()
	var cut, back time.Time
	ctx, cancel := context.WithCancel(c.ctx)
	lag := c.sampleLag(ctx)
	l := c.during(func() {
		cut = time.Now()
		for _, p := range c.nats {
			p.signal(t, syscall.SIGKILL)
		}
		c.hold(natsOutage)
		for _, p := range c.nats {
			p.start(c)
		}
		wait.Until(t, 2*time.Minute, "the events stream to have a leader again", func() error {
			info, err := c.anyStreamInfo()
			if err != nil {
				return err
			}
			if info.Cluster == nil || info.Cluster.Leader == "" {
				return errors.New("no leader")
			}
			return nil
		})
		back = time.Now()
		c.replicasCurrent(time.Minute)
	}, 20*time.Second)
	cancel()
	l.mu.Lock()
	ok, lastOK, longest, slowest, failures, failed := l.ok, l.lastOK, l.longest, l.slowest, l.failures, l.failed
	doubles := 0
	for _, n := range l.allocated {
		if n > 1 {
			doubles++
		}
	}
	l.mu.Unlock()
	// The calls failing from the cut until the stream is back are the
	// outage; what the test bounds is how long they go on failing after.
	// Approximately: the longest failing window starts with its first
	// failed call (up to one call before the kill) and ends with the next
	// success's answer.
	outage := back.Sub(cut)
	after := longest - outage
	t.Logf("whole NATS outage: every node down for %s, the events stream led again %s after the kill; %d allocations, slowest %s, failures %v, longest failing window %s (%s past the stream's return); %s",
		natsOutage, outage.Round(time.Millisecond), ok, slowest.Round(time.Millisecond), failures, longest.Round(time.Millisecond), after.Round(time.Millisecond), lag)
	if len(failed) > 0 {
		t.Logf("failed calls (started, took, error):\n  %s", strings.Join(failed, "\n  "))
	}
	if doubles > 0 {
		t.Errorf("whole NATS outage: %d servers allocated more than once", doubles)
	}
	if !lastOK.After(back) {
		t.Errorf("whole NATS outage: no allocation succeeded after the events stream was back (last at %s, back at %s)",
			lastOK.Format("15:04:05.000"), back.Format("15:04:05.000"))
	}
	if after > 10*time.Second {
		t.Errorf("whole NATS outage: allocations went on failing %s after the events stream was back, more than 10s", after)
	}
	c.audit("whole NATS outage")
	c.replacesShutdowns(t, 4)
}

// restart starts p again, after its old process has exited, and returns
// when it did: what the others hear from p after that, they hear from the
// new process.
func (c *cluster) restart(p *proc) (exited time.Time) {
	exited = time.Now()
	p.start(c)
	return exited
}

// rejoined waits until NATS node p, whose old process exited at exited,
// is a current member again of every replicated stream's group and of
// every replicated consumer's (the agents' command consumers keep their
// state in memory, so a restarted node takes it again from the others),
// then until every events stream replica is current. A rolling restart
// that stops the next node before then takes away what the cluster's
// majority holds.
//
// A follower counts only once its group's leader has heard from it since
// exited: before that the leader still reports what the old process last
// acknowledged, current and active, for a few hundred milliseconds after
// it is gone (a CI run stopped all three nodes within 1.1 s so).
func (c *cluster) rejoined(p *proc, exited time.Time) {
	c.t.Helper()
	wait.Until(c.t, time.Minute, p.name+" to rejoin every replicated stream and consumer", func() error {
		// Taken before the leaders answer: an acknowledgement they report
		// must be younger than the new process, however long they take.
		since := time.Since(exited)
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		js := c.jetStream(p)
		streams := js.ListStreams(ctx)
		for si := range streams.Info() {
			if si.Config.Replicas < len(c.nats) {
				continue
			}
			if err := member(si.Cluster, p.name, since); err != nil {
				return fmt.Errorf("stream %s: %w", si.Config.Name, err)
			}
			s, err := js.Stream(ctx, si.Config.Name)
			if err != nil {
				return err
			}
			names, infos := 0, 0
			for range s.ConsumerNames(ctx).Name() {
				names++
			}
			consumers := s.ListConsumers(ctx)
			for ci := range consumers.Info() {
				infos++
				if ci.Cluster != nil && len(ci.Cluster.Replicas)+1 < len(c.nats) {
					continue // not on every node: an ephemeral reader's
				}
				if err := member(ci.Cluster, p.name, since); err != nil {
					return fmt.Errorf("consumer %s > %s: %w", si.Config.Name, ci.Name, err)
				}
			}
			if err := consumers.Err(); err != nil {
				return err
			}
			if infos < names {
				return fmt.Errorf("stream %s: %d consumers named, %d answered for (the others offline)", si.Config.Name, names, infos)
			}
		}
		return streams.Err()
	})
	c.replicasCurrent(time.Minute)
}

// member says why node is not a current member of the group described by
// info, heard from by its leader within since; nil if it is.
func member(info *jetstream.ClusterInfo, node string, since time.Duration) error {
	if info == nil {
		return errors.New("no cluster information")
	}
	if info.Leader == node {
		return nil
	}
	for _, r := range info.Replicas {
		if r.Name != node {
			continue
		}
		if r.Offline || !r.Current || r.Active > since {
			return fmt.Errorf("replica %s: offline %v, current %v, last active %s ago", r.Name, r.Offline, r.Current, r.Active.Round(time.Millisecond))
		}
		return nil
	}
	return fmt.Errorf("%s is not in the group (leader %q)", node, info.Leader)
}

// shutdownReady shuts down up to n READY servers of the fleet through the
// API, as a matchmaker ending matches does, and returns how many.
func (c *cluster) shutdownReady(t *testing.T, n int) int {
	t.Helper()
	resp, err := c.api.servers.ListGameServers(c.ctx, &tetherv1.ListGameServersRequest{Parent: "fleets/arena", Filter: "state=READY", PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	shut := 0
	for _, g := range resp.GetGameServers() {
		if shut == n {
			break
		}
		if _, err := c.api.servers.ShutdownGameServer(c.ctx, &tetherv1.ShutdownGameServerRequest{Name: g.GetName(), RequestId: apiclient.NewRequestID("cluster-end-")}); err != nil {
			t.Fatalf("shut down %s: %v", g.GetName(), err)
		}
		shut++
	}
	if shut == 0 {
		t.Fatal("no READY server to shut down")
	}
	return shut
}

// hostCut cuts the first agent host's link for less than host-lost-after
// (its servers must carry on untouched), then for longer (they are
// terminated HOST_LOST and replaced elsewhere, and on the heal their
// processes are stopped on the old host). Throughout, no server name runs
// in two live processes.
func (c *cluster) hostCut(t *testing.T) {
	census, stopCensus := c.watchProcesses(t)
	defer stopCensus()

	h := c.busiestHost()
	hostName := "hosts/" + h.name
	before := c.liveOn(hostName)
	t.Logf("short cut: %s, with %d live servers", hostName, len(before))
	c.scenario(t, "short host cut", func() {
		h.host.Cut()
		defer h.host.Heal()
		c.hold(hostLostFor / 2)
		h.host.Heal()
		c.waitReady(h)
	}, 5*time.Second)
	for name := range before {
		g, err := c.api.servers.GetGameServer(c.ctx, &tetherv1.GetGameServerRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if g.GetState() == tetherv1.GameServer_TERMINATED && g.GetReason() != "SHUTDOWN_REQUESTED_BY_API" {
			t.Errorf("short cut: %s ended %s", name, g.GetReason())
		}
	}

	var lostAfter, stoppedAfter time.Duration
	var lost map[string]bool
	h = c.busiestHost()
	hostName = "hosts/" + h.name
	c.lostHosts[hostName] = true
	c.scenario(t, "long host cut", func() {
		lost = c.liveOn(hostName)
		cut := time.Now()
		h.host.Cut()
		defer h.host.Heal() // on a failure before the heal below (a second heal is a no-op)
		wait.For(t, hostLostFor+30*time.Second, "the cut host's servers to be terminated", func() bool {
			return len(c.liveOn(hostName)) == 0
		})
		lostAfter = time.Since(cut)
		running := 0
		procs, err := gameServerProcesses()
		if err != nil {
			t.Fatal(err)
		}
		for name := range lost {
			running += len(procs[name])
		}
		t.Logf("long cut: %d servers of %s terminated after %s; %d of their processes still run on the cut host",
			len(lost), hostName, lostAfter.Round(time.Millisecond), running)
		// The load keeps taking servers, so the fleet is rarely all READY.
		wait.For(t, time.Minute, fmt.Sprintf("%d READY servers elsewhere", 2*fleetSize/3), func() bool { return c.ready() >= 2*fleetSize/3 })
		healed := time.Now()
		h.host.Heal()
		wait.For(t, time.Minute, "the healed host to stop its replaced servers' processes", func() bool {
			procs, err := gameServerProcesses()
			if err != nil {
				t.Fatal(err)
			}
			for name := range lost {
				if len(procs[name]) > 0 {
					return false
				}
			}
			return true
		})
		stoppedAfter = time.Since(healed)
		c.waitReady(h)
	}, 5*time.Second)
	t.Logf("long cut: servers terminated %s after the cut (host-lost-after %s); their processes stopped %s after the heal; %s",
		lostAfter.Round(time.Millisecond), hostLostFor, stoppedAfter.Round(time.Millisecond), census())
}

// busiestHost is the agent host with the most READY servers, waiting
// for one to have any.
func (c *cluster) busiestHost() *proc {
	c.t.Helper()
	var best *proc
	wait.For(c.t, time.Minute, "an agent host with READY servers", func() bool {
		resp, err := c.api.servers.ListGameServers(c.ctx, &tetherv1.ListGameServersRequest{Parent: "fleets/arena", Filter: "state=READY", PageSize: 1000})
		if err != nil {
			return false
		}
		count := map[string]int{}
		for _, g := range resp.GetGameServers() {
			count[g.GetHost()]++
		}
		best = nil
		for _, a := range c.agents {
			if n := count["hosts/"+a.name]; n > 0 && (best == nil || n > count["hosts/"+best.name]) {
				best = a
			}
		}
		return best != nil
	})
	return best
}

// liveOn lists the servers the views place on host that are not
// TERMINATED.
func (c *cluster) liveOn(host string) map[string]bool {
	c.t.Helper()
	resp, err := c.api.servers.ListGameServers(c.ctx, &tetherv1.ListGameServersRequest{
		Parent: "fleets/arena", Filter: "host=" + host, PageSize: 1000,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, g := range resp.GetGameServers() {
		if g.GetState() != tetherv1.GameServer_TERMINATED {
			out[g.GetName()] = true
		}
	}
	return out
}

// watchProcesses samples the game-server processes every 100 ms until
// stopped, failing t when a server name runs in two live processes; the
// summary says how many samples it took.
func (c *cluster) watchProcesses(t *testing.T) (summary func() string, stop func()) {
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	var mu sync.Mutex
	samples := 0
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			procs, err := gameServerProcesses()
			if err != nil {
				t.Errorf("process census: %v", err)
				return
			}
			mu.Lock()
			samples++
			for name, pids := range procs {
				if strings.HasPrefix(name, "fleets/arena/") && len(pids) > 1 {
					t.Errorf("%s runs in %d live processes: %v", name, len(pids), pids)
				}
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("no server name in two live processes in %d samples of the processes", samples)
		}, func() {
			cancel()
			<-done
		}
}

// ready counts the fleet's READY servers.
func (c *cluster) ready() int {
	resp, err := c.api.servers.ListGameServers(c.ctx, &tetherv1.ListGameServersRequest{Parent: "fleets/arena", Filter: "state=READY", PageSize: 1000})
	if err != nil {
		return 0
	}
	return len(resp.GetGameServers())
}
