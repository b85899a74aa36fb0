package procstat

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/wait"
)

// A stat line whose command name holds spaces and parentheses still reads
// right, and one this reader does not understand is refused.
func TestParseStat(t *testing.T) {
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 1 0 5 0 0"
	p, ok := parseStat(line)
	if !ok {
		t.Fatalf("%q not read", line)
	}
	if want := (Process{PPID: 17, Comm: "a (b) c", CPU: 2800 * time.Millisecond}); p != want {
		t.Fatalf("read %+v, want %+v", p, want)
	}
	for _, bad := range []string{"", "4242 comm S 17", "4242 (x) S 17 1 1 0 -1 0 0 0 0 0 nan 30 0"} {
		if p, ok := parseStat(bad); ok {
			t.Errorf("%q read as %+v", bad, p)
		}
	}
}

// A child this process starts is among its descendants, with its name and
// the CPU it used, in ticks and exactly; this process itself is not.
func TestDescendantsFindsAChildAndItsCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	// A shell busy for a while, then waiting on its stdin: it is alive and
	// has used CPU when read.
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; read x`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	child := cmd.Process.Pid
	wait.Until(t, 30*time.Second, "the child read with its CPU", func() error {
		procs := Processes()
		kids := Descendants(procs, os.Getpid())
		if procs[os.Getpid()].Comm == "" {
			return fmt.Errorf("this process read as %+v", procs[os.Getpid()])
		}
		if slices.Contains(kids, os.Getpid()) {
			return fmt.Errorf("this process is among its own descendants %v", kids)
		}
		if !slices.Contains(kids, child) {
			return fmt.Errorf("child %d not among the descendants %v", child, kids)
		}
		if c := procs[child]; c.Comm != "sh" || c.CPU <= 0 {
			return fmt.Errorf("child read as %+v", c)
		}
		if tids, err := Threads(child); err != nil || !slices.Contains(tids, child) {
			return fmt.Errorf("the child's threads %v (%v) miss its main thread %d", tids, err, child)
		}
		exact, err := ExactCPU(child)
		if err != nil {
			return err
		}
		// The ticks are the exact time rounded down, taken a moment before.
		if exact < procs[child].CPU {
			return fmt.Errorf("child's exact CPU %s under its ticks' %s", exact, procs[child].CPU)
		}
		return nil
	})
}
