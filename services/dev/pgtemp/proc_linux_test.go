package pgtemp_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// serverProcesses returns the postmaster pid and its children's.
func serverProcesses(t *testing.T, pid int) []int {
	t.Helper()
	procs := []int{pid}
	for p, stat := range procStats(t) {
		if stat.ppid == pid {
			procs = append(procs, p)
		}
	}
	return procs
}

// running returns the processes of pids that are running. Zombies do not
// count: whether an orphan's zombie is reaped depends on the machine's init.
func running(t *testing.T, pids []int) []int {
	t.Helper()
	stats := procStats(t)
	var alive []int
	for _, pid := range pids {
		if st, ok := stats[pid]; ok && st.state != "Z" {
			alive = append(alive, pid)
		}
	}
	return alive
}

type procStat struct {
	state string
	ppid  int
}

func procStats(t *testing.T) map[int]procStat {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	stats := make(map[int]procStat, len(paths))
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ppid ...; comm may contain anything, up to the last ')'.
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) < 2 {
			t.Fatalf("%s: unexpected format %q", path, b)
		}
		ppid, err := strconv.Atoi(fields[1])
		if err != nil {
			t.Fatalf("%s: ppid: %v", path, err)
		}
		stats[pid] = procStat{state: fields[0], ppid: ppid}
	}
	return stats
}
