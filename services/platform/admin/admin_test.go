package admin_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tetherhq/tether/services/platform/admin"
)

func TestEndpoints(t *testing.T) {
	var mu sync.Mutex
	var notReady error
	ready := func() error {
		mu.Lock()
		defer mu.Unlock()
		return notReady
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "tether_up 1\n") })
	srv := httptest.NewServer(admin.Handler(admin.Options{Ready: ready, Metrics: metrics}))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name     string
		path     string
		notReady error
		code     int
		body     string
	}{
		{"alive", "/healthz", nil, 200, "ok"},
		{"alive while not ready", "/healthz", errors.New("views stale"), 200, "ok"},
		{"ready", "/readyz", nil, 200, "ready"},
		{"not ready says why", "/readyz", errors.New("views stale: checkpoint 7"), 503, "not ready: views stale: checkpoint 7"},
		{"metrics", "/metrics", nil, 200, "tether_up 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			notReady = tt.notReady
			mu.Unlock()
			code, body := get(tt.path)
			if code != tt.code || !strings.Contains(body, tt.body) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tt.path, code, body, tt.code, tt.body)
			}
		})
	}
}
