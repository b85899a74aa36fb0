package agent

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/nats/hostbeat"
)

// beatHost puts the host's beat, its key in the hostbeat bucket with its
// inventory, every HeartbeatInterval. A put that succeeds after a gap (puts failed, were
// paused, or came late: more than three intervals since the last good one)
// asks syncServers to re-read every server at once.
func (a *Agent) beatHost(ctx context.Context, kv jetstream.KeyValue) error {
	t := time.NewTicker(a.opts.HeartbeatInterval)
	defer t.Stop()
	paused := false
	var lastPut time.Time
	var list []*gameServer // reused by hostBeat: this runs every few seconds on every host
	for {
		skip := a.opts.SkipHeartbeat != nil && a.opts.SkipHeartbeat()
		if skip != paused {
			paused = skip
			a.log.Warn("host heartbeat paused by its hook", "paused", paused)
		}
		if !skip {
			var b hostbeat.Beat
			b, list = a.hostBeat(list)
			moved, err := a.putHostBeat(ctx, kv, b)
			if err != nil && moved && ctx.Err() == nil {
				a.log.Warn("host heartbeat failed; putting it again through another NATS server", "err", err)
				b, list = a.hostBeat(list) // as of now: the failed put may have taken an interval
				_, err = a.putHostBeat(ctx, kv, b)
			}
			if err != nil {
				if ctx.Err() == nil {
					a.log.Warn("host heartbeat failed", "err", err)
				}
			} else {
				now := time.Now() // a duration: the monotonic clock, not Options.Clock
				if !lastPut.IsZero() && now.Sub(lastPut) > 3*a.opts.HeartbeatInterval {
					a.log.Info("host heartbeat resumed after a gap; re-reading servers", "gap", now.Sub(lastPut).Round(time.Millisecond))
					select {
					case a.resumed <- struct{}{}:
					default: // a re-read is pending already
					}
				}
				lastPut = now
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// putHostBeat stores b as the host's beat, bounded by HeartbeatInterval
// (at least a second): a beat later than that is late anyway, and a put
// left to the client's 5 s default delays by as much the reconnect that
// moves the agent off a NATS server cut off from the others. It tells
// ObserveJetStream the outcome, and reports whether that moved the
// connection.
func (a *Agent) putHostBeat(ctx context.Context, kv jetstream.KeyValue, b hostbeat.Beat) (moved bool, err error) {
	began := time.Now() // a duration: the monotonic clock, not Options.Clock
	pctx, cancel := context.WithTimeout(ctx, max(a.opts.HeartbeatInterval, time.Second))
	defer cancel()
	err = hostbeat.Put(pctx, kv, a.opts.HostID, b)
	if a.opts.ObserveJetStream != nil && ctx.Err() == nil {
		moved = a.opts.ObserveJetStream(began, err)
	}
	return moved, err
}

// hostBeat is the host's beat now: the servers the agent supervises (each
// with its pid and last health ping), then
// how many events wait in the outbox. In that order: a server leaves the
// agent only after its final events are in the stream or the outbox, so when
// the count read after the list is 0, every server missing from the list has
// its end in the stream. buf is storage for the server list, returned for
// the next beat.
func (a *Agent) hostBeat(buf []*gameServer) (hostbeat.Beat, []*gameServer) {
	list := a.snapshotInto(buf)
	defer clear(list) // hold no finished server until the next beat
	inv := &hostbeat.Inventory{Servers: make([]hostbeat.Server, 0, len(list))}
	for _, gs := range list {
		srv := hostbeat.Server{Name: gs.name, Pid: int(gs.pid.Load())}
		if at := gs.lastPingAt(); !at.IsZero() {
			srv.LastHeartbeatMs = at.UnixMilli()
		}
		inv.Servers = append(inv.Servers, srv)
	}
	slices.SortFunc(inv.Servers, func(x, y hostbeat.Server) int { return strings.Compare(x.Name, y.Name) })
	inv.Queued = a.outbox.len()
	return hostbeat.Beat{Time: a.opts.Clock.Now(), Inventory: inv}, list
}
