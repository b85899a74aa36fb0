package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
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
func benchEvents(b *testing.B) int { return benchEnvInt(b, "TETHER_BENCH_EVENTS", 200_000) }

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

// benchBatch is the projector batch size of BenchmarkReplay (env
// TETHER_BENCH_BATCH); 0, the default, is the projector's own.
func benchBatch(b *testing.B) int { return benchEnvInt(b, "TETHER_BENCH_BATCH", 0) }

// BenchmarkLiveLag measures the live projection's publish→view lag: events
// are published at TETHER_BENCH_RATE per second (default 5,000) for
// TETHER_BENCH_SECONDS (default 10), round-robin over 1,000 game servers,
// while the projector applies them; an event's lag runs from the moment its
// publish was called to the moment the views announce (LISTEN/NOTIFY, as
// the API's read-your-writes sees it) a checkpoint that includes it.
func BenchmarkLiveLag(b *testing.B) {
	rate := benchEnvInt(b, "TETHER_BENCH_RATE", 5000)
	seconds := benchEnvInt(b, "TETHER_BENCH_SECONDS", 10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := newEnv(b)
	// 1,000 servers exist before the clock starts.
	const servers = 1000
	spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(spec)
	for i := range servers {
		name := fmt.Sprintf("fleets/arena/gameServers/gs-%d", i)
		e.append(name, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: spec.Template, Health: spec.Health},
			&eventsv1.ProcessStarted{Pid: int32(i), Attempt: 1}, &eventsv1.GameServerReady{})
	}
	pool := e.pool()
	p, err := postgres.NewProjector(postgres.ProjectorOptions{Pool: pool, JetStream: e.js})
	if err != nil {
		b.Fatal(err)
	}
	fresh := postgres.NewFreshness(pool, nil)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = p.Run(rctx) }()     // stopped by rctx; its errors show as a stuck wait below
	go func() { _ = fresh.Run(rctx) }() // likewise
	last, err := e.store.StreamLastSequence(ctx)
	if err != nil {
		b.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	if err := fresh.WaitFor(wctx, last); err != nil {
		b.Fatalf("setup not projected: %v", err)
	}
	wcancel()

	type sent struct {
		seq uint64
		at  time.Time
	}
	out := make(chan sent, rate*seconds)
	lat := make([]time.Duration, 0, rate*seconds)
	observed := make(chan struct{})
	b.ResetTimer()
	go func() {
		defer close(observed)
		for s := range out {
			if err := fresh.WaitFor(ctx, s.seq); err != nil {
				b.Errorf("wait for %d: %v", s.seq, err)
				return
			}
			lat = append(lat, time.Since(s.at))
		}
	}()
	tick := time.NewTicker(time.Millisecond)
	start := time.Now()
	n := 0
	for n < rate*seconds {
		<-tick.C
		// Catch up to the schedule if a tick was late.
		due := min(int(time.Since(start).Seconds()*float64(rate)), rate*seconds)
		for n < due {
			name := fmt.Sprintf("fleets/arena/gameServers/gs-%d", n%servers)
			payload := proto.Message(&eventsv1.HealthDegraded{MissedPeriods: 1, FailureThreshold: 3, PeriodSeconds: 5})
			if (n/servers)%2 == 1 {
				payload = &eventsv1.HealthRecovered{}
			}
			at := time.Now()
			seq, err := e.store.Append(ctx, events.MustSubject(name), events.AnySequence, events.New(name, at, payload))
			if err != nil {
				b.Fatal(err)
			}
			out <- sent{seq: seq, at: at}
			n++
		}
	}
	tick.Stop()
	elapsed := time.Since(start)
	close(out)
	<-observed
	b.StopTimer()
	slices.Sort(lat)
	q := func(f float64) float64 {
		return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1.0), "max-ms")
}

// benchEnvInt reads a positive integer from the environment.
func benchEnvInt(b *testing.B, env string, def int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", env, v)
	}
	return n
}
