package natsjs

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/tetherhq/tether/events"
)

// skippedMetric counts the undecodable messages the store's reads stood in
// for (events.UndecodableAt), each once per process.
const skippedMetric = "tether_events_undecodable_skipped"

// skippedMemory bounds how many skipped sequences a store remembers, so it
// logs and counts each once; past it, it forgets them all and starts
// again (a message is then logged again, never missed).
const skippedMemory = 4096

// skips logs and counts the undecodable messages a store's reads skip.
type skips struct {
	counter metric.Int64Counter
	mu      sync.Mutex
	seen    map[uint64]struct{}
}

// newSkips makes the store's counter from mp (nil: no metrics).
func newSkips(mp metric.MeterProvider) (*skips, error) {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	c, err := mp.Meter("github.com/tetherhq/tether/events/natsjs").Int64Counter(skippedMetric,
		metric.WithDescription("Undecodable messages on event subjects that this process's reads skipped (each counted once): their readers went on past them"))
	if err != nil {
		return nil, err
	}
	c.Add(context.Background(), 0)
	return &skips{counter: c, seen: make(map[uint64]struct{})}, nil
}

// first reports whether seq is skipped for the first time here.
func (k *skips) first(seq uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.seen[seq]; ok {
		return false
	}
	if len(k.seen) >= skippedMemory {
		clear(k.seen)
	}
	k.seen[seq] = struct{}{}
	return true
}

// read decodes a message of a history or a last-event read. An
// undecodable one (not an envelope, or not an event of its subject's
// aggregate) comes back as the envelope that stands for it
// (events.UndecodableAt), logged and counted the first time, instead of an
// error: a reader that stopped there would stop for good, and one bad
// message on a game server's subject froze its agent's writes and the
// fleet's allocations. Writers guard on its sequence; folds skip it.
func (s *Store) read(ctx context.Context, data []byte, subject string, h nats.Header, seq uint64) events.Envelope {
	env, err := s.open(data, subject, h, seq)
	if err == nil {
		return env
	}
	if s.skips.first(seq) {
		s.log.Error("undecodable message on an event subject skipped: its readers go on past it", "subject", subject, "sequence", seq, "err", err)
		s.skips.counter.Add(ctx, 1)
	}
	return events.UndecodableAt(subject, seq, err)
}
