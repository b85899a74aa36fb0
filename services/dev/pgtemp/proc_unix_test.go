//go:build unix && !linux

package pgtemp_test

import (
	"errors"
	"syscall"
	"testing"
)

// serverProcesses returns the postmaster pid; finding its children needs
// /proc.
func serverProcesses(t *testing.T, pid int) []int { return []int{pid} }

// running returns the processes of pids that exist.
func running(t *testing.T, pids []int) []int {
	t.Helper()
	var alive []int
	for _, pid := range pids {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil && !errors.Is(err, syscall.EPERM) {
			t.Fatal(err)
		}
		alive = append(alive, pid)
	}
	return alive
}
