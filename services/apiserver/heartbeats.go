package apiserver

import (
	"context"
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

// liveBeats shows hosts' and game servers' heartbeat times as current. The
// views hold what events recorded: a host's last heartbeat as of its last
// status change or inventory, a server's as of its last connect or missed
// period; an ONLINE host read minutes later said "heartbeat 9m ago". The
// agents' beats (the hostbeat bucket, every couple of seconds) carry both,
// so the API follows the bucket and shows the later of the two. Without a
// tracker (no NATS, or the bucket unreachable) the views' times stand.
type liveBeats struct {
	tracker atomic.Pointer[hostbeat.Tracker]
}

// run follows the bucket until ctx ends, starting a new tracker whenever
// one ends (its watcher stopped with its connection).
func (b *liveBeats) run(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	const retry = 5 * time.Second
	for ctx.Err() == nil {
		t, err := hostbeat.Track(ctx, js)
		if err != nil {
			log.Debug("host heartbeats unavailable; showing the views' heartbeat times", "err", err)
		} else {
			b.tracker.Store(t)
			select {
			case <-ctx.Done():
			case <-t.Done():
				log.Debug("host heartbeat tracker ended; starting another", "err", t.Err())
			}
			b.tracker.Store(nil)
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
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

// freshenHost shows h's last heartbeat from its beat when that is later.
func (b *liveBeats) freshenHost(h *tetherv1.Host) {
	id, err := events.ParseHostName(h.GetName())
	if err != nil {
		return
	}
	if beat, ok := b.beat(id); ok {
		h.LastHeartbeatTime = later(h.GetLastHeartbeatTime(), beat.WrittenAt())
	}
}

// freshenGameServer shows g's last SDK heartbeat from its host's beat when
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
