package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// Closing the terminal tether dev runs in (SIGHUP) stops it like Ctrl-C
// does: its temporary PostgreSQL is stopped and its directories removed.
// SIGHUP's default action ended the process at once and left them behind.
func TestDevCleansUpOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs tether dev")
	}
	bin := buildTether(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Its own temporary directory, where pgtemp puts the server's: one the
	// postgres user may enter.
	tmp, err := os.MkdirTemp("", "tether-hup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	out := &syncbuf.Buffer{}
	cmd := exec.CommandContext(ctx, bin, "dev", "--data-dir", filepath.Join(tmp, "data"), "--hosts", "1",
		"--nats-port", "-1", "--rest-port", "-1", "--grpc-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 90*time.Second, "tether dev's banner", func() bool { return strings.Contains(out.String(), "Press Ctrl-C to stop.") })
	pgDirs := func() []string {
		entries, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		var dirs []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "tether-pg") {
				dirs = append(dirs, e.Name())
			}
		}
		return dirs
	}
	if len(pgDirs()) == 0 {
		t.Fatalf("no PostgreSQL directory in %s while tether dev runs: the test would check nothing\n%s", tmp, out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tether dev after SIGHUP: %v (a clean stop exits 0)\n%s", err, out.String())
	}
	if left := pgDirs(); len(left) > 0 {
		t.Fatalf("tether dev left %v in %s after SIGHUP", left, tmp)
	}
}
