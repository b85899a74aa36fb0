// Package pgtest gives each integration test its own PostgreSQL database:
// one throwaway server per test package (started in TestMain) and a database
// per test, cloned in ~0.1 s from a template that has the migrations applied.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/migrations"
	"github.com/tetherhq/tether/services/dev/pgtemp"
)

const templateDB = "tether_template"

// The package's server. Package state is confined to this test helper:
// TestMain sets it once before any test runs.
var (
	server  *pgtemp.Server
	counter atomic.Int64
)

// Main starts the server and the migrated template, runs the tests, and
// stops the server. Use it as: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}()
	if err := s.CreateDatabase(ctx, templateDB, ""); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	if err := migrations.Apply(ctx, s.URL(templateDB), nil); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	server = s
	return m.Run()
}

// Server returns the package's server.
func Server(t testing.TB) *pgtemp.Server {
	t.Helper()
	if server == nil {
		t.Fatal("pgtest: no server: call pgtest.Main(m) from TestMain")
	}
	return server
}

// NewDatabase creates a migrated database for this test, dropped at cleanup,
// and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := Server(t)
	name := fmt.Sprintf("t%d_%s", counter.Add(1), sanitize(t.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.CreateDatabase(ctx, name, templateDB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("pgtest: drop %s: %v", name, err)
		}
	})
	return s.URL(name)
}

func sanitize(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}
