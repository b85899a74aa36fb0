// Package pgtest gives each integration test a PostgreSQL database of its
// own: one throwaway server per test package, started by Main, and a
// database per test, cloned in ~0.1 s from a template that has Tether's
// migrations applied.
//
// Use it from a package's tests:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
//		...
//	}
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/migrations"
	"github.com/tetherhq/tether/services/dev/pgtemp"
)

// template is the migrated database every NewDatabase copies. It refuses
// connections: a connection to it would make copying it fail.
const template = "tether_template"

const (
	// setupTimeout bounds starting the server and migrating the template.
	setupTimeout = 2 * time.Minute
	// dbTimeout bounds creating or dropping one database.
	dbTimeout = 30 * time.Second
	// maxNameLen is PostgreSQL's identifier limit (NAMEDATALEN-1).
	maxNameLen = 63
)

// Package state, confined to this test helper: Main sets server once,
// before any test runs, and clears it after the last; tests only read it.
var (
	server atomic.Pointer[pgtemp.Server]
	dbSeq  atomic.Uint64
)

// Main starts the test package's server and migrates the template, runs
// the tests, stops the server and exits with the tests' exit code (1 if
// setting up or stopping the server failed). Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit: it returns the exit code, for a TestMain
// that has more to clean up once the tests have run.
func Run(m *testing.M) int {
	s, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	if !server.CompareAndSwap(nil, s) {
		fmt.Fprintln(os.Stderr, "pgtest: Main called more than once")
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		return 1
	}
	code := m.Run()
	server.Store(nil)
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stop PostgreSQL:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// setup starts a server and creates the migrated template.
func setup() (*pgtemp.Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	s, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		return nil, err
	}
	if err := createTemplate(ctx, s); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

func createTemplate(ctx context.Context, s *pgtemp.Server) (err error) {
	if err := s.CreateDatabase(ctx, template, ""); err != nil {
		return err
	}
	if err := migrations.Apply(ctx, s.URL(template), nil); err != nil {
		return fmt.Errorf("migrate %s: %w", template, err)
	}
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		if cerr := conn.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close connection: %w", cerr))
		}
	}()
	sql := "ALTER DATABASE " + pgx.Identifier{template}.Sanitize() + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// Server returns the test package's server, for tests that need more than
// NewDatabase. It panics unless the package's TestMain calls Main.
func Server() *pgtemp.Server {
	s := server.Load()
	if s == nil {
		panic("pgtest: no server: the test package needs func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	return s
}

// NewDatabase creates a database for t, copied from the migrated template,
// and returns its URL. The database is dropped when t ends, connections
// still open to it included.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := server.Load()
	if s == nil {
		t.Fatal("pgtest: NewDatabase needs a server: add func TestMain(m *testing.M) { pgtest.Main(m) } to the test package")
	}
	name := databaseName(t.Name(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	if err := s.CreateDatabase(ctx, name, template); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		if err := s.DropDatabase(ctx, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s.URL(name)
}

// databaseName makes a unique, readable database name from a test name:
// t<seq>_<lowercase test name, other characters as _>, within PostgreSQL's
// identifier limit.
func databaseName(test string, seq uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "t%d_", seq)
	for _, r := range strings.ToLower(test) {
		if b.Len() >= maxNameLen {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
