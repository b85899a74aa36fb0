package dev_test

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/wait"
)

// BenchmarkBufferRefill measures what a matchmaker sees of a buffer
// policy, on the whole stack with real game server processes: a fleet
// with a buffer of 3 (max 8) gets 5 allocations in a row (retried on 429
// every 10 ms while the buffer is empty), and a round's samples are the
// times from the fifth allocation's answer (refill) and from the first
// allocation (episode) until the fleet has 3 READY servers again besides
// the 5 it handed out (polled every 10 ms through REST). Then the
// allocated servers are shut down and the fleet settles back to 3 before
// the next round. TETHER_BENCH_ROUNDS sets the rounds (default 10).
// Reports refill-p50-ms, refill-max-ms, episode-p50-ms, episode-max-ms.
func BenchmarkBufferRefill(b *testing.B) {
	rounds := 10
	if v, err := strconv.Atoi(os.Getenv("TETHER_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	tick := time.NewTicker(10 * time.Millisecond) // the measurement's sampling period
	defer tick.Stop()
	for range b.N {
		s := startStack(b, 2)
		spec := fleetSpec(3, nil)
		spec["autoscaling"] = map[string]any{"minReplicas": 0, "maxReplicas": 8, "buffer": map[string]any{"bufferSize": "3"}}
		if code := s.rest("POST", "/v1/fleets?fleetId=buffered", spec, nil); code != http.StatusOK {
			b.Fatalf("create fleet: %d", code)
		}
		// readyBesides counts the READY servers not in taken (the views
		// may not show an allocation yet).
		readyBesides := func(taken []string) int {
			n := 0
			for _, g := range byState(s.gameServers("buffered"), "READY") {
				if !slices.Contains(taken, g.Name) {
					n++
				}
			}
			return n
		}
		settled := func() bool {
			list := s.gameServers("buffered")
			return len(byState(list, "READY")) == 3 && len(list) == len(byState(list, "READY"))+len(byState(list, "TERMINATED"))
		}
		var refills, episodes []time.Duration
		for range rounds {
			wait.For(b, 60*time.Second, "the fleet settled at 3 READY", settled)
			var last time.Time
			var taken []string
			first := time.Now()
			for i := range 5 {
				deadline := time.Now().Add(20 * time.Second)
				for {
					var a allocation
					code := s.rest("POST", "/v1/fleets/buffered/gameServers:allocate", map[string]any{}, &a)
					if code == http.StatusOK {
						taken = append(taken, a.GameServer.Name)
						break
					}
					if code != http.StatusTooManyRequests || time.Now().After(deadline) {
						b.Fatalf("allocation %d: %d", i+1, code)
					}
					<-tick.C // a matchmaker's retry pause
				}
				last = time.Now()
			}
			for readyBesides(taken) < 3 {
				if time.Since(last) > 30*time.Second {
					b.Fatal("no 3 READY servers 30 s after the allocations")
				}
				<-tick.C
			}
			refills, episodes = append(refills, time.Since(last)), append(episodes, time.Since(first))
			for _, name := range taken {
				if code := s.rest("POST", "/v1/"+name+":shutdown", map[string]any{}, nil); code != http.StatusOK {
					b.Fatalf("shut down %s: %d", name, code)
				}
			}
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		for name, samples := range map[string][]time.Duration{"refill": refills, "episode": episodes} {
			slices.Sort(samples)
			b.ReportMetric(ms(samples[len(samples)/2]), name+"-p50-ms")
			b.ReportMetric(ms(samples[len(samples)-1]), name+"-max-ms")
			fmt.Fprintf(os.Stderr, "buffer %s samples: %v\n", name, samples)
		}
	}
}
