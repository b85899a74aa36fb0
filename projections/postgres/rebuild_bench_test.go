package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/projections/postgres"
)

// BenchmarkRebuild measures a whole Rebuild (fresh tables, replay from
// sequence 1, swap) of a stream of TETHER_BENCH_EVENTS events, in events/s.
func BenchmarkRebuild(b *testing.B) {
	n := benchEvents(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := newEnv(b)
	fillStream(b, ctx, e.js, n)
	last, err := e.store.StreamLastSequence(ctx)
	if err != nil {
		b.Fatal(err)
	}
	pool := e.pool()
	b.ResetTimer()
	var total, replay time.Duration
	for range b.N {
		res, err := postgres.Rebuild(ctx, postgres.ReplayOptions{Pool: pool, JetStream: e.js, BatchSize: benchBatch(b)})
		if err != nil {
			b.Fatal(err)
		}
		if res.Checkpoint != last {
			b.Fatalf("rebuilt to %d of %d", res.Checkpoint, last)
		}
		total += res.Duration
		replay += time.Duration(float64(res.Events) / res.Rate * float64(time.Second))
	}
	b.ReportMetric(float64(last)*float64(b.N)/total.Seconds(), "events/s")
	b.ReportMetric(float64(last)*float64(b.N)/replay.Seconds(), "replay-events/s")
	b.ReportMetric(float64(last), "events")
}
