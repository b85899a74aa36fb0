//go:build unix

// Package pgtemp starts a throwaway PostgreSQL server from the binaries on
// PATH (initdb, postgres), for `tether dev` and integration tests.
//
// The server lives in a fresh temporary directory, listens on 127.0.0.1 and
// trusts every local connection, so it is only for data that may be lost.
// PostgreSQL refuses to run as root: when this process is root, initdb and
// postgres run as the `postgres` OS user instead. The server
// is tied to its parent: it gets SIGQUIT if the parent dies (Linux), and
// Stop ends it and removes its directories.
package pgtemp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// readyTimeout bounds the wait for a started postgres to accept
	// connections when ctx allows longer.
	readyTimeout = time.Minute
	// pollInterval separates readiness probes.
	pollInterval = 10 * time.Millisecond
	// probeTimeout bounds one readiness probe.
	probeTimeout = 2 * time.Second
	// stopTimeout is how long Stop waits for a fast shutdown before an
	// immediate one.
	stopTimeout = 10 * time.Second
	// quitTimeout is how long an immediate shutdown may take before the
	// postmaster gets SIGKILL. PostgreSQL itself SIGKILLs backends that
	// ignore SIGQUIT for 5 s.
	quitTimeout = 10 * time.Second
	// portAttempts is how many free ports Start tries when another process
	// takes the one it picked before postgres binds it.
	portAttempts = 3
	// maxConnections leaves room for a pool per test in a package.
	maxConnections = 200
	// maxSocketPath is the longest unix socket path PostgreSQL accepts on
	// every platform (sun_path is 104 bytes on BSDs and macOS, 108 on Linux).
	maxSocketPath = 103
	// logTailLines is how much of postgres's log a start error quotes.
	logTailLines = 30
	// logName is postgres's log file, inside the data directory.
	logName = "postgres.log"
)

// Options configure a throwaway server. The zero value is ready to use.
type Options struct {
	// Dir is the parent of the server's directory; default os.TempDir().
	// When running as root it must be traversable by the `postgres` user
	// (os.TempDir() is; a t.TempDir() is not).
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Durable keeps fsync, synchronous_commit and full_page_writes on. By
	// default they are off: much faster, and a crash loses only data that
	// was going to be thrown away anyway.
	Durable bool
	// ListenAddresses are addresses to listen on besides 127.0.0.1 (a
	// bridge address other network namespaces reach). Connections to them
	// are trusted without a password like local ones: a throwaway server
	// for tests only.
	ListenAddresses []string
	// Password makes every connection, local ones too, give the
	// superuser's password (scram-sha-256): a random one per server, in
	// URL's result. Without it the server trusts every local user as its
	// superuser, which tests may afford and `tether dev` may not.
	Password bool
	// Logger receives start and stop events; default discards.
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o *Options) validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("pgtemp: port %d out of range", o.Port)
	}
	return nil
}

// Server is a running throwaway PostgreSQL. Its methods are safe for
// concurrent use.
type Server struct {
	password string   // the superuser's, with Options.Password
	dir      string   // server directory: data/ (with postgres.log) and, if short enough, sock/
	sockDir  string   // unix socket directory
	remove   []string // directories Stop removes
	owner    *os.File // holds the owner lock of dir until Stop (see removeStale)
	port     int
	proc     *process
	log      *slog.Logger

	// What Restart needs to start postgres again as it was.
	postgresPath, data string
	durable            bool
	listen             []string
	cred               *syscall.Credential

	stopOnce sync.Once
	stopErr  error
}

// process is one postgres run.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the postmaster has exited and been reaped
	err  error         // exit error of the postmaster; read only after done
}

