package pgtest_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/services/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, ctx context.Context, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := conn.Close(context.Background()); err != nil {
			t.Errorf("close connection: %v", err)
		}
	})
	return conn
}

func TestDatabasesAreMigratedAndIsolated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	urlA, urlB := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	if urlA == urlB {
		t.Fatalf("two databases share the URL %s", urlA)
	}
	a, b := connect(t, ctx, urlA), connect(t, ctx, urlB)
	for name, conn := range map[string]*pgx.Conn{"first": a, "second": b} {
		var applied int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&applied); err != nil {
			t.Fatalf("%s database: migrations not recorded: %v", name, err)
		}
		if applied == 0 {
			t.Errorf("%s database: no migration applied", name)
		}
	}
	if _, err := a.Exec(ctx, "INSERT INTO projector_checkpoints (partition, sequence) VALUES ('x', 7)"); err != nil {
		t.Fatalf("migrated table missing: %v", err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM projector_checkpoints").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("second database sees %d rows written to the first", n)
	}
	if err := a.QueryRow(ctx, "SELECT sequence FROM projector_checkpoints WHERE partition = 'x'").Scan(&n); err != nil || n != 7 {
		t.Fatalf("first database: sequence = %d, %v; want 7", n, err)
	}
}

// TestDatabasesAreDropped creates databases from parallel subtests and
// checks each is gone once its subtest has ended, though a connection to
// it was still open.
func TestDatabasesAreDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const parallel = 8
	names := make(chan string, parallel)
	t.Run("group", func(t *testing.T) {
		for i := range parallel {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				dbURL := pgtest.NewDatabase(t)
				u, err := url.Parse(dbURL)
				if err != nil {
					t.Fatal(err)
				}
				names <- strings.TrimPrefix(u.Path, "/")
				// Left open on purpose: the drop must end it.
				if _, err := pgx.Connect(ctx, dbURL); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
	close(names)
	admin := connect(t, ctx, pgtest.Server().URL("postgres"))
	seen := map[string]bool{}
	for name := range names {
		if seen[name] {
			t.Errorf("database %s handed out twice", name)
		}
		seen[name] = true
		var exists bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("database %s still exists after its test ended", name)
		}
	}
	if len(seen) != parallel {
		t.Errorf("%d databases created, want %d", len(seen), parallel)
	}
}

func TestTemplateRefusesConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.Server().URL("tether_template"))
	if err == nil {
		t.Error("connected to the template; NewDatabase would fail while the connection is open")
		if err := conn.Close(ctx); err != nil {
			t.Error(err)
		}
	}
}
