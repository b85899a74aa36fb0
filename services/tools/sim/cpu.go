package sim

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/platform/procstat"
)

// The simulator's own profiler labels (dev.ComponentLabel), beside the
// control plane's components that `tether dev` labels.
const (
	componentSimulatedProcesses = "simulated processes" // the hosts' wheels: heartbeats, Ready
	componentSimulator          = "simulator"           // matchmaker, players, faults, measurements
)

// cpuNames turns a goroutine's component label into the report's name.
var cpuNames = map[string]string{
	dev.ComponentNATS:           "NATS server",
	dev.ComponentProjector:      "projector",
	dev.ComponentAPI:            "API server",
	dev.ComponentController:     "controller",
	dev.ComponentAgent:          "simulated hosts: agents",
	componentSimulatedProcesses: "simulated hosts: processes",
	componentSimulator:          "simulator: matchmaker, players, faults, measurements",
}

// The report's names for samples without a component label, by what is on
// their stack.
const (
	cpuGC         = "garbage collection (background)"
	cpuNATSServer = "NATS server"
	cpuNATSClient = "NATS client (shared connections)"
	cpuOther      = "other (runtime, pgx, unlabelled)"
	cpuPostgres   = "PostgreSQL (its processes)"
	cpuApart      = "control plane process (NATS, projector, API, controller)"
)

// CPUShare is one component's CPU over the steady phase.
type CPUShare struct {
	Component string  `json:"component"`
	Cores     float64 `json:"cores"` // CPU seconds per second of the phase
	Share     float64 `json:"share"` // of the tether process's and PostgreSQL's together
	// ControlPlane is true for what runs on Tether's own machines in
	// production (not the simulated hosts, not the simulator).
	ControlPlane bool `json:"control_plane"`
}

// CPUReport is where the steady phase's CPU went: a CPU profile of this
// process, its samples told apart by their goroutines' component labels
// (dev.ComponentLabel, inherited by the goroutines a component starts),
// plus PostgreSQL's processes and the machine as a whole from /proc.
type CPUReport struct {
	Seconds float64 `json:"seconds"` // the phase's wall time
	// MachineBusy is the share of the machine's CPU time (all cores, all
	// processes) that was not idle.
	MachineBusy float64 `json:"machine_busy"`
	Cores       int     `json:"cores"`
	// ProcessCores and ProfiledCores are this process's CPU per second, as
	// the kernel counted it and as the profile sampled it.
	ProcessCores  float64    `json:"process_cores"`
	ProfiledCores float64    `json:"profiled_cores"`
	Components    []CPUShare `json:"components"`
	// Runtime is the Go runtime's account of this process over the phase:
	// scheduling delays and garbage collection.
	Runtime RuntimeReport `json:"runtime"`
}

// cpuMeter measures a phase's CPU; start it, then stop it.
type cpuMeter struct {
	profile  bytes.Buffer
	began    time.Time
	self     time.Duration
	apart    int                   // the control plane's process when it runs apart (RoleHosts); 0 if none
	apartCPU time.Duration         // its CPU so far
	postgres map[int]time.Duration // CPU so far of each PostgreSQL process
	machine  procstat.Machine
	runtime  runtimeSample
	err      error // why the profile could not be taken
}

// startCPU begins measuring: this process and its PostgreSQL, or with
// apart (a process id) that process and its PostgreSQL too. Only one CPU
// profile can run in a process: if another is running (go test
// -cpuprofile), the report has no components.
func startCPU(apart int) *cpuMeter {
	m := &cpuMeter{began: time.Now(), apart: apart, postgres: map[int]time.Duration{}}
	procs := procstat.Processes()
	m.self = procs[os.Getpid()].CPU
	m.apartCPU = procs[apart].CPU
	for _, pid := range m.postgresOf(procs) {
		m.postgres[pid] = procs[pid].CPU
	}
	m.machine, _ = procstat.Read() // an unreadable /proc/stat reads as zero busy
	m.runtime = readRuntime()
	if err := pprof.StartCPUProfile(&m.profile); err != nil {
		m.err = err
	}
	return m
}

