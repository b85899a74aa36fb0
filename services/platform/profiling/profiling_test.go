package profiling

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServeProfilesUntilCancelled(t *testing.T) {
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, slog.New(slog.DiscardHandler)) }()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1"} {
		resp, err := http.Get("http://" + l.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
		if path == "/debug/pprof/goroutine?debug=1" && !strings.Contains(string(body), "goroutine profile") {
			t.Fatalf("goroutine profile: %q", body[:min(len(body), 200)])
		}
	}
	// The command line holds secrets given as flags (player-token keys):
	// it is not served.
	resp, err := http.Get("http://" + l.Addr().String() + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/debug/pprof/cmdline: %d, want 404", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not stop")
	}
	if _, err := Listen(l.Addr().String() + "x"); err == nil {
		t.Fatal("a bad address was accepted")
	}
}
