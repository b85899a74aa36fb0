package pgtemp_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev/pgtemp"
)

// helperEnv makes the test binary act as a process that starts a server,
// prints its pid and directory (a line each) and blocks until killed.
const helperEnv = "PGTEMP_TEST_HELPER_DIR"

func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("helper process for TestServerDiesWithParent")
	}
	s, err := pgtemp.Start(context.Background(), pgtemp.Options{Dir: dir})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("PID", s.PID())
	fmt.Println("DIR", s.Dir())
	// Block until the parent kills this process; Stop is deliberately never called.
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		fmt.Println("ERROR", err)
	}
	os.Exit(2)
}

// TestServerDiesWithParent kills a process that started a server without
// calling Stop, as a crashing `tether dev` or a test binary hitting its
// timeout would, and checks the server goes away with it.
func TestServerDiesWithParent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	parent := parentDir(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+parent)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v; stderr: %s", err, stderr.String())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "PID ")))
	if err != nil {
		t.Fatalf("helper said %q: %v; stderr: %s", line, err, stderr.String())
	}
	procs := serverProcesses(t, pid)
	if len(procs) < 2 {
		t.Fatalf("postgres %d: found processes %v, want the postmaster and its backends", pid, procs)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("helper exited cleanly; it was meant to be killed")
	}
	// The server was told (SIGQUIT) and shuts down with its backends.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		alive := running(t, procs)
		if len(alive) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("postgres processes %v still running after their parent was killed", alive)
		case <-tick.C:
		}
	}
}
