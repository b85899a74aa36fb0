package procstat

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = time.Second / ticksPerSecond

// Process is what this package reads of a process's /proc/<pid>/stat.
type Process struct {
	PPID int
	Comm string        // the command's name, at most 15 bytes
	CPU  time.Duration // user and system time so far, every thread's
}

// Processes reads every process's stat line, by process id; a process that
// ends while it reads is left out.
func Processes() map[int]Process {
	out := map[int]Process{}
	dirs, _ := filepath.Glob("/proc/[0-9]*") // a failed glob reads as no processes
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // the process ended meanwhile
		}
		if p, ok := parseStat(string(stat)); ok {
			out[pid] = p
		}
	}
	return out
}

// parseStat reads "pid (comm) state ppid … utime stime …" (utime and stime
// are fields 14 and 15); comm may hold spaces and parentheses, so the
// fields are split after the last ')'.
func parseStat(s string) (Process, bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return Process{}, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 13 {
		return Process{}, false
	}
	ppid, err1 := strconv.Atoi(fields[1])
	utime, err2 := strconv.ParseInt(fields[11], 10, 64)
	stime, err3 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Process{}, false // not a stat line this reader understands
	}
	return Process{PPID: ppid, Comm: s[open+1 : end], CPU: time.Duration(utime+stime) * clockTick}, true
}

// Descendants picks the processes of procs descended from process root,
// root itself left out.
func Descendants(procs map[int]Process, root int) []int {
	var out []int
	for pid := range procs {
		// Up the parents; 64 hops bound a loop a racing read could make.
		for p, hops := procs[pid].PPID, 0; p > 1 && hops < 64; p, hops = procs[p].PPID, hops+1 {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// Threads lists a process's live threads by id (/proc/<pid>/task).
func Threads(pid int) ([]int, error) {
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(tasks))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// ExactCPU is the CPU a process's live threads have run so far, to the
// nanosecond (the first field of each /proc/<pid>/task/<tid>/schedstat),
// where Processes counts in clock ticks: a game server that runs a
// millisecond at a time reads as zero ticks there. Threads that have
// ended are not counted.
func ExactCPU(pid int) (time.Duration, error) {
	tids, err := Threads(pid)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	read := 0
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
		if err != nil {
			continue // the thread ended meanwhile
		}
		read++
		first, _, _ := strings.Cut(string(b), " ")
		ns, err := strconv.ParseInt(first, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstat: thread %d of %d: schedstat %q", tid, pid, b)
		}
		total += time.Duration(ns)
	}
	if read == 0 {
		return 0, fmt.Errorf("procstat: no thread of process %d could be read (ended, or no schedstat on this kernel)", pid)
	}
	return total, nil
}