// Start runs initdb (trust authentication, superuser `postgres`, UTF8, C
// locale) into a fresh directory under opts.Dir and starts postgres on
// 127.0.0.1, returning once it accepts connections. ctx bounds the start
// only; the server runs until Stop. On error nothing is left behind.
//
// A process killed before Stop leaves its directory behind (tens of MB):
// Start first removes those under opts.Dir whose owning process is gone,
// never one that a live process owns.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	begin := time.Now()
	initdbPath, err := lookPath("initdb")
	if err != nil {
		return nil, err
	}
	postgresPath, err := lookPath("postgres")
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}

	removeStale(opts.Dir, opts.Logger)
	s := &Server{log: opts.Logger, postgresPath: postgresPath, durable: opts.Durable, listen: opts.ListenAddresses, cred: cred}
	if opts.Password {
		var b [24]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
		s.password = hex.EncodeToString(b[:])
	}
	if err := s.makeDirs(opts.Dir, cred); err != nil {
		return nil, errors.Join(err, s.removeDirs())
	}
	data := filepath.Join(s.dir, "data")
	s.data = data
	if err := s.initdb(ctx, initdbPath, data, cred); err != nil {
		return nil, errors.Join(err, s.removeDirs())
	}
	if len(opts.ListenAddresses) > 0 {
		if err := trustRemote(data); err != nil {
			return nil, errors.Join(err, s.removeDirs())
		}
	}
	logPath := filepath.Join(data, logName)
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("pgtemp: create log: %w", err), s.removeDirs())
	}
	// Only for handing to postgres, which gets its own descriptor; closing a
	// file this process never writes to cannot lose anything.
	defer func() { _ = logFile.Close() }()

	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, errors.Join(err, s.removeDirs())
			}
		}
		err := s.run(ctx, postgresPath, data, port, opts.Durable, cred, logFile)
		if err == nil {
			break
		}
		tail := logTail(logPath)
		portTaken := errors.Is(err, errNotOurs) || strings.Contains(tail, "Address already in use")
		if opts.Port == 0 && attempt < portAttempts && portTaken {
			s.log.Warn("postgres port taken before it could bind; retrying", "port", port, "attempt", attempt)
			continue
		}
		return nil, errors.Join(fmt.Errorf("pgtemp: start postgres: %w\npostgres log (%s):\n%s", err, logPath, tail), s.removeDirs())
	}
	s.log.Info("postgres started", "port", s.port, "dir", s.dir, "pid", s.proc.cmd.Process.Pid,
		"durable", opts.Durable, "duration", time.Since(begin))
	return s, nil
}

func lookPath(bin string) (string, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("pgtemp: %s not found on PATH: install the PostgreSQL server binaries "+
			"(Debian: apt-get install postgresql, then add /usr/lib/postgresql/<version>/bin to PATH): %w", bin, err)
	}
	return path, nil
}

// serverCredential returns the user to run PostgreSQL as: the `postgres` OS
// user when this process is root, nil (this process's user) otherwise.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: PostgreSQL refuses to run as root and there is no `postgres` OS user to run it as "+
			"(create one, or run as another user): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: uid of the postgres user: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: gid of the postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// makeDirs creates the server directory and the socket directory, owned by
// the server's user. The socket goes into the server directory when the
// path is short enough, else into a directory of its own under
// os.TempDir().
func (s *Server) makeDirs(parent string, cred *syscall.Credential) error {
	dir, err := os.MkdirTemp(parent, dirPrefix)
	if err != nil {
		return fmt.Errorf("pgtemp: create server directory: %w", err)
	}
	s.remove = append(s.remove, dir)
	if s.owner, err = ownDir(dir); err != nil {
		return err
	}
	// Absolute: postgres and initdb run in it, and the readiness probe
	// compares it with what the server reports.
	if s.dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("pgtemp: server directory: %w", err)
	}
	dir = s.dir
	if err := chown(dir, cred); err != nil {
		return err
	}
	sock := filepath.Join(dir, "sock")
	if socketFits(sock) {
		if err := os.Mkdir(sock, 0o700); err != nil {
			return fmt.Errorf("pgtemp: create socket directory: %w", err)
		}
	} else {
		if sock, err = os.MkdirTemp("", sockPrefix); err != nil {
			return fmt.Errorf("pgtemp: create socket directory: %w", err)
		}
		s.remove = append(s.remove, sock)
		if err := os.WriteFile(filepath.Join(dir, sockRecordName), []byte(sock+"\n"), 0o600); err != nil {
			return fmt.Errorf("pgtemp: record the socket directory: %w", err)
		}
		if !socketFits(sock) {
			return fmt.Errorf("pgtemp: socket directory %s is too long for a unix socket path: set TMPDIR to a shorter directory", sock)
		}
	}
	s.sockDir = sock
	return chown(sock, cred)
}

func socketFits(dir string) bool {
	return len(filepath.Join(dir, ".s.PGSQL.65535")) <= maxSocketPath
}

func chown(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("pgtemp: give %s to the postgres user: %w", path, err)
	}
	return nil
}

func (s *Server) initdb(ctx context.Context, path, data string, cred *syscall.Credential) error {
	args := []string{"--pgdata", data, "--username", "postgres",
		"--encoding", "UTF8", "--locale", "C", "--no-sync", "--no-instructions"}
	if s.password == "" {
		args = append(args, "--auth", "trust")
	}
	if s.password != "" {
		// initdb reads the password from a file its user can read; it
		// goes once initdb is done.
		pwfile := filepath.Join(s.dir, "pwfile")
		if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
			return fmt.Errorf("pgtemp: %w", err)
		}
		defer os.Remove(pwfile)
		if cred != nil {
			if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
				return fmt.Errorf("pgtemp: %w", err)
			}
		}
		args = append(args, "--auth", "scram-sha-256", "--pwfile", pwfile)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = s.dir // the server's user may not be able to enter the current directory
	cmd.SysProcAttr = sysProcAttr(cred, syscall.SIGKILL)
	// initdb runs postgres in single-user mode: kill the whole group.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = stopTimeout
	if out, err := cmd.CombinedOutput(); err != nil {
		if cred != nil && errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("pgtemp: initdb as the postgres user: %w (it must be able to enter %s and every directory above it: "+
				"choose another Options.Dir; t.TempDir() is private to root)", err, filepath.Dir(s.dir))
		}
		return fmt.Errorf("pgtemp: initdb: %w\n%s", err, out)
	}
	return nil
}

