package dev_test

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/wait"
)

// BenchmarkCrashReplacement measures the time from a game server's crash
// to its replacement being READY, on the whole stack with real processes
// of the example game server: a fleet of 4 on 2 hosts, and in each round
// one READY server's process is killed with SIGKILL. A sample runs from
// the kill to the time its replacement's agent recorded GameServerReady
// (the event's time, taken on this machine's clock like the kill's): the
// agent notices the exit, records it, the controller schedules a new
// server, its agent starts the process, which calls Ready. Before the next
// round the fleet is back at 4 READY. TETHER_BENCH_CRASHES sets the rounds
// (default 30). Reports p50-ms, p99-ms and max-ms, and each step's p50
// (exit-, schedule-, start-, ready-p50-ms: from the step before).
func BenchmarkCrashReplacement(b *testing.B) {
	rounds := 30
	if v, err := strconv.Atoi(os.Getenv("TETHER_BENCH_CRASHES")); err == nil && v > 0 {
		rounds = v
	}
	const fleet, size = "crashy", 4
	for range b.N {
		s := startStack(b, 2)
		if code := s.rest("POST", "/v1/fleets?fleetId="+fleet, fleetSpec(size, nil), nil); code != http.StatusOK {
			b.Fatalf("create fleet: %d", code)
		}
		var samples []time.Duration
		stepTimes := map[string][]time.Duration{}
		for range rounds {
			var ready []gameServer
			wait.For(b, 60*time.Second, fmt.Sprintf("%d READY servers", size), func() bool {
				list := s.gameServers(fleet)
				ready = byState(list, "READY")
				return len(ready) == size && len(list) == size+len(byState(list, "TERMINATED"))
			})
			before := map[string]bool{}
			for _, g := range s.gameServers(fleet) {
				before[g.Name] = true
			}
			victim := ready[0]
			killed := time.Now()
			if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
				b.Fatalf("kill %s (pid %d): %v", victim.Name, victim.Pid, err)
			}
			var replacement string
			wait.For(b, 30*time.Second, "the replacement of "+victim.Name+" READY", func() bool {
				for _, g := range byState(s.gameServers(fleet), "READY") {
					if !before[g.Name] {
						replacement = g.Name
						return true
					}
				}
				return false
			})
			// Each step's time, from the events: the exit recorded (the
			// victim's ProcessExited), the replacement scheduled, its
			// process started, READY.
			at := map[string]time.Time{}
			for _, e := range s.history(victim.Name) {
				if e.Type == "ProcessExited" {
					at["exit"] = e.Time
				}
			}
			for _, e := range s.history(replacement) {
				switch e.Type {
				case "GameServerScheduled":
					at["schedule"] = e.Time
				case "ProcessStarted":
					at["start"] = e.Time
				case "GameServerReady":
					at["ready"] = e.Time
				}
			}
			if len(at) != len(steps) {
				b.Fatalf("the events of %s and %s show only %v", victim.Name, replacement, at)
			}
			prev := killed
			for _, step := range steps {
				stepTimes[step] = append(stepTimes[step], at[step].Sub(prev))
				prev = at[step]
			}
			samples = append(samples, at["ready"].Sub(killed))
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		p50 := func(d []time.Duration) time.Duration { return slices.Sorted(slices.Values(d))[len(d)/2] }
		for _, step := range steps {
			b.ReportMetric(ms(p50(stepTimes[step])), step+"-p50-ms")
		}
		slices.Sort(samples)
		b.ReportMetric(ms(samples[len(samples)/2]), "p50-ms")
		b.ReportMetric(ms(samples[min(len(samples)-1, len(samples)*99/100)]), "p99-ms")
		b.ReportMetric(ms(samples[len(samples)-1]), "max-ms")
		fmt.Fprintf(os.Stderr, "crash to replacement READY, %d samples: %v\n", len(samples), samples)
	}
}

// steps are a crash's replacement, in order, each timed from the one
// before (the first from the kill).
var steps = []string{"exit", "schedule", "start", "ready"}
