package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/testkit/netns"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// agentsNodeCut isolates from the other two the NATS node most agents are
// connected to. It keeps its clients, which are not told: the agents on
// it find out only by their heartbeat puts failing, and must move to
// another node and beat through it within production's
// host-unreachable-after. The node is made not to lead the heartbeat
// bucket first, so what the gaps show is the agents' move, not an
// election every host would wait for.
func (c *cluster) agentsNodeCut(t *testing.T) {
	var p *proc
	var moved []string
	var gaps map[string]time.Duration
	c.scenario(t, "the agents' NATS node cut off", func() {
		byNode, err := c.agentsOn()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range c.nats {
			if p == nil || len(byNode[n.name]) > len(byNode[p.name]) {
				p = n
			}
		}
		moved = byNode[p.name]
		if len(moved) == 0 {
			t.Fatalf("no agent on the busiest NATS node: %v", byNode)
		}
		c.notLeading(p, "KV_"+hostbeat.Bucket)
		majority := c.natsBut(p)
		stopGaps := c.beatGaps(majority[0])
		defer stopGaps() // on a failure before the stop below
		heal := isolate(p, majority)
		defer heal() // on a failure before the heal below
		wait.Until(t, time.Minute, "every agent on "+p.name+" to move to another node", func() error {
			now, err := c.agentsOn()
			if err != nil {
				return err
			}
			for _, a := range moved {
				if !slices.ContainsFunc(majority, func(n *proc) bool { return slices.Contains(now[n.name], a) }) {
					return fmt.Errorf("%s not on another node yet", a)
				}
			}
			return nil
		})
		c.hold(2 * time.Second) // a beat through the new node, at most an interval after the move's own
		gaps = stopGaps()
		heal()
		c.replicasCurrent(time.Minute)
	}, 10*time.Second)
	var report []string
	for _, h := range slices.Sorted(maps.Keys(gaps)) {
		report = append(report, fmt.Sprintf("%s %s", h, gaps[h].Round(time.Millisecond)))
	}
	t.Logf("the agents' NATS node cut off: %s isolated with %d agents on it (%s); longest heartbeat gap per host: %s",
		p.name, len(moved), strings.Join(moved, ", "), strings.Join(report, ", "))
	for _, a := range moved {
		host := strings.TrimPrefix(a, agentConnPrefix)
		if g, ok := gaps[host]; !ok || g >= unreachableAfter {
			t.Errorf("%s, on the cut-off node, went %s without a heartbeat (seen %v), against production's host-unreachable-after %s", host, g, ok, unreachableAfter)
		}
	}
}

// agentConnPrefix starts an agent's NATS connection name; the host id
// follows.
const agentConnPrefix = "tether-agent-"

// agentsOn returns, by NATS node name, the agents' connection names on
// it, from each node's monitoring port (/connz). A node that does not
// answer is an error: the test cannot tell where its agents are.
func (c *cluster) agentsOn() (map[string][]string, error) {
	client := http.Client{Timeout: 2 * time.Second}
	out := map[string][]string{}
	for _, n := range c.nats {
		resp, err := client.Get(fmt.Sprintf("http://%s:%d/connz?limit=1024", n.host.IP, monitorPort))
		if err != nil {
			return nil, fmt.Errorf("%s /connz: %w", n.name, err)
		}
		var connz struct {
			Connections []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&connz)
		_ = resp.Body.Close() // decoded or failed above
		if err != nil {
			return nil, fmt.Errorf("%s /connz: %w", n.name, err)
		}
		for _, conn := range connz.Connections {
			if strings.HasPrefix(conn.Name, agentConnPrefix) {
				out[n.name] = append(out[n.name], conn.Name)
			}
		}
	}
	return out, nil
}

// natsBut returns the NATS nodes but p.
func (c *cluster) natsBut(p *proc) []*proc {
	var out []*proc
	for _, n := range c.nats {
		if n != p {
			out = append(out, n)
		}
	}
	return out
}

// isolate cuts NATS node p off from the nodes given (its own clients
// still reach it, and are not told) and returns what heals the cut, which
// may be called more than once.
func isolate(p *proc, from []*proc) (heal func()) {
	var others []*netns.Host
	for _, n := range from {
		others = append(others, n.host)
	}
	p.host.Isolate(others...)
	var once sync.Once
	return func() { once.Do(func() { p.host.Rejoin(others...) }) }
}

// notLeading makes node give up the leadership of stream, if it has it,
// and waits until another node leads it.
func (c *cluster) notLeading(node *proc, stream string) {
	c.t.Helper()
	c.stepDownUntil(node, stream, "another node to lead", nil, func(leader string) bool { return leader != node.name })
}

// leading makes node the leader of stream: it asks the leader to step
// down in node's favour until node leads.
func (c *cluster) leading(node *proc, stream string) {
	c.t.Helper()
	req := fmt.Appendf(nil, `{"placement":{"preferred":%q}}`, node.name)
	c.stepDownUntil(node, stream, node.name+" to lead", req, func(leader string) bool { return leader == node.name })
}

// stepDownUntil asks stream's leader, through node, to step down (with
// request req) until done says its leader is the one wanted.
func (c *cluster) stepDownUntil(node *proc, stream, what string, req []byte, done func(leader string) bool) {
	c.t.Helper()
	js := c.jetStream(node)
	wait.Until(c.t, 30*time.Second, stream+": "+what, func() error {
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info := s.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("%s has no leader", stream)
		}
		if done(info.Cluster.Leader) {
			return nil
		}
		if _, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req); err != nil {
			return fmt.Errorf("step down: %w", err)
		}
		return fmt.Errorf("%s led %s; asked it to step down", info.Cluster.Leader, stream)
	})
}

// beatGaps reads every host's heartbeat through node every 100 ms (a
// direct get, answered by the bucket's replicas; one reader per host, so
// a slow read delays no other host's) until the returned stop is called,
// and returns each host's longest gap between two beats in a row, by the
// times the stream stored them, the last beat to stop counting as one
// (a host that never beat again shows its whole silence). A host beats
// every 2 s, so none is missed between two reads. stop may be called
// more than once.
func (c *cluster) beatGaps(node *proc) (stop func() map[string]time.Duration) {
	c.t.Helper()
	kv, err := c.jetStream(node).KeyValue(c.ctx, hostbeat.Bucket)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	var mu sync.Mutex
	last, gaps := map[string]time.Time{}, map[string]time.Duration{}
	var wg sync.WaitGroup
	for _, a := range c.agents {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				gctx, gcancel := context.WithTimeout(ctx, time.Second)
				e, err := kv.Get(gctx, a.name)
				gcancel()
				if err == nil { // else read again at the next tick
					mu.Lock()
					if prev, ok := last[a.name]; ok && e.Created().After(prev) {
						gaps[a.name] = max(gaps[a.name], e.Created().Sub(prev))
					}
					if e.Created().After(last[a.name]) {
						last[a.name] = e.Created()
					}
					mu.Unlock()
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	var once sync.Once
	return func() map[string]time.Duration {
		once.Do(func() {
			cancel()
			wg.Wait()
			now := time.Now()
			for _, a := range c.agents {
				if at, ok := last[a.name]; ok {
					gaps[a.name] = max(gaps[a.name], now.Sub(at))
				}
			}
		})
		mu.Lock()
		defer mu.Unlock()
		return gaps
	}
}
