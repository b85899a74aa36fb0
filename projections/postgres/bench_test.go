package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// benchEvents is the stream size of BenchmarkReplay (env TETHER_BENCH_EVENTS).
func benchEvents(b *testing.B) int {
	if v := os.Getenv("TETHER_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("TETHER_BENCH_EVENTS: %v", err)
		}
		return n
	}
	return 200_000
}

// fillStream publishes n events for n/100 game servers, interleaved
// round-robin so every batch touches many aggregates (the projector's worst
// case): each server is scheduled, started, connected and readied, then
// alternates HealthDegraded and HealthRecovered.
func fillStream(b *testing.B, ctx context.Context, js jetstream.JetStream, n int) {
	b.Helper()
	const perServer = 100
	servers := n / perServer
	spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(spec)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	payload := func(step, i int) proto.Message {
		switch step {
		case 0:
			return &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: spec.Template, Health: spec.Health}
		case 1:
			return &eventsv1.ProcessStarted{Pid: int32(i), Address: "127.0.0.1", Attempt: 1}
		case 2:
			return &eventsv1.SdkConnected{Transport: "grpc-stream"}
		case 3:
			return &eventsv1.GameServerReady{}
		}
		if step%2 == 0 {
			return &eventsv1.HealthDegraded{MissedPeriods: 1, FailureThreshold: 3, PeriodSeconds: 5}
		}
		return &eventsv1.HealthRecovered{}
	}
	for step := range perServer {
		for i := range servers {
			name := fmt.Sprintf("fleets/arena/gameServers/gs-%d", i)
			e := events.New(name, at.Add(time.Duration(step)*time.Second), payload(step, i))
			data, err := e.Marshal()
			if err != nil {
				b.Fatal(err)
			}
			msg := &nats.Msg{Subject: events.MustSubject(name), Data: data, Header: nats.Header{}}
			msg.Header.Set(natsjs.HeaderType, e.Type)
			if _, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(10*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
}

// BenchmarkReplay measures events/s folded into PostgreSQL when a projector
// replays a stream from sequence 1 into empty views.
func BenchmarkReplay(b *testing.B) {
	n := benchEvents(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := newEnv(b)
	fillStream(b, ctx, e.js, n)
	last, err := e.store.StreamLastSequence(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var total time.Duration
	for i := range b.N {
		pool := e.pool()
		p, err := postgres.NewProjector(postgres.ProjectorOptions{Pool: pool, JetStream: e.js, Durable: fmt.Sprintf("bench-%d", i), BatchSize: benchBatch(b)})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(rctx) }()
		tick := time.NewTicker(time.Millisecond)
		for p.Checkpoint() < last {
			select {
			case <-ctx.Done():
				b.Fatalf("replay stuck at %d of %d", p.Checkpoint(), last)
			case <-tick.C:
			}
		}
		tick.Stop()
		total += time.Since(start)
		stop()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(last)*float64(b.N)/total.Seconds(), "events/s")
	b.ReportMetric(float64(last), "events")
}

// benchBatch is the projector batch size of BenchmarkReplay (env TETHER_BENCH_BATCH).
func benchBatch(b *testing.B) int {
	if v := os.Getenv("TETHER_BENCH_BATCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("TETHER_BENCH_BATCH: %v", err)
		}
		return n
	}
	return 0 // the projector's default
}
