// Package profiling serves Go's runtime profiles (net/http/pprof) on an
// address of its own, for tracing a regression in a running service. It is
// off unless asked for (`tether --pprof-addr 127.0.0.1:6060 …`): profiles
// expose internals and cost CPU while taken, so bind it to loopback or a
// private network. The command line is not served (/debug/pprof/cmdline):
// secrets given as flags would show there.
package profiling

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Listen binds addr and returns a server for Serve, so that a bad address
// fails at start-up rather than later.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("profiling: listen on %s: %w", addr, err)
	}
	return l, nil
}

// Serve answers /debug/pprof/… on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("profiling server shutdown", "err", err)
		}
	}()
	log.Info("profiling endpoints serving", "addr", l.Addr().String(), "path", "/debug/pprof/")
	err := srv.Serve(l)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("profiling: %w", err)
}
