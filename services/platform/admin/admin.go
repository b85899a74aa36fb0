// Package admin serves a component's operational endpoints on an address of
// its own, apart from any API it serves: /healthz (the process is up),
// /readyz (it can do its job now: 503 with the reason when not) and
// /metrics (Prometheus text). Orchestrators probe the first two; scrapers
// read the third.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Options configure the endpoints.
type Options struct {
	// Ready reports why the component cannot do its job now, or nil; nil
	// Ready means always ready.
	Ready func() error
	// Status, when set, says in a line what the component is doing (e.g.
	// "standby: the controller lease is held by ctl-2"); /readyz shows it.
	Status func() string
	// Metrics serves /metrics; nil serves 404 there.
	Metrics http.Handler
	// Logger; default discards.
	Logger *slog.Logger
}

// Handler returns the endpoints as one handler.
func Handler(opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if opts.Ready != nil {
			if err := opts.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		if opts.Status != nil {
			fmt.Fprintln(w, "ready:", opts.Status())
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	return mux
}

// Serve listens on addr and serves the endpoints until ctx ends.
func Serve(ctx context.Context, addr string, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: Handler(opts), ReadHeaderTimeout: 5 * time.Second}
	opts.Logger.Info("admin endpoints listening", "addr", l.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("admin: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}
