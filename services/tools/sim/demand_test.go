package sim

import (
	"context"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// demandTestCurve is a small spike: 1 match/s, 6/s for a few seconds, 1/s.
const demandTestCurve = "0s:1,5s:1,7s:6,11s:6,13s:1,20s:1"

// demandOptions is a short demand-mode run on 10 hosts of 10 slots, with
// no faults: the health contract of the smoke test, which a loaded 2-core
// machine under -race keeps.
func demandOptions(t *testing.T, buffer string, rolloutAt time.Duration) Options {
	curve, err := ParseCurve(demandTestCurve)
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Hosts: 10, ServersPerHost: 10,
		Demand: curve, Buffer: buffer, RolloutAt: rolloutAt,
		HealthPeriod: 2 * time.Second, FailureThreshold: 3, SDKGrace: 6 * time.Second,
		HostHeartbeat: 500 * time.Millisecond, UnreachableAfter: 5 * time.Second, LostAfter: 30 * time.Second,
		ShutdownGrace: 2 * time.Second, PlayersPerMatch: 2, DropFraction: 0.25, MatchLength: 4 * time.Second,
		ReadyTimeout: 2 * time.Minute, SettleTimeout: 2 * time.Minute,
		Progress: testWriter{t}, ProgressEvery: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
}

// runDemand runs a demand-mode simulation and logs its table.
func runDemand(t *testing.T, opts Options) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	rep.Print(&table)
	t.Log("\n" + table.String())
	if rep.Demand == nil {
		t.Fatal("a demand-mode run without a demand report")
	}
	return rep
}

// TestDemandSimulation runs demand mode: an autoscaled fleet (buffer 5)
// takes a spiky curve of matches while its template changes 12 s in. The
// figures must be coherent: matches allocated, READY servers idle, the
// fleet grown for the spike, the rollout completed without touching a
// server that held a match, no match cut short. A second run of the same
// curve with a buffer of 0 must be refused more often.
func TestDemandSimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and NATS")
	}
	rep := runDemand(t, demandOptions(t, "5", 12*time.Second))
	if !rep.OK() {
		t.Fatalf("simulation failed: %v", rep.Failures)
	}
	d, ro := rep.Demand, rep.Demand.Rollout
	var timelineAttempts, timelineRefused int64
	for _, w := range d.Timeline {
		timelineAttempts += w.Attempts
		timelineRefused += w.NoReadyGameServer
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"allocations attempted and most succeeded", d.Attempted > 0 && d.Succeeded > d.Attempted/2},
		{"attempted = succeeded + refused + other", d.Attempted == d.Succeeded+d.NoReadyGameServer+d.OtherFailures},
		{"no other allocation failure", d.OtherFailures == 0 && rep.AllocationErrors == 0},
		{"refusals are a share of the attempts", math.Abs(d.NoReadyPercent-100*float64(d.NoReadyGameServer)/float64(d.Attempted)) < 1e-9},
		{"the timeline holds every attempt", timelineAttempts == d.Attempted && timelineRefused == d.NoReadyGameServer},
		{"READY servers idled", d.IdleReadyServerSeconds > 0 && d.MeanReady > 0},
		{"idle seconds within the peak", d.IdleReadyServerSeconds <= float64(d.PeakReady)*rep.SteadySeconds+1},
		{"servers held matches", d.AllocatedServerSeconds > 0 && d.PeakAllocated > 0},
		{"the fleet grew for the spike", d.PeakReplicas > 5 && d.ScaleDecisions > 0},
		{"no more replicas than slots", d.PeakReplicas <= rep.GameServers && d.PeakServers <= rep.GameServers},
		{"the rollout started at its time", ro.Started && ro.RequestedAtSeconds >= 12},
		{"the rollout completed", ro.Completed && !ro.Halted && ro.Seconds > 0},
		{"the rollout replaced servers", ro.Replaced > 0},
		{"the rollout touched no server with a match", ro.AllocatedTouched == 0},
		{"the autoscaler stopped no server with a match", d.AllocatedScaledDown == 0},
		{"no match interrupted", d.MatchesInterrupted == 0 && rep.MatchesLost == 0},
		{"matches ended by their game", rep.MatchesEnded > 0},
		{"zero false terminations", rep.FalseTerminations == 0},
		{"published = in stream = applied", rep.PublishedByAgents == rep.InStreamByAgents && rep.InStreamByAgents == rep.AppliedByAgents},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no", c.what)
		}
	}

	// The same curve with no buffer: the autoscaler keeps as many servers
	// as are allocated, so none is READY for the next match.
	none := runDemand(t, demandOptions(t, "0", -1))
	if !none.OK() {
		t.Fatalf("simulation with buffer 0 failed: %v", none.Failures)
	}
	if none.Demand.NoReadyGameServer <= d.NoReadyGameServer {
		t.Errorf("buffer 0: %d NO_READY_GAME_SERVER, buffer 5: %d; want more without a buffer", none.Demand.NoReadyGameServer, d.NoReadyGameServer)
	}
}
