package pgtemp_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/services/dev/pgtemp"
)

// parentDir returns a directory for servers that the `postgres` user can
// enter when the tests run as root (t.TempDir() is private to its owner).
func parentDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgtemp-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func start(t *testing.T, ctx context.Context, opts pgtemp.Options) *pgtemp.Server {
	t.Helper()
	s, err := pgtemp.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func connect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
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

func TestStartQueryStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	parent := parentDir(t)
	s, err := pgtemp.Start(ctx, pgtemp.Options{Dir: parent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // in case the test fails before its own Stop
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	if !strings.HasPrefix(s.Dir(), parent+string(os.PathSeparator)) {
		t.Errorf("server dir %s is not under Options.Dir %s", s.Dir(), parent)
	}
	if want := "postgres://postgres@127.0.0.1:" + strconv.Itoa(s.Port()) + "/app?sslmode=disable"; s.URL("app") != want {
		t.Errorf("URL = %q, want %q", s.URL("app"), want)
	}
	if err := s.CreateDatabase(ctx, "app", ""); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, s.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT 40 + 2").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 42 {
		t.Fatalf("SELECT 40 + 2 = %d", n)
	}
	// A connection left open must not hold Stop up: fast shutdown ends it.
	procs := serverProcesses(t, s.PID())
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("connection still works after Stop")
	}
	if c, err := pgx.Connect(ctx, s.URL("app")); err == nil {
		t.Error("server still accepts connections after Stop")
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
	}
	// Stop returns once the postmaster has exited, and the postmaster exits
	// after its backends.
	if alive := running(t, procs); len(alive) > 0 {
		t.Errorf("postgres processes %v still running after Stop", alive)
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server dir %s not removed: %v", s.Dir(), err)
	}
	assertEmpty(t, parent)
}

func TestDatabases(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := start(t, ctx, pgtemp.Options{})

	// Identifiers are quoted: names needing quotes work and inject nothing.
	const tmpl, clone = `tmpl "x"; DROP DATABASE postgres`, "Clone-1"
	if err := s.CreateDatabase(ctx, tmpl, ""); err != nil {
		t.Fatal(err)
	}
	c := connect(t, ctx, s.URL(tmpl))
	if _, err := c.Exec(ctx, "CREATE TABLE marker (v int); INSERT INTO marker VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDatabase(ctx, clone, tmpl); err != nil {
		t.Fatal(err)
	}
	c = connect(t, ctx, s.URL(clone))
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM marker").Scan(&v); err != nil || v != 7 {
		t.Fatalf("clone of template: marker = %d, %v; want 7", v, err)
	}
	if err := s.CreateDatabase(ctx, clone, ""); err == nil {
		t.Error("creating an existing database succeeded")
	}

	// DropDatabase ends the open connection c rather than failing.
	if err := s.DropDatabase(ctx, clone); err != nil {
		t.Fatal(err)
	}
	if err := s.DropDatabase(ctx, clone); err != nil {
		t.Fatalf("dropping a missing database: %v", err)
	}
	if err := c.Ping(ctx); err == nil {
		t.Error("connection to a dropped database still works")
	}
	var exists bool
	admin := connect(t, ctx, s.URL("postgres"))
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", clone).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %q still exists after DropDatabase", clone)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		durable   bool
		fixedPort bool
		want      string // fsync, synchronous_commit and full_page_writes
	}{
		{name: "default is fast", want: "off"},
		{name: "durable on a given port", durable: true, fixedPort: true, want: "on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			opts := pgtemp.Options{Durable: tt.durable}
			if tt.fixedPort {
				opts.Port = freePort(t)
			}
			s := start(t, ctx, opts)
			if tt.fixedPort && s.Port() != opts.Port {
				t.Errorf("Port() = %d, want %d", s.Port(), opts.Port)
			}
			conn := connect(t, ctx, s.URL("postgres"))
			for _, setting := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
				var got string
				if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Errorf("%s = %s, want %s", setting, got, tt.want)
				}
			}
			var listen string
			if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen); err != nil {
				t.Fatal(err)
			}
			if listen != "127.0.0.1" {
				t.Errorf("listen_addresses = %q, want 127.0.0.1", listen)
			}
		})
	}
}

func TestStartFailureCleansUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	parent := parentDir(t)
	s, err := pgtemp.Start(ctx, pgtemp.Options{Dir: parent, Port: l.Addr().(*net.TCPAddr).Port})
	if err == nil {
		t.Error("Start on a port in use succeeded")
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		return
	}
	// The error quotes postgres's log, which says why.
	if !strings.Contains(err.Error(), "Address already in use") {
		t.Errorf("error does not quote postgres's log:\n%v", err)
	}
	assertEmpty(t, parent)
}

// TestPortOfAnotherServer starts a server on a port where another one
// listens: it must fail rather than hand out the other server.
func TestPortOfAnotherServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := start(t, ctx, pgtemp.Options{})
	parent := parentDir(t)
	if second, err := pgtemp.Start(ctx, pgtemp.Options{Dir: parent, Port: first.Port()}); err == nil {
		t.Errorf("second server on port %d started", first.Port())
		if err := second.Stop(); err != nil {
			t.Error(err)
		}
	}
	assertEmpty(t, parent)
	conn := connect(t, ctx, first.URL("postgres"))
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("first server after the second failed: %v", err)
	}
}

func TestStartCanceled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	parent := parentDir(t)
	if s, err := pgtemp.Start(ctx, pgtemp.Options{Dir: parent}); err == nil {
		t.Error("Start with a canceled context succeeded")
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}
	assertEmpty(t, parent)
}

func TestInvalidPort(t *testing.T) {
	t.Parallel()
	if s, err := pgtemp.Start(context.Background(), pgtemp.Options{Port: 70000}); err == nil {
		t.Error("Start with port 70000 succeeded")
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind in %s: %s", dir, e.Name())
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestRestartKeepsData: a restart drops every connection and keeps the
// data; the server answers on the same port after it.
func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := start(t, ctx, pgtemp.Options{Durable: true})
	if err := s.CreateDatabase(ctx, "kept", ""); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, s.URL("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE marker (v int); INSERT INTO marker VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.PID() == pid {
		t.Fatal("the same postmaster after Restart")
	}
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a connection from before the restart still works")
	}
	_ = c.Close(ctx) // broken by the restart
	var v int
	if err := connect(t, ctx, s.URL("kept")).QueryRow(ctx, "SELECT v FROM marker").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after the restart: %d, %v", v, err)
	}
}

// With Password, the server trusts no one: a connection without the
// superuser's password is refused, local or not; the URL carries it.
func TestPasswordIsRequired(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := pgtemp.Start(ctx, pgtemp.Options{Dir: parentDir(t), Password: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if pw, ok := u.User.Password(); !ok || len(pw) < 32 {
		t.Fatalf("the URL has no password: %s", u.Redacted())
	}
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatalf("with the password: %v", err)
	}
	if err := conn.Close(ctx); err != nil {
		t.Error(err)
	}
	u.User = url.User("postgres")
	if c, err := pgx.Connect(ctx, u.String()); err == nil {
		_ = c.Close(ctx)
		t.Fatal("a connection without the password was let in")
	}
	u.User = url.UserPassword("postgres", "guess")
	if c, err := pgx.Connect(ctx, u.String()); err == nil {
		_ = c.Close(ctx)
		t.Fatal("a wrong password was let in")
	}
}
