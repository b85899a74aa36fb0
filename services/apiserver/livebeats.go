package apiserver

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/nats/hostbeat"
)

// liveBeats shows hosts' last beats and game servers' last health pings
// (the API's last_heartbeat_time of each) as current. The views hold what
// events recorded: a host's last beat as of its last status change or
// inventory, a server's last health ping as of its last connect or missed
// period; an ONLINE host read minutes later said "heartbeat 9m ago". The
// agents' host beats (the hostbeat bucket, every couple of seconds) carry
// both, so the API follows the bucket and shows the later of the two.
// Without a tracker (no NATS, or the bucket unreachable) the views' times
// stand.
type liveBeats struct {
	tracker atomic.Pointer[hostbeat.Tracker]
	// checkEvery is how often the tracker is made to catch up with the
	// bucket (Beats), so that a watcher that stalled (its consumer lost
	// with a NATS node) ends it and a new one is started, instead of the
	// beats showing stale until the client library makes the consumer
	// anew; default beatsCheckEvery.
	checkEvery time.Duration
}

// beatsCheckEvery is the default of liveBeats.checkEvery: one stream info
// request to the bucket's leader each, per API replica. A stall shows
// within a check and 2 s; the client library makes a lost consumer anew
// after 10-20 s.
const beatsCheckEvery = 3 * time.Second

// run follows the bucket until ctx ends, starting a new tracker whenever
// one ends: its watcher stopped with its connection (a new one 5 s
// later), or stalled (a new one at once).
func (b *liveBeats) run(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	const retry = 5 * time.Second
	check := cmp.Or(b.checkEvery, beatsCheckEvery)
	for ctx.Err() == nil {
		t, err := hostbeat.Track(ctx, js)
		if err != nil {
			log.Debug("host heartbeats unavailable; showing the views' heartbeat times", "err", err)
		} else {
			b.tracker.Store(t)
			follow(ctx, t, check, log)
			b.tracker.Store(nil)
			if errors.Is(t.Err(), hostbeat.ErrStalled) {
				log.Info("host heartbeat tracker stalled; starting another", "err", t.Err())
				if err := t.Stop(); err != nil { // ended already: Stop waits for its watcher's goroutine
					log.Debug("stop the stalled host heartbeat tracker", "err", err)
				}
				continue
			}
			log.Debug("host heartbeat tracker ended; starting another", "err", t.Err())
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// follow returns when ctx ends or t does, making t catch up with the
// bucket every check: a stalled watcher ends it then (ErrStalled). A
// catch-up that fails otherwise (NATS away, a slow watcher) changes
// nothing: the tracker goes on showing what it has.
func follow(ctx context.Context, t *hostbeat.Tracker, check time.Duration, log *slog.Logger) {
	tick := time.NewTicker(check)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Done():
			return
		case <-tick.C:
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the stall shows within its first 2 s
			if _, err := t.Beats(cctx); err != nil && ctx.Err() == nil {
				log.Debug("host heartbeat tracker behind the bucket", "err", err)
			}
			cancel()
		}
	}
}

// beat returns the last beat of host (its id) the tracker has; false
// without a tracker or a beat.
func (b *liveBeats) beat(host string) (hostbeat.Beat, bool) {
	if b == nil {
		return hostbeat.Beat{}, false
	}
	t := b.tracker.Load()
	if t == nil {
		return hostbeat.Beat{}, false
	}
	return t.Latest(host)
}

// freshenHost shows h's last beat from the bucket when that is later.
func (b *liveBeats) freshenHost(h *tetherv1.Host) {
	id, err := events.ParseHostName(h.GetName())
	if err != nil {
		return
	}
	if beat, ok := b.beat(id); ok {
		h.LastHeartbeatTime = later(h.GetLastHeartbeatTime(), beat.WrittenAt())
	}
}

// freshenGameServer shows g's last health ping from its host's beat when
// that is later. A TERMINATED server keeps the views' time: its host no
// longer reports it.
func (b *liveBeats) freshenGameServer(g *tetherv1.GameServer) {
	if g.GetState() == tetherv1.GameServer_TERMINATED || g.GetHealth() == nil {
		return
	}
	id, err := events.ParseHostName(g.GetHost())
	if err != nil {
		return
	}
	beat, ok := b.beat(id)
	inv := beat.Inv()
	if !ok || inv == nil {
		return
	}
	// The agent lists its servers sorted by name.
	servers := inv.Servers
	i, found := slices.BinarySearchFunc(servers, g.GetName(), func(s hostbeat.Server, name string) int { return strings.Compare(s.Name, name) })
	if found {
		g.Health.LastHeartbeatTime = later(g.GetHealth().GetLastHeartbeatTime(), servers[i].LastHeartbeat())
	}
}

// later is the later of ts and t (t zero: ts).
func later(ts *timestamppb.Timestamp, t time.Time) *timestamppb.Timestamp {
	if t.IsZero() || ts != nil && !t.After(ts.AsTime()) {
		return ts
	}
	return timestamppb.New(t)
}
