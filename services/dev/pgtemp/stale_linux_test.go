package pgtemp_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev/pgtemp"
)

// TestStartRemovesLeftoverDirectories kills a process that started a server
// (kill -9 of `tether dev`: no Stop, its directory stays) and checks that the
// next Start in the same parent removes that directory, and leaves alone the
// directory of a server that is still running and one it cannot prove is
// abandoned (no owner lock: an older version's, or one being created).
func TestStartRemovesLeftoverDirectories(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers and kills one")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	parent := parentDir(t)
	live := start(t, ctx, pgtemp.Options{Dir: parent})
	unknown := filepath.Join(parent, "tether-pg-older")
	if err := os.Mkdir(unknown, 0o700); err != nil {
		t.Fatal(err)
	}
	pid, left := killedHelper(t, ctx, parent)
	// Its postmaster goes on SIGQUIT (parent-death signal); until it has,
	// the directory is its server's.
	waitGone(t, ctx, serverProcesses(t, pid))
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the killed process's directory is not there to clean: %v", err)
	}

	start(t, ctx, pgtemp.Options{Dir: parent})
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("leftover %s still there after a Start (stat: %v)", left, err)
	}
	for _, dir := range []string{live.Dir(), unknown} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was removed: %v", dir, err)
		}
	}
	conn := connect(t, ctx, live.URL("postgres"))
	if err := conn.Ping(ctx); err != nil {
		t.Errorf("the live server after another's start: %v", err)
	}
}

// killedHelper runs TestHelperProcess, which starts a server under parent,
// kills it with SIGKILL and returns its postmaster's pid and its directory.
func killedHelper(t *testing.T, ctx context.Context, parent string) (int, string) {
	t.Helper()
	pid, dir, kill := serverHelper(t, ctx, parent)
	kill()
	return pid, dir
}

// waitGone polls until none of procs runs.
func waitGone(t *testing.T, ctx context.Context, procs []int) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for alive := running(t, procs); len(alive) > 0; alive = running(t, procs) {
		select {
		case <-ctx.Done():
			t.Fatalf("postgres processes %v still running after their parent was killed", alive)
		case <-tick.C:
		}
	}
}
