package clustertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// jetStream is the test's own client of one NATS node (so a test can
// ask the majority side of a partition), for the audit and to find stream
// leaders. It reconnects to that node only: a client that followed the
// servers it discovered would, after the node's restart in scenario b,
// ask another, perhaps the one scenario g isolates.
func (c *cluster) jetStream(node *proc) jetstream.JetStream {
	c.t.Helper()
	c.jsMu.Lock()
	defer c.jsMu.Unlock()
	if js, ok := c.js[node.name]; ok {
		return js
	}
	nc, err := nats.Connect(fmt.Sprintf("nats://%s:%d", node.host.IP, natsPort),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true),
		nats.IgnoreDiscoveredServers())
	if err != nil {
		c.t.Fatal(err)
	}
	c.root.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	c.js[node.name] = js
	return js
}

// streamInfo is the events stream's info as node sees it, or the error
// (a cluster between leaders answers late or not at all).
func (c *cluster) streamInfo(node *proc) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
	defer cancel()
	s, err := c.jetStream(node).Stream(ctx, events.StreamName)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// anyStreamInfo asks each node in turn until one answers.
func (c *cluster) anyStreamInfo() (info *jetstream.StreamInfo, err error) {
	for _, n := range c.nats {
		if info, err = c.streamInfo(n); err == nil {
			return info, nil
		}
	}
	return nil, err
}

// streamLeader is the name of the NATS node that leads the events stream,
// waiting for one.
func (c *cluster) streamLeader() string {
	c.t.Helper()
	var leader string
	wait.Until(c.t, 30*time.Second, "the events stream to have a leader", func() error {
		info, err := c.anyStreamInfo()
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return errors.New("no leader")
		}
		leader = info.Cluster.Leader
		return nil
	})
	return leader
}

// replicasCurrent waits until every replica of the events stream is
// online and caught up with its leader.
func (c *cluster) replicasCurrent(within time.Duration) {
	c.t.Helper()
	wait.Until(c.t, within, "every events stream replica to be current", func() error {
		info, err := c.anyStreamInfo()
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return errors.New("no leader")
		}
		if len(info.Cluster.Replicas) != 2 {
			return fmt.Errorf("%d followers, want 2", len(info.Cluster.Replicas))
		}
		for _, r := range info.Cluster.Replicas {
			if r.Offline || !r.Current {
				return fmt.Errorf("replica %s: offline %v, current %v, lag %d", r.Name, r.Offline, r.Current, r.Lag)
			}
		}
		return nil
	})
}

// storedEvents reads the whole events stream: every event's id and
// producer. An id stored twice is an event applied twice.
func (c *cluster) storedEvents() (byProducer map[string]int, duplicates []string, last uint64, err error) {
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	s, info, err := c.eventsStream(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	last = info.State.LastSeq
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, nil, 0, err
	}
	byProducer = map[string]int{}
	seen := map[string]bool{}
	var seq uint64
	for seq < last {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, nil, 0, err
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, nil, 0, err
			}
			seq = meta.Sequence.Stream
			env, err := events.Unmarshal(m.Data())
			if err != nil {
				return nil, nil, 0, fmt.Errorf("event %d: %w", seq, err)
			}
			if seen[env.ID] {
				duplicates = append(duplicates, fmt.Sprintf("%s (sequence %d)", env.ID, seq))
			}
			seen[env.ID] = true
			byProducer[env.Producer]++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, nil, 0, err
		}
		if ctx.Err() != nil {
			return nil, nil, 0, fmt.Errorf("read %d of %d events before the deadline", seq, last)
		}
	}
	return byProducer, duplicates, last, nil
}

// eventsStream is the events stream and its info, through the first NATS
// node that answers.
func (c *cluster) eventsStream(ctx context.Context) (s jetstream.Stream, info *jetstream.StreamInfo, err error) {
	for _, n := range c.nats {
		if s, err = c.jetStream(n).Stream(ctx, events.StreamName); err == nil {
			if info, err = s.Info(ctx); err == nil {
				return s, info, nil
			}
		}
	}
	return nil, nil, err
}

