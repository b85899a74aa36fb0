package hostbeat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// BenchmarkReadBeats reads every host's beat from a bucket of
// TETHER_BENCH_HOSTS hosts (default 10,000), each beat listing 10 game
// servers, as the controller does each pass:
//   - Read: the listing then one get per key (N+1 round trips);
//   - Tracker: Beats of a running tracker (one round trip and a copy);
//   - TrackerStart: a new tracker until its initial values are in (what a
//     new leader pays once).
func BenchmarkReadBeats(b *testing.B) {
	hosts := benchEnvInt(b, "TETHER_BENCH_HOSTS", 10000)
	_, js := natstest.Connect(b, natstest.Start(b))
	ctx := b.Context()
	kv, err := setUp(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	fill(b, js, hosts)
	check := func(got map[string]hostbeat.Beat) {
		if len(got) != hosts {
			b.Fatalf("read %d beats, want %d", len(got), hosts)
		}
	}

	b.Run(fmt.Sprintf("Read/hosts=%d", hosts), func(b *testing.B) {
		for b.Loop() {
			got, err := hostbeat.Read(ctx, kv)
			if err != nil {
				b.Fatal(err)
			}
			check(got)
		}
	})
	b.Run(fmt.Sprintf("Tracker/hosts=%d", hosts), func(b *testing.B) {
		tr, err := hostbeat.Track(ctx, js)
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := tr.Stop(); err != nil {
				b.Error(err)
			}
		}()
		if err := tr.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			got, err := tr.Beats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			check(got)
		}
	})
	b.Run(fmt.Sprintf("TrackerStart/hosts=%d", hosts), func(b *testing.B) {
		for b.Loop() {
			tr, err := hostbeat.Track(ctx, js)
			if err != nil {
				b.Fatal(err)
			}
			if err := tr.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := tr.Stop(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// fill writes a beat for each of n hosts, published asynchronously.
func fill(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	servers := make([]hostbeat.Server, 10)
	for i := range servers {
		servers[i] = hostbeat.Server{Name: fmt.Sprintf("fleets/arena/gameServers/gs-%02d", i), Pid: 1000 + i}
	}
	data, err := json.Marshal(hostbeat.Beat{Time: time.Now(), Inventory: &hostbeat.Inventory{Servers: servers}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.%s.host-%05d", hostbeat.Bucket, i), data); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("publishing the beats timed out")
	}
}

// benchEnvInt reads a positive size from the environment, def if unset.
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