// run starts postgres on port and waits until it accepts connections. On
// error the process is gone.
func (s *Server) run(ctx context.Context, path, data string, port int, durable bool, cred *syscall.Credential, logFile *os.File) error {
	args := []string{
		"-D", data,
		"-p", strconv.Itoa(port),
		"-k", s.sockDir,
		"-c", "listen_addresses=" + strings.Join(append([]string{"127.0.0.1"}, s.listen...), ","),
		"-c", "max_connections=" + strconv.Itoa(maxConnections),
	}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	// Not CommandContext: the server outlives ctx; Stop ends it.
	cmd := exec.Command(path, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// SIGQUIT is postgres's immediate shutdown, which takes its backends down too.
	cmd.SysProcAttr = sysProcAttr(cred, syscall.SIGQUIT)
	p, err := startProcess(cmd)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, p, urlFor(port, "postgres", s.password), data); err != nil {
		return errors.Join(err, p.kill())
	}
	s.port, s.proc = port, p
	return nil
}

// startProcess starts cmd from a goroutine that stays locked to its OS
// thread until the process exits: the parent-death signal is sent when the
// thread that forked the child exits, not the process (golang/go#27505),
// and the Go runtime ends a thread when a goroutine locked to it returns.
func startProcess(cmd *exec.Cmd) (*process, error) {
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return p, nil
}

// errNotOurs says a readiness probe reached another server on our port: one
// that took the port between freePort and postgres binding it.
var errNotOurs = errors.New("another server answers on the port")

// waitReady polls until the postgres serving data answers on dbURL, the
// process exits, ctx ends or readyTimeout passes.
func waitReady(ctx context.Context, p *process, dbURL, data string) error {
	ctx, cancel := context.WithTimeoutCause(ctx, readyTimeout,
		fmt.Errorf("postgres not accepting connections after %s", readyTimeout))
	defer cancel()
	// A probe must not outlive the process: a connection to whatever else
	// holds the port could hang.
	ctx, exited := context.WithCancelCause(ctx)
	defer exited(nil)
	go func() {
		select {
		case <-p.done:
			exited(fmt.Errorf("postgres exited: %w", p.err))
		case <-ctx.Done():
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			return readyError(ctx, last)
		case <-timer.C:
		}
		err := probe(ctx, dbURL, data)
		if err == nil || errors.Is(err, errNotOurs) {
			return err
		}
		if ctx.Err() != nil {
			return readyError(ctx, err)
		}
		last = err
		timer.Reset(pollInterval)
	}
}

func readyError(ctx context.Context, last error) error {
	cause := context.Cause(ctx)
	if last == nil {
		return cause
	}
	return fmt.Errorf("%w; last connection attempt: %w", cause, last)
}

// probe connects to dbURL and checks the server is the one serving data.
func probe(ctx context.Context, dbURL, data string) (err error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := conn.Close(ctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close probe connection: %w", cerr))
		}
	}()
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return err
	}
	if !sameDir(dir, data) {
		return fmt.Errorf("%w (data directory %s)", errNotOurs, dir)
	}
	return nil
}

func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ai, aerr := os.Stat(a)
	bi, berr := os.Stat(b)
	return aerr == nil && berr == nil && os.SameFile(ai, bi)
}

// kill ends postgres without waiting for clients: SIGQUIT (immediate
// shutdown, in which the postmaster ends its backends and waits for them),
// then SIGKILL if the postmaster is still there after quitTimeout. The
// backends are not in the postmaster's process group (each calls setsid),
// but a killed postmaster's backends exit on their own when they notice it
// is gone.
func (p *process) kill() error {
	if err := p.signal(syscall.SIGQUIT); err != nil {
		return err
	}
	timer := time.NewTimer(quitTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return fmt.Errorf("pgtemp: postgres ignored SIGQUIT for %s and was killed; its backends may linger", quitTimeout)
}

// signal sends sig to the postmaster unless it has exited.
func (p *process) signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgtemp: send %s to postgres: %w", sig, err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtemp: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("pgtemp: find a free port: %w", err)
	}
	return port, nil
}

