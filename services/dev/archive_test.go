package dev_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// `tether dev --archive-dir` archives what has ended once --retention has
// passed: a deleted fleet's terminated server, then the fleet itself. They
// leave the views (the API no longer finds them) for segment files, purged
// by the controller's own NATS user, the one allowed to.
func TestDevArchivesEndedAggregates(t *testing.T) {
	dataDir, archiveDir, dbURL := t.TempDir(), filepath.Join(t.TempDir(), "archive"), pgtest.NewDatabase(t)
	p := startTether(t, []string{"DATABASE_URL=" + dbURL}, "--log-level", "warn", "dev", "--data-dir", dataDir,
		"--hosts", "1", "--rest-port", "-1", "--grpc-port", "-1", "--nats-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1",
		"--archive-dir", archiveDir, "--retention", "1s", "--archive-interval", "100ms", "--allowed-commands", filepath.Dir(gameServerBin))
	s := &stack{t: t, addrs: dev.Addresses{REST: restAddress(t, p)}, key: devKey(t, dataDir, "admin")}
	if code := s.rest("POST", "/v1/fleets?fleetId=short", fleetSpec(1, nil), nil); code != http.StatusOK {
		t.Fatalf("create a fleet: %d", code)
	}
	var server string
	wait.For(t, 30*time.Second, "the fleet's server READY", func() bool {
		ready := byState(s.gameServers("short"), "READY")
		if len(ready) == 1 {
			server = ready[0].Name
		}
		return server != ""
	})
	if code := s.rest("DELETE", "/v1/fleets/short", nil, nil); code != http.StatusOK {
		t.Fatalf("delete the fleet: %d", code)
	}
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	wait.For(t, 30*time.Second, "the server and the fleet archived", func() bool {
		var n int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM archived_aggregates a JOIN archive_segments s ON s.name = a.segment
WHERE s.state = 'DONE' AND a.aggregate = ANY($1)`, []string{server, "fleets/short"}).Scan(&n)
		return err == nil && n == 2
	})
	entries, err := os.ReadDir(archiveDir)
	if err != nil {
		t.Fatal(err)
	}
	var segments []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".seg") {
			segments = append(segments, e.Name())
		}
	}
	if len(segments) == 0 {
		t.Fatalf("no segment in %s: %v", archiveDir, entries)
	}

	// The API reads the same directory: the archived server is NOT_FOUND,
	// saying where its history went, and its history, explanation and
	// state come from there.
	var notFound struct{ Message string }
	if code := s.rest("GET", "/v1/"+server, nil, &notFound); code != http.StatusNotFound || !strings.Contains(notFound.Message, "was archived") {
		t.Errorf("GET %s: %d %q; want NOT_FOUND saying it was archived", server, code, notFound.Message)
	}
	var hist struct {
		Events []struct {
			Type, ArchiveSegment string
		}
		ArchiveSegments []string
	}
	if code := s.rest("GET", "/v1/"+server+"/events", nil, &hist); code != http.StatusOK || len(hist.Events) == 0 ||
		len(hist.ArchiveSegments) != 1 || !slices.Contains(segments, hist.ArchiveSegments[0]) {
		t.Fatalf("history of the archived %s: %d %+v", server, code, hist)
	}
	for _, e := range hist.Events {
		if e.ArchiveSegment != hist.ArchiveSegments[0] {
			t.Fatalf("history of the archived %s: %s read from %q", server, e.Type, e.ArchiveSegment)
		}
	}
	if last := hist.Events[len(hist.Events)-1].Type; last != "GameServerTerminated" {
		t.Fatalf("the archived server's history ends with %s", last)
	}
	var x struct {
		State, Reason   string
		ArchiveSegments []string
	}
	if code := s.rest("GET", "/v1/"+server+":explain", nil, &x); code != http.StatusOK || x.State != "TERMINATED" ||
		x.Reason != "FLEET_DELETED" || len(x.ArchiveSegments) != 1 {
		t.Fatalf("explain the archived %s: %d %+v", server, code, x)
	}
	var st struct{ Segments struct{ Done string } }
	if code := s.rest("GET", "/v1/archive:status", nil, &st); code != http.StatusOK || st.Segments.Done == "" || st.Segments.Done == "0" {
		t.Fatalf("archive status: %d %+v", code, st)
	}
}

// `tether dev` keeps an archive in its data dir without being asked, so
// that the tour's `tetherctl archive verify` reads it: under `make run` it
// answered "this API server does not read the archive".
func TestDevKeepsAnArchiveInItsDataDir(t *testing.T) {
	dataDir := t.TempDir()
	p := startTether(t, []string{"DATABASE_URL=" + pgtest.NewDatabase(t)}, "--log-level", "warn", "dev", "--data-dir", dataDir,
		"--hosts", "1", "--rest-port", "-1", "--grpc-port", "-1", "--nats-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1",
		"--allowed-commands", filepath.Dir(gameServerBin))
	s := &stack{t: t, addrs: dev.Addresses{REST: restAddress(t, p)}, key: devKey(t, dataDir, "admin")}
	var verified map[string]any
	if code := s.rest("POST", "/v1/archive:verify", map[string]any{}, &verified); code != http.StatusOK {
		t.Fatalf("archive verify: %d %v, want 200", code, verified)
	}
	if info, err := os.Stat(dev.ArchiveDir(dataDir)); err != nil || !info.IsDir() {
		t.Errorf("no archive directory in the data dir: %v", err)
	}
}
