// Package natsembed runs a JetStream-enabled nats-server inside the process,
// for `tether dev` and for tests.
//
// The server listens on a real TCP port, so clients connect to it exactly as
// they connect to a standalone server: Start, then nats.Connect(s.ClientURL()).
package natsembed

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure an embedded server. The zero value is a server on a free
// loopback port with a temporary store.
type Options struct {
	// Host to bind; default 127.0.0.1.
	Host string
	// Port to bind; 0 picks a free port.
	Port int
	// StoreDir keeps JetStream state across restarts; empty uses a temporary
	// directory that Shutdown removes.
	StoreDir string
	// Logger receives the server's log (see Start for the levels); nil
	// silences it.
	Logger *slog.Logger
	// ReadyTimeout bounds start-up; default 10s.
	ReadyTimeout time.Duration
	// Cluster, when set, makes the server a node of a JetStream cluster
	// (tests of replicated streams and of a node's loss).
	Cluster *Cluster
	// AuthConfig, when set, is a nats-server configuration file whose
	// authentication the server takes: natsauth's server.conf (operator,
	// accounts, resolver). ReloadAuth reads it again.
	AuthConfig string
}

// Cluster joins an embedded server to a NATS cluster.
type Cluster struct {
	// Name of the cluster, the same on every node.
	Name string
	// ServerName is this node's, unique in the cluster.
	ServerName string
	// Port is this node's cluster (route) port on Host.
	Port int
	// Routes are the other nodes' route URLs, e.g. nats://127.0.0.1:6223.
	Routes []string
}

// DefaultReadyTimeout is the default of Options.ReadyTimeout.
const DefaultReadyTimeout = 10 * time.Second

func (o *Options) setDefaults() {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
}

// Validate reports a bad option.
func (o *Options) Validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("natsembed: port %d out of range (0 picks a free one)", o.Port)
	}
	return nil
}

// Server is a running embedded nats-server.
type Server struct {
	srv      *server.Server
	options  func() (*server.Options, error) // the server's options, AuthConfig read afresh
	storeDir string
	tempDir  string // removed on Shutdown; empty when the caller owns StoreDir
	log      *slog.Logger
	stop     sync.Once
}

// Start starts a server with JetStream and waits until it accepts clients
// (at most opts.ReadyTimeout), failing early if the server reports a fatal
// error such as a port in use.
//
// The server's log goes to opts.Logger: its errors and warnings at Error and
// Warn, its notices (start-up chatter) at Debug, its debug lines at
// Debug-4; protocol traces are never enabled. Start itself logs one Info
// line when the server is ready.
func Start(opts Options) (*Server, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{storeDir: opts.StoreDir, log: log}
	if s.storeDir == "" {
		dir, err := os.MkdirTemp("", "tether-nats-")
		if err != nil {
			return nil, fmt.Errorf("natsembed: temp store dir: %w", err)
		}
		s.storeDir, s.tempDir = dir, dir
	}
	s.options = func() (*server.Options, error) {
		sopts := &server.Options{}
		if opts.AuthConfig != "" {
			var err error
			if sopts, err = server.ProcessConfigFile(opts.AuthConfig); err != nil {
				return nil, fmt.Errorf("natsembed: auth config: %w", err)
			}
			sopts.ConfigFile = "" // its other settings are ours, below
		}
		sopts.Host, sopts.Port = opts.Host, port
		sopts.JetStream, sopts.StoreDir = true, s.storeDir
		sopts.NoSigs = true
		// Application-level keepalive towards clients, well below load
		// balancers' idle timeouts (docs/architecture.md, "The failures it
		// is built against", 2).
		sopts.PingInterval, sopts.MaxPingsOut = 20*time.Second, 3
		if c := opts.Cluster; c != nil {
			sopts.ServerName = c.ServerName
			sopts.Cluster = server.ClusterOpts{Name: c.Name, Host: opts.Host, Port: c.Port}
			sopts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
		}
		return sopts, nil
	}
	sopts, err := s.options()
	if err != nil {
		s.removeTemp()
		return nil, err
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		s.removeTemp()
		return nil, fmt.Errorf("natsembed: configure: %w", err)
	}
	// The adapter is installed even without a Logger: it remembers the
	// server's last fatal error, which Start reports.
	adapter := &logger{log: log}
	srv.SetLoggerV2(adapter, log.Enabled(context.Background(), levelNATSDebug), false, false)
	srv.Start()
	if err := waitReady(srv, adapter, opts.ReadyTimeout); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		s.removeTemp()
		return nil, err
	}
	s.srv = srv
	log.Info("nats-server ready", "url", srv.ClientURL(), "store_dir", s.storeDir, "version", server.VERSION)
	return s, nil
}

