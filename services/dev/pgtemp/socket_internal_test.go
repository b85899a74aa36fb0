package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSocket connects over the unix socket, with the socket in the server
// directory when its path is short enough and in a directory of its own
// when Options.Dir is too deep for one.
func TestSocket(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		depth      int // path components of 20 characters under the parent
		ownSockDir bool
	}{
		{name: "short dir", depth: 0},
		{name: "deep dir", depth: 5, ownSockDir: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			parent, err := os.MkdirTemp("", "pgtemp-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := os.RemoveAll(parent); err != nil {
					t.Error(err)
				}
			})
			if err := os.Chmod(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			dir := parent
			for range tt.depth {
				dir = filepath.Join(dir, strings.Repeat("d", 20))
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			s, err := Start(ctx, Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := s.Stop(); err != nil {
					t.Error(err)
				}
			})
			if own := !strings.HasPrefix(s.sockDir, s.dir+string(os.PathSeparator)); own != tt.ownSockDir {
				t.Errorf("socket dir %s for server dir %s: own directory = %t, want %t", s.sockDir, s.dir, own, tt.ownSockDir)
			}
			conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@:%d/postgres?host=%s", s.Port(), url.QueryEscape(s.sockDir)))
			if err != nil {
				t.Fatalf("connect over the unix socket: %v", err)
			}
			if err := conn.Ping(ctx); err != nil {
				t.Error(err)
			}
			if err := conn.Close(ctx); err != nil {
				t.Error(err)
			}
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{s.dir, s.sockDir} {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s not removed by Stop: %v", d, err)
				}
			}
		})
	}
}
