// Package pgtemp starts a throwaway PostgreSQL server from the binaries on
// PATH (initdb, postgres), for `tether dev` and integration tests. PostgreSQL
// refuses to run as root, so when the process is root the server runs as the
// `postgres` OS user (DESIGN.md §10).
package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configure a throwaway server.
type Options struct {
	// Dir is the parent of the server's directory; default os.TempDir().
	Dir string
	// Port to listen on, on 127.0.0.1; 0 picks a free one.
	Port int
	// Durable keeps fsync on; by default it is off, which is fine for data
	// that is thrown away.
	Durable bool
	// StartTimeout bounds start-up; default 30s.
	StartTimeout time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

// Server is a running throwaway PostgreSQL.
type Server struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the postgres process has exited
	log  *slog.Logger

	stopOnce sync.Once
	stopErr  error
}

// Start runs initdb into a fresh directory and starts postgres on loopback.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		opts.Dir = os.TempDir()
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	for _, bin := range []string{"initdb", "postgres"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("pgtemp: %s not found on PATH: install the PostgreSQL server binaries (Debian: apt-get install postgresql, then add /usr/lib/postgresql/<version>/bin to PATH): %w", bin, err)
		}
	}
	cred, uid, gid, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.Dir, "tether-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: %w", err)
	}
	s := &Server{dir: dir, log: opts.Logger, done: make(chan struct{})}
	fail := func(err error) (*Server, error) {
		_ = os.RemoveAll(dir) // Cleaning up after a failed start; the start error is what matters.
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(fmt.Errorf("pgtemp: chown %s: %w", dir, err))
		}
	}
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return fail(fmt.Errorf("pgtemp: %w", err))
	}
	if cred != nil {
		if err := os.Chown(sock, uid, gid); err != nil {
			return fail(fmt.Errorf("pgtemp: chown %s: %w", sock, err))
		}
	}
	initdb := exec.CommandContext(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgtemp: initdb: %w\n%s", err, out))
	}
	if s.port = opts.Port; s.port == 0 {
		if s.port, err = freePort(); err != nil {
			return fail(err)
		}
	}
	args := []string{"-D", data, "-p", strconv.Itoa(s.port), "-k", sock, "-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=300", "-c", "shared_buffers=128MB", "-c", "log_min_messages=warning"}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fail(fmt.Errorf("pgtemp: %w", err))
	}
	defer logFile.Close()
	// Not CommandContext: the server outlives the start-up context; Stop ends it.
	s.cmd = exec.Command("postgres", args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// SIGQUIT on parent death: postgres's immediate shutdown, children included.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fail(fmt.Errorf("pgtemp: start postgres: %w", err))
	}
	go func() {
		_ = s.cmd.Wait() // The exit status of a server we stop ourselves carries no information.
		close(s.done)
	}()
	if err := s.waitReady(ctx, opts.StartTimeout); err != nil {
		s.kill()
		tail, _ := os.ReadFile(logPath)
		return fail(fmt.Errorf("pgtemp: postgres did not start: %w\n%s", err, lastLines(string(tail), 20)))
	}
	opts.Logger.Info("postgres started", "port", s.port, "dir", dir)
	return s, nil
}

// runAs returns the credential to run PostgreSQL with: the `postgres` user
// when this process is root, else nil (the current user).
func runAs() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, 0, 0, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("pgtemp: running as root needs a `postgres` OS user for PostgreSQL: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("pgtemp: uid of postgres: %w", err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("pgtemp: gid of postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtemp: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return errors.New("postgres exited")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, s.URL("postgres"))
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(cctx) //nolint:errcheck // a probe connection
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(20 * time.Millisecond) // polling interval between connection attempts
	}
	return fmt.Errorf("not accepting connections after %s: %w", timeout, last)
}

// URL returns the connection URL of a database on this server.
func (s *Server) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, database)
}

// PID returns the postmaster's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Dir returns the server's directory (data, socket and log).
func (s *Server) Dir() string { return s.dir }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// CreateDatabase creates a database, optionally from a template.
func (s *Server) CreateDatabase(ctx context.Context, name, template string) error {
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	return s.exec(ctx, sql)
}

// DropDatabase drops a database, disconnecting its clients.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	return s.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtemp: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing after the statement ran
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgtemp: %s: %w", sql, err)
	}
	return nil
}

// Stop shuts the server down (fast shutdown, then SIGKILL after 10 s) and
// removes its directory. It is safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.stopErr = fmt.Errorf("pgtemp: signal postgres: %w", err)
		}
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.log.Warn("postgres did not stop in time; killing it", "pid", s.cmd.Process.Pid)
			s.kill()
		}
		if err := os.RemoveAll(s.dir); err != nil {
			s.stopErr = errors.Join(s.stopErr, fmt.Errorf("pgtemp: remove %s: %w", s.dir, err))
		}
	})
	return s.stopErr
}

// kill ends the server's whole process group and waits for it.
func (s *Server) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) // It may already be gone.
	<-s.done
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
