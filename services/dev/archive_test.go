package dev_test

import (
	"net/http"
	"os"
	"path/filepath"
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
		"--archive-dir", archiveDir, "--retention", "1s", "--archive-interval", "100ms")
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
	if s.rest("GET", "/v1/"+server, nil, nil) != http.StatusNotFound {
		t.Errorf("the API still finds %s", server)
	}
	entries, err := os.ReadDir(archiveDir)
	if err != nil {
		t.Fatal(err)
	}
	var segments int
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".seg") {
			segments++
		}
	}
	if segments == 0 {
		t.Fatalf("no segment in %s: %v", archiveDir, entries)
	}
}
