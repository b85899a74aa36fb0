package natsembed_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/dev/natsembed"
)

// useJetStream connects to s, makes sure stream T exists, publishes one
// message to it, and returns the stream's message count.
func useJetStream(t *testing.T, s *natsembed.Server) uint64 {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestStartTemporaryStore(t *testing.T) {
	s, err := natsembed.Start(natsembed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "127.0.0.1" || u.Port() == "4222" {
		t.Errorf("client URL %s, want 127.0.0.1 and a free port", s.ClientURL())
	}
	if n := useJetStream(t, s); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
	dir := s.StoreDir()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("temporary store: %v", err)
	}
	s.Shutdown()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temporary store %s still there after Shutdown (%v)", dir, err)
	}
	s.Shutdown() // a second call does nothing
}

func TestStartPersistentStore(t *testing.T) {
	dir := t.TempDir()
	for restart := range 2 {
		s, err := natsembed.Start(natsembed.Options{StoreDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		n := useJetStream(t, s)
		s.Shutdown()
		if want := uint64(restart + 1); n != want {
			t.Fatalf("start %d: %d messages, want %d", restart, n, want)
		}
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("caller's store dir removed: %v", err)
		}
	}
}

func TestStartFailures(t *testing.T) {
	busy, err := natsembed.Start(natsembed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Shutdown()
	u, _ := url.Parse(busy.ClientURL())
	busyPort, _ := strconv.Atoi(u.Port())

	tests := []struct {
		name string
		opts natsembed.Options
		want string
	}{
		{"port in use", natsembed.Options{Port: busyPort}, "failed to start"},
		{"port out of range", natsembed.Options{Port: 70000}, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			s, err := natsembed.Start(tc.opts)
			if err == nil {
				s.Shutdown()
				t.Fatal("Start succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %q, want it to mention %q", err, tc.want)
			}
			// It fails on the server's own report, not on the ready timeout.
			if took := time.Since(start); took >= natsembed.DefaultReadyTimeout {
				t.Fatalf("Start took %s to fail", took)
			}
		})
	}
}

// records collects log records.
type records struct {
	mu  sync.Mutex
	got []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rec.Clone())
	return nil
}

func TestLogger(t *testing.T) {
	rec := &records{}
	s, err := natsembed.Start(natsembed.Options{Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var ready, serverLines int
	for _, r := range rec.got {
		switch {
		case r.Message == "nats-server ready" && r.Level == slog.LevelInfo:
			ready++
		case r.Message == "nats-server":
			serverLines++
			if r.Level > slog.LevelDebug {
				// A clean start and stop has nothing above debug to say.
				var text string
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "text" {
						text = a.Value.String()
					}
					return true
				})
				t.Errorf("server logged at %s: %s", r.Level, text)
			}
		}
	}
	if ready != 1 || serverLines == 0 {
		t.Fatalf("%d ready lines and %d server lines, want 1 and some", ready, serverLines)
	}
}
