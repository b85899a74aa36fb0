// Package procstat reads how busy the whole machine has been from Linux's
// /proc/stat: the simulator's CPU report and the allocation benchmark's
// CPU per allocation both take it before and after what they measure.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ticksPerSecond is USER_HZ, the unit of /proc/stat on Linux.
const ticksPerSecond = 100

// Machine is the first line of /proc/stat, every core's time summed, in
// clock ticks, and the number of cores.
type Machine struct {
	Busy, Total int64 // Busy: all but idle and iowait
	Cores       int
}

// Read reads /proc/stat.
func Read() (Machine, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, err
	}
	var m Machine
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) > 0 && fields[0] == "cpu":
			// user nice system idle iowait irq softirq steal (guest time is
			// counted in user already).
			for i, f := range fields[1:min(len(fields), 9)] {
				v, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					return Machine{}, fmt.Errorf("procstat: /proc/stat: %q", line)
				}
				m.Total += v
				if i != 3 && i != 4 { // not idle, not iowait
					m.Busy += v
				}
			}
		case len(fields) > 0 && strings.HasPrefix(fields[0], "cpu"):
			m.Cores++
		}
	}
	return m, nil
}

// BusyShareSince is the share of the machine's time since earlier that was
// busy.
func (m Machine) BusyShareSince(earlier Machine) float64 {
	if m.Total <= earlier.Total {
		return 0
	}
	return float64(m.Busy-earlier.Busy) / float64(m.Total-earlier.Total)
}

// BusySince is the CPU time every process on the machine used since
// earlier.
func (m Machine) BusySince(earlier Machine) time.Duration {
	return time.Duration(m.Busy-earlier.Busy) * time.Second / ticksPerSecond
}
