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
	"sync"
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

// serverHelper runs TestHelperProcess, which starts a server under parent,
// and returns its postmaster's pid, its directory, and kill, which SIGKILLs
// the helper (as kill -9 would a `tether dev`) and waits for its end. A
// helper not killed by the test is killed when the test ends.
func serverHelper(t *testing.T, ctx context.Context, parent string) (pid int, dir string, kill func()) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+parent)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe() // held open: the helper exits on its end
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			defer stdin.Close()
			if err := cmd.Process.Kill(); err != nil {
				t.Error(err)
			}
			if err := cmd.Wait(); err == nil {
				t.Error("helper exited cleanly; it was meant to be killed")
			}
		})
	}
	t.Cleanup(kill)
	r := bufio.NewReader(stdout)
	said := map[string]string{}
	for _, key := range []string{"PID", "DIR"} {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("helper: %v; stderr: %s", err, stderr.String())
		}
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		if k != key {
			t.Fatalf("helper said %q, want %s; stderr: %s", line, key, stderr.String())
		}
		said[k] = v
	}
	if pid, err = strconv.Atoi(said["PID"]); err != nil {
		t.Fatal(err)
	}
	return pid, said["DIR"], kill
}

// TestServerDiesWithParent kills a process that started a server without
// calling Stop, as a crashing `tether dev` or a test binary hitting its
// timeout would, and checks the server goes away with it.
func TestServerDiesWithParent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pid, _, kill := serverHelper(t, ctx, parentDir(t))
	procs := serverProcesses(t, pid)
	if len(procs) < 2 {
		t.Fatalf("postgres %d: found processes %v, want the postmaster and its backends", pid, procs)
	}
	kill()
	// The server was told (SIGQUIT) and shuts down with its backends.
	waitGone(t, ctx, procs)
}