// stop ends the measurement and reports; the raw profile is copied to raw
// when it is not nil (`tether sim --cpuprofile`).
func (m *cpuMeter) stop(raw io.Writer) (*CPUReport, error) {
	if m.err == nil {
		pprof.StopCPUProfile()
	}
	wall := time.Since(m.began)
	procs := procstat.Processes()
	machine, _ := procstat.Read()
	rep := &CPUReport{Seconds: wall.Seconds(), Cores: machine.Cores, MachineBusy: machine.BusyShareSince(m.machine)}
	rep.Runtime = readRuntime().since(m.runtime, wall)
	rep.ProcessCores = (procs[os.Getpid()].CPU - m.self).Seconds() / wall.Seconds()
	var pg time.Duration
	for _, pid := range m.postgresOf(procs) {
		pg += procs[pid].CPU - m.postgres[pid] // a new process started from zero
	}
	var apart time.Duration
	if m.apart > 0 {
		apart = procs[m.apart].CPU - m.apartCPU
	}
	if m.err != nil {
		return rep, fmt.Errorf("sim: no CPU profile of the steady phase: %w", m.err)
	}
	if raw != nil {
		if _, err := raw.Write(m.profile.Bytes()); err != nil {
			return rep, fmt.Errorf("sim: write the CPU profile: %w", err)
		}
	}
	p, err := profile.Parse(bytes.NewReader(m.profile.Bytes()))
	if err != nil {
		return rep, fmt.Errorf("sim: read the CPU profile: %w", err)
	}
	byName, total := cpuByComponent(p)
	rep.ProfiledCores = total.Seconds() / wall.Seconds()
	byName[cpuPostgres] = pg
	total += pg
	if m.apart > 0 {
		byName[cpuApart] = apart
		total += apart
	}
	for name, d := range byName {
		rep.Components = append(rep.Components, CPUShare{
			Component: name, Cores: d.Seconds() / wall.Seconds(), Share: d.Seconds() / max(total.Seconds(), 1e-9),
			ControlPlane: controlPlane(name),
		})
	}
	slices.SortFunc(rep.Components, func(a, b CPUShare) int {
		if a.Cores != b.Cores {
			if a.Cores > b.Cores {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Component, b.Component)
	})
	return rep, nil
}

// postgresOf picks the run's PostgreSQL processes: this process's, and the
// control plane's when it runs apart.
func (m *cpuMeter) postgresOf(procs map[int]procstat.Process) []int {
	out := postgresProcesses(procs, os.Getpid())
	if m.apart > 0 {
		out = append(out, postgresProcesses(procs, m.apart)...)
	}
	return out
}

// controlPlane tells Tether's own components from the simulated fleet, the
// simulator and the shared runtime.
func controlPlane(name string) bool {
	switch name {
	case cpuNames[dev.ComponentNATS], cpuNames[dev.ComponentProjector], cpuNames[dev.ComponentAPI],
		cpuNames[dev.ComponentController], cpuPostgres, cpuApart:
		return true
	}
	return false
}

// cpuByComponent sums a CPU profile's samples by component: the
// goroutine's label when it has one, else what its stack shows.
func cpuByComponent(p *profile.Profile) (map[string]time.Duration, time.Duration) {
	cpuIndex := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			cpuIndex = i
		}
	}
	out := map[string]time.Duration{}
	var total time.Duration
	if cpuIndex < 0 {
		return out, 0
	}
	for _, s := range p.Sample {
		d := time.Duration(s.Value[cpuIndex]) // nanoseconds
		out[sampleComponent(s)] += d
		total += d
	}
	return out, total
}

// sampleComponent names the component a sample's CPU went to.
func sampleComponent(s *profile.Sample) string {
	if l := s.Label[dev.ComponentLabel]; len(l) > 0 {
		if name, ok := cpuNames[l[0]]; ok {
			return name
		}
		return l[0]
	}
	// nats-server labels its stream and consumer goroutines itself (in
	// place of the labels they would inherit).
	for _, k := range []string{"account", "stream", "consumer"} {
		if len(s.Label[k]) > 0 {
			return cpuNATSServer
		}
	}
	var natsServer, natsClient bool
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			fn := line.Function.Name
			switch {
			case strings.HasPrefix(fn, "runtime.gcBgMarkWorker"), strings.HasPrefix(fn, "runtime.bgsweep"),
				strings.HasPrefix(fn, "runtime.bgscavenge"):
				return cpuGC
			case strings.Contains(fn, "nats-server/v2/"):
				natsServer = true
			case strings.Contains(fn, "nats-io/nats.go"):
				natsClient = true
			}
		}
	}
	switch {
	case natsServer:
		return cpuNATSServer
	case natsClient:
		return cpuNATSClient
	}
	return cpuOther
}

// print adds the CPU table to the report.
func (c *CPUReport) print(tw io.Writer, row func(k, v string, args ...any), missing string) {
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "CPU (steady phase; cores = CPU seconds per second)\t")
	row("machine", "%.0f%% busy of %d cores (every process on it)", 100*c.MachineBusy, c.Cores)
	row("tether process", "%.2f cores (%.2f sampled by the profile)", c.ProcessCores, c.ProfiledCores)
	c.Runtime.print(row)
	if missing != "" {
		row("by component", "none: %s", missing)
		return
	}
	var plane float64
	for _, s := range c.Components {
		mark := ""
		if s.ControlPlane {
			mark = " (control plane)"
			plane += s.Cores
		}
		row("  "+s.Component, "%.2f cores, %4.1f%%%s", s.Cores, 100*s.Share, mark)
	}
	row("control plane in all", "%.2f cores", plane)
}
