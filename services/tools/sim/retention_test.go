package sim

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// TestRetentionSimulation runs the simulation with archiving on and a
// retention of 2 s (50 servers on 10 hosts, 10 s of matches of 1 s and
// crashes). Ended game servers and game sessions must leave the stream and
// the views for the archive while the matches go on, the audit must find
// every event the agents published in the stream or the archive, crashed
// servers archived meanwhile must be judged from their archived histories,
// and once the system rests past the window, the stream must hold one
// subject per live aggregate and the views only live rows.
func TestRetentionSimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and NATS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The health contract of the smoke test, which a loaded 2-core machine
	// under -race keeps.
	opts := Options{
		Hosts: 10, ServersPerHost: 5, Fleets: 2,
		HealthPeriod: 2 * time.Second, FailureThreshold: 3, SDKGrace: 6 * time.Second,
		HostHeartbeat: 250 * time.Millisecond, UnreachableAfter: 2 * time.Second, LostAfter: 30 * time.Second,
		ShutdownGrace: 2 * time.Second, CrashRate: 1,
		AllocationRate: 4, PlayersPerMatch: 2, DropFraction: 0.25, MatchLength: time.Second,
		Retention: 2 * time.Second, ArchiveInterval: 500 * time.Millisecond, StorageEvery: 2 * time.Second,
		Duration: 10 * time.Second, ReadyTimeout: time.Minute, SettleTimeout: time.Minute,
		Progress: testWriter{t}, ProgressEvery: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	requireOK(t, rep)
	rt := rep.Retention
	if rt == nil {
		t.Fatal("no retention report")
	}
	if len(rep.Storage) < 3 {
		t.Fatalf("%d storage samples, want the steady phase's and one at rest", len(rep.Storage))
	}
	steadyEnd, rest := rep.Storage[len(rep.Storage)-2], rep.Storage[len(rep.Storage)-1]
	slots := int64(opts.Hosts * opts.ServersPerHost)
	checks := []struct {
		what string
		ok   bool
	}{
		{"matches played", rep.MatchesEnded > 0},
		{"game servers and game sessions archived", rt.GameServers > 0 && rt.GameSessions > 0 && rt.Segments > 0 && rt.Bytes > 0},
		{"the archive holds the agents' events", rt.Events > 0 && rep.ArchivedByAgents > 0 && rep.ArchivedByAgents == rt.ByAgents},
		{"published = in the stream + archived", rep.PublishedByAgents == rep.InStreamByAgents+rep.ArchivedByAgents},
		{"every stream event applied", int64(rep.InStream) == rep.Applied && rep.DeadLetters == 0},
		{"crashes injected and detected", rep.Crashes > 0 && rep.CrashDetection.N == rep.Crashes && rep.MissedDetections == 0},
		{"archived while the matches went on", steadyEnd.Phase == "steady" && steadyEnd.ArchiveAggregates > 0},
		{"the stream smaller than its history", steadyEnd.StreamMessages < steadyEnd.StreamLastSequence},
		{"at rest: one subject per live aggregate", rest.Phase == "rest" &&
			rest.StreamSubjects == uint64(rest.Hosts+rest.Fleets+rest.GameServers+rest.GameSessions)},
		{"at rest: live game servers only", rest.GameServers == slots && rest.LiveGameServers == slots},
		{"at rest: no game session", rest.GameSessions == 0},
		{"at rest: the archive holds every ended server and session", rest.ArchiveAggregates >= int64(rt.Aggregates) &&
			rest.ArchiveAggregates >= rep.Allocations*2},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no", c.what)
		}
	}
}
