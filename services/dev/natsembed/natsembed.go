// Package natsembed runs a JetStream-enabled nats-server inside the process,
// for `tether dev` and for tests (DESIGN.md §10).
package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure an embedded server.
type Options struct {
	// Host to bind; default 127.0.0.1.
	Host string
	// Port to bind; 0 picks a free port.
	Port int
	// StoreDir keeps JetStream state; empty uses a temporary directory that
	// Shutdown removes.
	StoreDir string
	// Logger receives the server's log; nil silences it.
	Logger *slog.Logger
	// ReadyTimeout bounds start-up; default 10s.
	ReadyTimeout time.Duration
}

// Server is a running embedded nats-server.
type Server struct {
	srv     *server.Server
	tempDir string
}

// Start starts a server and waits until it accepts clients.
func Start(opts Options) (*Server, error) {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 10 * time.Second
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s := &Server{}
	if opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "tether-nats-")
		if err != nil {
			return nil, fmt.Errorf("natsembed: temp store dir: %w", err)
		}
		opts.StoreDir, s.tempDir = dir, dir
	}
	srv, err := server.NewServer(&server.Options{
		Host:      opts.Host,
		Port:      port,
		JetStream: true,
		StoreDir:  opts.StoreDir,
		NoSigs:    true,
		// Application-level keepalive towards clients (DESIGN.md §1 failure 2).
		PingInterval: 20 * time.Second,
		MaxPingsOut:  3,
	})
	if err != nil {
		s.removeTemp()
		return nil, fmt.Errorf("natsembed: configure: %w", err)
	}
	if opts.Logger != nil {
		srv.SetLoggerV2(&logger{log: opts.Logger}, false, false, false)
	}
	srv.Start()
	if !srv.ReadyForConnections(opts.ReadyTimeout) {
		srv.Shutdown()
		s.removeTemp()
		return nil, errors.New("natsembed: server not ready for connections within " + opts.ReadyTimeout.String())
	}
	s.srv = srv
	return s, nil
}

// ClientURL returns the URL clients connect to.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Shutdown stops the server, waits for it, and removes a temporary store.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.removeTemp()
}

func (s *Server) removeTemp() {
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir) // Best effort: a leftover temp dir harms nothing.
	}
}

// logger adapts slog to the nats-server's logger.
type logger struct{ log *slog.Logger }

func (l *logger) Noticef(format string, v ...any) { l.log.Debug("nats: " + fmt.Sprintf(format, v...)) }
func (l *logger) Warnf(format string, v ...any)   { l.log.Warn("nats: " + fmt.Sprintf(format, v...)) }
func (l *logger) Fatalf(format string, v ...any)  { l.log.Error("nats: " + fmt.Sprintf(format, v...)) }
func (l *logger) Errorf(format string, v ...any)  { l.log.Error("nats: " + fmt.Sprintf(format, v...)) }
func (l *logger) Debugf(format string, v ...any)  { l.log.Debug("nats: " + fmt.Sprintf(format, v...)) }
func (l *logger) Tracef(format string, v ...any)  { l.log.Debug("nats: " + fmt.Sprintf(format, v...)) }
