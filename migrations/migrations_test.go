package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/migrations"
	"github.com/tetherhq/tether/services/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// emptyDatabase creates a database without Tether's schema.
func emptyDatabase(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	s := pgtest.Server()
	if err := s.CreateDatabase(ctx, name, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.DropDatabase(context.Background(), name); err != nil {
			t.Error(err)
		}
	})
	return s.URL(name)
}

func sqlFiles(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestFileNames(t *testing.T) {
	names := sqlFiles(t)
	if len(names) == 0 {
		t.Fatal("no migrations embedded")
	}
	valid := regexp.MustCompile(`^[0-9]{5}_[a-z0-9_]+\.sql$`)
	for _, name := range names {
		if !valid.MatchString(name) {
			t.Errorf("migration %s is not named NNNNN_lowercase_words.sql", name)
		}
	}
}

// TestConcurrentApply starts several Applies on an empty database at once,
// as processes starting together do: all succeed and each migration runs
// exactly once.
func TestConcurrentApply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := emptyDatabase(t, ctx, "concurrent_apply")
	logs := &recorder{}
	logger := slog.New(logs)
	var g errgroup.Group
	for range 4 {
		g.Go(func() error { return migrations.Apply(ctx, dbURL, logger) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	want := len(sqlFiles(t))
	if got := logs.count("migration applied"); got != want {
		t.Errorf("%d migrations applied, want each of the %d once", got, want)
	}
	if got := logs.count("database schema up to date"); got != 4 {
		t.Errorf("%d Applies reported the schema up to date, want 4", got)
	}
	db := open(t, dbURL)
	var versions, distinct int
	if err := db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0").
		Scan(&versions, &distinct); err != nil {
		t.Fatal(err)
	}
	if versions != want || distinct != want {
		t.Errorf("goose_db_version has %d rows for %d versions, want %d of each", versions, distinct, want)
	}

	// Again: nothing left to do.
	logs = &recorder{}
	if err := migrations.Apply(ctx, dbURL, slog.New(logs)); err != nil {
		t.Fatal(err)
	}
	if got := logs.count("migration applied"); got != 0 {
		t.Errorf("second Apply applied %d migrations, want 0", got)
	}
}

// TestDownUp rolls every migration back and applies them again, so a broken
// Down section is found before someone needs it.
func TestDownUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := emptyDatabase(t, ctx, "down_up")
	if err := migrations.Apply(ctx, dbURL, nil); err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, open(t, dbURL), migrations.FS(), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 0 {
		t.Fatalf("version after down = %d, %v; want 0", v, err)
	}
	if err := migrations.Apply(ctx, dbURL, nil); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	if pending, err := p.HasPending(ctx); err != nil || pending {
		t.Fatalf("pending after up = %t, %v; want false", pending, err)
	}
}

func TestApplyBadURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := pgtest.Server().URL("no_such_database")
	if err := migrations.Apply(ctx, dbURL, nil); err == nil {
		t.Fatal("Apply to a missing database succeeded")
	}
}

func open(t *testing.T, dbURL string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// recorder is a slog.Handler that counts records by message.
type recorder struct {
	mu       sync.Mutex
	messages map[string]int
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.messages == nil {
		r.messages = map[string]int{}
	}
	r.messages[rec.Message]++
	return nil
}

func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

func (r *recorder) WithGroup(string) slog.Handler { return r }

func (r *recorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.messages[msg]
}

// TestCheck: a service checks the schema and says to run tether migrate
// while a migration is pending; once applied, the check passes.
func TestCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := emptyDatabase(t, ctx, "check")
	err := migrations.Check(ctx, url)
	if !errors.Is(err, migrations.ErrPending) || !strings.Contains(err.Error(), "tether migrate") {
		t.Fatalf("Check on an empty database: %v, want ErrPending naming tether migrate", err)
	}
	if err := migrations.Apply(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, url); err != nil {
		t.Fatalf("Check after Apply: %v", err)
	}
}
