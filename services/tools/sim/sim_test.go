package sim

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/testkit/syncbuf"
)

// TestSmokeSimulation runs a short simulation (300 servers on 30 hosts for
// 20 s of faults and matches) and checks its counters: every event the
// agents published is in the stream and applied, no server ended without an
// injected cause, every injected crash and hang was detected, and matches
// and reconnects went through. It asserts no latency: those are make
// bench's.
func TestSmokeSimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and NATS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The health contract is one a starved process keeps on a loaded 2-core
	// machine under -race: a healthy server must go 6 s (3 periods of 2 s)
	// without a heartbeat to be failed, against a 1 s heartbeat and SDK
	// resets of at most 1 s, so some 4 s of scheduling delay are tolerated.
	// (At a 1 s period and threshold 2 a reset alone took up to 1.5 s of the
	// 2 s, and a loaded machine failed healthy servers.) Injected hangs are
	// still detected, 6-7 s after they start.
	opts := Options{
		Hosts: 30, ServersPerHost: 10, Fleets: 3,
		HealthPeriod: 2 * time.Second, FailureThreshold: 3, SDKGrace: 6 * time.Second, FlapPause: time.Second,
		HostHeartbeat: 250 * time.Millisecond, UnreachableAfter: 2 * time.Second, LostAfter: 30 * time.Second,
		ShutdownGrace: 2 * time.Second, SlowStart: 1500 * time.Millisecond, PartitionLength: 3 * time.Second,
		CrashRate: 1, HangRate: 0.5, FlapRate: 3, PartitionRate: 0.5, SlowStartFraction: 0.1,
		AllocationRate: 5, DropFraction: 0.5, MatchLength: 4 * time.Second,
		Duration: 20 * time.Second, ReadyTimeout: 2 * time.Minute, SettleTimeout: 2 * time.Minute,
		Progress: testWriter{t}, ProgressEvery: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	requireOK(t, rep)
	checks := []struct {
		what string
		ok   bool
	}{
		{"agents published events", rep.PublishedByAgents > 1200}, // ≥ 4 per server to come up
		{"published = in stream = applied", rep.PublishedByAgents == rep.InStreamByAgents && rep.InStreamByAgents == rep.AppliedByAgents},
		{"every stream event applied", int64(rep.InStream) == rep.Applied && rep.DeadLetters == 0},
		{"crashes injected", rep.Crashes > 0},
		{"hangs injected", rep.Hangs > 0},
		{"SDK resets injected", rep.Flaps > 0},
		{"host partitions injected", rep.Partitions > 0},
		{"zero false terminations", rep.FalseTerminations == 0},
		{"zero missed detections", rep.MissedDetections == 0},
		{"crashes detected", rep.CrashDetection.N == rep.Crashes},
		// Detection latency is a benchmark figure (make bench), not asserted
		// here: a busy test machine may delay it.
		{"hangs detected", rep.HangDetection.N == rep.Hangs},
		{"matches allocated", rep.Allocations > 0 && rep.AllocationLatency.N > 0},
		{"allocations timed by the API", servedTimed(rep)},
		{"matches ended by their game", rep.MatchesEnded > 0},
		{"players joined and left", rep.PlayersJoined > 0 && rep.PlayersLeft > 0},
		{"players dropped and rejoined", rep.PlayersDropped > 0 && rep.PlayersRejoined > 0 && rep.ReconnectLatency.N > 0},
		{"lag sampled", rep.ProjectionLag.N > 0},
		{"controller passes measured", rep.ControllerPasses > 0},
		{"sizes read", len(rep.Tables) > 0 && len(rep.Streams) == 3},
		{"CPU told apart by component", rep.CPU != nil && hasComponents(rep.CPU,
			cpuNames[componentSimulatedProcesses], cpuNames[dev.ComponentAgent], cpuNames[dev.ComponentProjector], cpuNATSServer, cpuPostgres)},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no", c.what)
		}
	}
}