// readyPoll is how often Start checks for a fatal error while waiting.
const readyPoll = 20 * time.Millisecond

func waitReady(srv *server.Server, l *logger, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !srv.ReadyForConnections(min(readyPoll, max(time.Until(deadline), time.Millisecond))) {
		if msg := l.fatal(); msg != "" {
			return fmt.Errorf("natsembed: server failed to start: %s", msg)
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("natsembed: server not ready for connections within %s", timeout)
		}
	}
	if !srv.JetStreamEnabled() {
		msg := l.fatal()
		if msg == "" {
			msg = "no error reported"
		}
		return fmt.Errorf("natsembed: JetStream not enabled: %s", msg)
	}
	return nil
}

// ClientURL returns the URL clients connect to, e.g. nats://127.0.0.1:41234.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Name returns the server's name (its cluster node name, when clustered).
func (s *Server) Name() string { return s.srv.Name() }

// ReloadAuth reads Options.AuthConfig again and applies it to the running
// server, as nats-server does on SIGHUP: a revoked user's connections are
// closed, new users are accepted.
func (s *Server) ReloadAuth() error {
	sopts, err := s.options()
	if err != nil {
		return err
	}
	if addr, ok := s.srv.Addr().(*net.TCPAddr); ok {
		sopts.Port = addr.Port // a random port stays the one it became
	}
	if err := s.srv.ReloadOptions(sopts); err != nil {
		return fmt.Errorf("natsembed: reload: %w", err)
	}
	return nil
}

// PlacementPeers is how many of the cluster's servers a stream or bucket
// could be placed on now (online, JetStream on, their stats received), as
// the JetStream meta leader sees them; 0 when this server does not lead
// the meta group. An R3 stream created before it reaches 3 is refused
// with "no suitable peers for placement".
func (s *Server) PlacementPeers() int { return len(s.srv.JetStreamClusterPeers()) }

// StoreDir returns the JetStream store directory in use.
func (s *Server) StoreDir() string { return s.storeDir }

// Shutdown stops the server, waits until it has stopped, and removes the
// store if it was a temporary one. Calling it again does nothing.
func (s *Server) Shutdown() {
	s.stop.Do(func() {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.removeTemp()
		s.log.Debug("nats-server stopped")
	})
}

func (s *Server) removeTemp() {
	if s.tempDir == "" {
		return
	}
	if err := os.RemoveAll(s.tempDir); err != nil {
		s.log.Warn("remove temporary nats store", "dir", s.tempDir, "err", err)
	}
}

// Levels of the server's log lines in slog.
const (
	levelNATSNotice = slog.LevelDebug
	levelNATSDebug  = slog.LevelDebug - 4
	levelNATSTrace  = slog.LevelDebug - 8
)

// logger adapts slog to server.Logger. Messages are static ("nats-server");
// the server's formatted line is the "text" attribute.
type logger struct {
	log *slog.Logger

	mu        sync.Mutex
	lastFatal string
}

var _ server.Logger = (*logger)(nil)

func (l *logger) emit(level slog.Level, format string, v []any) string {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return ""
	}
	text := fmt.Sprintf(format, v...)
	l.log.Log(ctx, level, "nats-server", "text", text)
	return text
}

func (l *logger) Noticef(format string, v ...any) { l.emit(levelNATSNotice, format, v) }
func (l *logger) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *logger) Errorf(format string, v ...any)  { l.emit(slog.LevelError, format, v) }
func (l *logger) Debugf(format string, v ...any)  { l.emit(levelNATSDebug, format, v) }
func (l *logger) Tracef(format string, v ...any)  { l.emit(levelNATSTrace, format, v) }

// Fatalf records the error for Start; an embedded server must not exit the
// process, and nats-server stops what failed by itself.
func (l *logger) Fatalf(format string, v ...any) {
	text := fmt.Sprintf(format, v...)
	l.log.Error("nats-server fatal error", "text", text)
	l.mu.Lock()
	l.lastFatal = text
	l.mu.Unlock()
}

func (l *logger) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastFatal
}