// hostEvents reads the hosts' events stored after sequence after and
// returns them as "host type" lines.
func (c *cluster) hostEvents(after uint64) ([]string, error) {
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	s, info, err := c.eventsStream(ctx)
	if err != nil {
		return nil, err
	}
	last := info.State.LastSeq
	if last <= after {
		return nil, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SubjectPrefix + "." + events.KindHost + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1,
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for {
		// Nothing pending once the consumer's last delivery is at or past
		// last, or it has nothing more (the last event was not a host's).
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		var seq uint64
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			seq = meta.Sequence.Stream
			env, err := events.Unmarshal(m.Data())
			if err != nil {
				return nil, fmt.Errorf("event %d: %w", seq, err)
			}
			out = append(out, strings.TrimPrefix(m.Subject(), events.SubjectPrefix+"."+events.KindHost+".")+" "+env.Type)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if n == 0 || seq >= last {
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// published is the value of a counter on one process, from its /metrics
// (summed over the counter's series).
func published(p *proc, metricName string) (float64, error) {
	resp, err := http.Get(p.adminURL("/metrics"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metricName) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", p.name, line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s serves no %s", p.name, metricName)
	}
	return sum, nil
}

// auditStream checks, once the agents' outboxes are empty: every event
// the agents published is in the stream once (no event id twice), and
// the views applied the whole stream.
func (c *cluster) auditStream(scenario string) {
	c.t.Helper()
	var pub, stored, applied int64
	wait.Until(c.t, time.Minute, "agents' published events to equal the stream's and the views to apply it", func() error {
		// The counters first: what they count is in the stream by the time
		// it is read.
		perAgent := make([]int64, len(c.agents))
		for i, a := range c.agents {
			n, err := published(a, "tether_agent_events_published")
			if err != nil {
				return err
			}
			perAgent[i] = int64(n)
		}
		byProducer, dups, last, err := c.storedEvents()
		if err != nil {
			return err
		}
		pub, stored = 0, 0
		var perHost []string
		for i, a := range c.agents {
			n := int64(byProducer[events.HostName(a.name)])
			pub, stored = pub+perAgent[i], stored+n
			perHost = append(perHost, fmt.Sprintf("%s %d/%d", a.name, perAgent[i], n))
		}
		st, err := c.api.projections.GetProjectionStatus(c.ctx, &tetherv1.GetProjectionStatusRequest{})
		if err != nil {
			return err
		}
		applied = st.GetCheckpoint()
		switch {
		case len(dups) > 0:
			return fmt.Errorf("%d events stored twice: %v", len(dups), dups[:min(5, len(dups))])
		case pub != stored:
			return fmt.Errorf("agents published %d events, the stream holds %d of theirs (published/stored per host: %s)",
				pub, stored, strings.Join(perHost, ", "))
		case applied != int64(last):
			return fmt.Errorf("views applied %d of %d events", applied, last)
		case st.GetDeadLetters() != 0:
			return fmt.Errorf("%d dead letters", st.GetDeadLetters())
		}
		return nil
	})
	c.t.Logf("%s: agents published %d events = %d in the stream, none twice; views applied all %d events of the stream",
		scenario, pub, stored, applied)
}

// auditTerminations checks that every terminated server ended for a
// reason the test caused: the load's shutdowns, and HOST_LOST for servers
// of a host the test cut for longer than host-lost-after.
func (c *cluster) auditTerminations(scenario string) {
	c.t.Helper()
	var token string
	byReason := map[string]int{}
	for {
		resp, err := c.api.servers.ListGameServers(c.ctx, &tetherv1.ListGameServersRequest{
			Parent: "fleets/arena", Filter: "state=TERMINATED", PageSize: 1000, PageToken: token,
		})
		if err != nil {
			c.t.Fatal(err)
		}
		for _, g := range resp.GetGameServers() {
			byReason[g.GetReason()]++
			switch {
			case g.GetReason() == "SHUTDOWN_REQUESTED_BY_API":
			case g.GetReason() == "HOST_LOST" && c.lostHosts[g.GetHost()]:
			default:
				c.t.Errorf("%s: false termination: %s on %s ended %s (%s)", scenario, g.GetName(), g.GetHost(), g.GetReason(), g.GetEvidence())
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	c.t.Logf("%s: terminations by reason %v", scenario, byReason)
}

// lagSampler records the projection lag while a scenario runs: the most
// events not yet applied, and the longest time the views stayed behind
// (from a sample with events waiting until one with none).
type lagSampler struct {
	mu        sync.Mutex
	maxEvents int64
	behind    time.Time // first sample of the current stretch with events waiting
	maxBehind time.Duration
	failed    int
}

func (c *cluster) sampleLag(ctx context.Context) *lagSampler {
	s := &lagSampler{}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.api.projections.GetProjectionStatus(cctx, &tetherv1.GetProjectionStatusRequest{})
			cancel()
			now := time.Now()
			s.mu.Lock()
			switch {
			case err != nil:
				s.failed++
			case st.GetLag() > 0:
				s.maxEvents = max(s.maxEvents, st.GetLag())
				if s.behind.IsZero() {
					s.behind = now
				}
				s.maxBehind = max(s.maxBehind, now.Sub(s.behind))
			default:
				s.behind = time.Time{}
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *lagSampler) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("projection lag during: at most %d events; views behind the stream for at most %s in a row (sampled every 100 ms; %d status calls failed)",
		s.maxEvents, s.maxBehind.Round(time.Millisecond), s.failed)
}

// gameServerProcesses maps each server name to the pids of the live
// processes that run it, on any host (the namespaces share one pid
// namespace), from the TETHER_GAMESERVER variable the agent sets.
func gameServerProcesses() (map[string][]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[string][]int{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue // not a process
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil {
			continue // ended meanwhile
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if name, ok := strings.CutPrefix(kv, "TETHER_GAMESERVER="); ok {
				out[name] = append(out[name], pid)
			}
		}
	}
	return out, nil
}