// requireOK logs a run's report and fails the test if its audit failed.
func requireOK(t *testing.T, rep *Report) {
	t.Helper()
	var table strings.Builder
	rep.Print(&table)
	t.Log("\n" + table.String())
	if !rep.OK() {
		t.Fatalf("simulation failed: %v", rep.Failures)
	}
}

// hasComponents reports whether every one of names has a row in c.
func hasComponents(c *CPUReport, names ...string) bool {
	for _, n := range names {
		if !slices.ContainsFunc(c.Components, func(s CPUShare) bool { return s.Component == n }) {
			return false
		}
	}
	return true
}

// TestSplitSimulation runs the control plane and the simulated hosts as
// the two roles (here in one test process, as two processes would): the
// hosts find the control plane from its data directory, the run audits
// clean, and the report counts the control plane's process apart.
func TestSplitSimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and NATS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	periods := Options{HealthPeriod: 2 * time.Second, UnreachableAfter: 2 * time.Second, LostAfter: 30 * time.Second, ShutdownGrace: 2 * time.Second}
	cpDir := t.TempDir()
	cpCtx, stopCP := context.WithCancel(ctx)
	cpDone := make(chan error, 1)
	var cpOut syncbuf.Buffer
	go func() {
		o := periods
		o.Role, o.DataDir, o.Logger, o.Progress = RoleControlPlane, cpDir, log, io.MultiWriter(testWriter{t}, &cpOut)
		o.TraceAllocations = true
		_, err := Run(cpCtx, o)
		cpDone <- err
	}()
	o := periods
	o.Role, o.ControlPlaneDir, o.Logger, o.Progress = RoleHosts, cpDir, log, testWriter{t}
	o.Hosts, o.ServersPerHost, o.Fleets, o.HostHeartbeat = 5, 4, 2, 250*time.Millisecond
	o.AllocationRate, o.MatchLength, o.Duration = 2, 3*time.Second, 8*time.Second
	o.ReadyTimeout, o.SettleTimeout = time.Minute, time.Minute
	rep, err := Run(ctx, o)
	stopCP()
	if cpErr := <-cpDone; cpErr != nil && !errors.Is(cpErr, context.Canceled) {
		t.Errorf("control plane: %v", cpErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	requireOK(t, rep)
	if !rep.ControlPlaneApart || rep.PublishedByAgents == 0 || rep.PublishedByAgents != rep.AppliedByAgents || rep.Allocations == 0 {
		t.Fatalf("apart %v, published %d, applied %d, allocations %d", rep.ControlPlaneApart, rep.PublishedByAgents, rep.AppliedByAgents, rep.Allocations)
	}
	// The control plane's own figures come from its process.
	if rep.ControllerPasses == 0 || !servedTimed(rep) {
		t.Fatalf("the control plane's figures are missing: %d controller passes, allocations served %+v", rep.ControllerPasses, rep.AllocationServed)
	}
	// It traced the allocations and said where their time went.
	traced := regexp.MustCompile(`(\d+) allocations; server span mean`).FindStringSubmatch(cpOut.String())
	if traced == nil || traced[1] == "0" {
		t.Fatalf("no allocation traced by the control plane; its output:\n%s", cpOut.String())
	}
	if rep.CPU == nil || !hasComponents(rep.CPU, cpuApart) {
		t.Fatalf("the control plane's process is not in the CPU table: %+v", rep.CPU)
	}
}

// servedTimed reports whether the API's timing of the steady phase's
// allocations is in the report: some, no more than the matchmaker's calls,
// and a p99 in a bucket.
func servedTimed(rep *Report) bool {
	s := rep.AllocationServed
	calls := int(rep.Allocations + rep.AllocationErrors + rep.NoReadyServer)
	return s.N > 0 && s.N <= calls && s.P99 > 0 && s.P50 <= s.P99 && s.P99 <= s.Max
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