// logTail returns the end of the log at path, or why it cannot be read.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "(empty)"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

func urlFor(port int, database, password string) string {
	user := url.User("postgres")
	if password != "" {
		user = url.UserPassword("postgres", password)
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, port, url.PathEscape(database))
}

// URL returns the connection URL of a database on this server, e.g.
// postgres://postgres@127.0.0.1:5432/tether?sslmode=disable, with the
// superuser's password when Options.Password asked for one. The name is
// escaped as a URL path segment.
func (s *Server) URL(database string) string { return urlFor(s.port, database, s.password) }

// Port returns the TCP port the server listens on, on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// PID returns the process id of the postmaster.
func (s *Server) PID() int { return s.proc.cmd.Process.Pid }

// Dir returns the server's directory; postgres's log is data/postgres.log
// in it. Stop removes it.
func (s *Server) Dir() string { return s.dir }

// CreateDatabase creates database name, as a copy of template if template
// is not empty (no one may be connected to template meanwhile).
func (s *Server) CreateDatabase(ctx context.Context, name, template string) error {
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	return s.exec(ctx, sql)
}

// DropDatabase drops database name, terminating its connections first. A
// database that does not exist is not an error.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	return s.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// exec runs one statement in the `postgres` database.
func (s *Server) exec(ctx context.Context, sql string) (err error) {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtemp: connect: %w", err)
	}
	defer func() {
		if cerr := conn.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("pgtemp: close connection: %w", cerr))
		}
	}()
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgtemp: %s: %w", sql, err)
	}
	return nil
}

// Stop shuts the server down (fast shutdown: connections are terminated and
// transactions rolled back; if that takes more than 10 s, an immediate
// shutdown, then SIGKILL) and removes its directories. Its error includes
// an unexpected exit of the server. Calling it again returns the first
// call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	begin := time.Now()
	errs := s.halt()
	errs = append(errs, s.removeDirs())
	err := errors.Join(errs...)
	if err != nil {
		s.log.Error("postgres stopped with errors", "port", s.port, "err", err)
	} else {
		s.log.Info("postgres stopped", "port", s.port, "duration", time.Since(begin))
	}
	return err
}

// halt shuts postgres down fast (SIGINT), or immediately if it takes longer
// than stopTimeout, and waits until it has exited; it reports an exit that
// came before it was asked.
func (s *Server) halt() []error {
	p := s.proc
	var errs []error
	exited := false // before it was asked to
	if err := p.cmd.Process.Signal(syscall.SIGINT); errors.Is(err, os.ErrProcessDone) {
		exited = true
	} else if err != nil {
		errs = append(errs, fmt.Errorf("pgtemp: send SIGINT to postgres: %w", err))
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			when := "during shutdown"
			if exited {
				when = "before it was stopped"
			}
			errs = append(errs, fmt.Errorf("pgtemp: postgres exited %s: %w", when, p.err))
		}
	case <-timer.C:
		s.log.Warn("postgres did not shut down in time; shutting it down immediately",
			"pid", p.cmd.Process.Pid, "timeout", stopTimeout)
		if err := p.kill(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Restart shuts postgres down (as Stop does, keeping its data) and starts
// it again on the same port, as an operator's restart does: every client
// connection is dropped meanwhile. Not safe to call concurrently with Stop
// or another Restart.
func (s *Server) Restart(ctx context.Context) error {
	if errs := s.halt(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	logFile, err := os.OpenFile(filepath.Join(s.data, logName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgtemp: open log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // postgres has its own descriptor
	if err := s.run(ctx, s.postgresPath, s.data, s.port, s.durable, s.cred, logFile); err != nil {
		return fmt.Errorf("pgtemp: restart postgres: %w", err)
	}
	s.log.Info("postgres restarted", "port", s.port, "pid", s.proc.cmd.Process.Pid)
	return nil
}

// trustRemote lets clients on any address connect without a password.
func trustRemote(data string) error {
	f, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgtemp: pg_hba.conf: %w", err)
	}
	if _, err := f.WriteString("host all all 0.0.0.0/0 trust\n"); err != nil {
		return errors.Join(fmt.Errorf("pgtemp: pg_hba.conf: %w", err), f.Close())
	}
	return f.Close()
}

// removeDirs removes the server's directories, then lets go of their owner
// lock.
func (s *Server) removeDirs() error {
	var errs []error
	for _, dir := range s.remove {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("pgtemp: remove %s: %w", dir, err))
		}
	}
	if s.owner != nil {
		if err := s.owner.Close(); err != nil {
			errs = append(errs, fmt.Errorf("pgtemp: release owner lock: %w", err))
		}
		s.owner = nil
	}
	return errors.Join(errs...)
}
