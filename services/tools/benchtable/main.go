// Command benchtable runs Tether's benchmark suite and prints one table: each
// target of docs/benchmarks.md ("Targets"), the median of repeated runs,
// and whether it is met.
// It writes the runs and medians as JSON too, for comparing commits.
//
//	go run ./services/tools/benchtable [--json bench.json] [--runs 3] [--quick] [--skip chaos,sim] [--cpuprofile DIR]
//
// It runs `go test -bench` in this module (so it needs the source tree),
// `bin/tether chaos` and, once, the scale run `bin/tether sim` (make build
// first; `make bench` does both). --quick
// shrinks every benchmark for a smoke run; its figures are not comparable.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// bench is one benchmark run: a `go test -bench` invocation.
type bench struct {
	name  string   // Benchmark function name
	id    string   // what targets and --skip call it, when one benchmark runs with two settings; default name
	pkg   string   // package path
	env   []string // environment, KEY=VALUE
	time  string   // -benchtime
	quick []string // env for --quick
	exec  string   // go test -exec: what runs the test binary ("taskset -c 0"), if anything
}

// target is one row of the table: a metric of a benchmark against a bound.
type target struct {
	What   string  `json:"what"`
	Bench  string  `json:"bench"`
	Metric string  `json:"metric"`
	Bound  float64 `json:"bound"`
	AtMost bool    `json:"atMost"` // the value must be ≤ bound (else ≥)
	Unit   string  `json:"unit"`
	// Reported marks a figure with no target: printed, never judged.
	Reported bool `json:"reported,omitempty"`
}

// result is what a target measured.
type result struct {
	target
	Runs   []float64 `json:"runs"`
	Median float64   `json:"median"`
	Met    bool      `json:"met"`
	Note   string    `json:"note,omitempty"`
}

// key is what targets and --skip call b.
func (b bench) key() string {
	if b.id != "" {
		return b.id
	}
	return b.name
}

var benches = []bench{
	{name: "BenchmarkAllocate", pkg: "./services/apiserver/", env: []string{"TETHER_BENCH_ALLOCATIONS=10000"}, time: "1x",
		quick: []string{"TETHER_BENCH_ALLOCATIONS=500"}},
	// The same through real gRPC, each call a room of a server that hosts
	// four (a counter action decided with it; most into ALLOCATED servers).
	{name: "BenchmarkAllocate", id: "BenchmarkAllocate/rooms", pkg: "./services/apiserver/",
		env: []string{"TETHER_BENCH_ALLOCATIONS=10000", "TETHER_BENCH_ROOMS=4"}, time: "1x",
		quick: []string{"TETHER_BENCH_ALLOCATIONS=500", "TETHER_BENCH_ROOMS=4"}},
	{name: "BenchmarkReplay", pkg: "./projections/postgres/", time: "1x", quick: []string{"TETHER_BENCH_EVENTS=20000"}},
	{name: "BenchmarkLiveLag", pkg: "./projections/postgres/", time: "1x", quick: []string{"TETHER_BENCH_SECONDS=2"}},
	{name: "BenchmarkRebuild", pkg: "./projections/postgres/", env: []string{"TETHER_BENCH_EVENTS=1000000"}, time: "1x",
		quick: []string{"TETHER_BENCH_EVENTS=20000"}},
	{name: "BenchmarkReconnect", pkg: "./services/apiserver/", time: "3000x", quick: []string{}},
	{name: "BenchmarkExplain", pkg: "./services/apiserver/", time: "200x", quick: []string{"TETHER_BENCH_HISTORY=200"}},
	{name: "BenchmarkBufferRefill", pkg: "./services/dev/", time: "1x", quick: []string{"TETHER_BENCH_ROUNDS=2"}},
	{name: "BenchmarkCrashReplacement", pkg: "./services/dev/", time: "1x", quick: []string{"TETHER_BENCH_CRASHES=5"}},
	{name: "BenchmarkMatchmakerAllocate", id: "BenchmarkMatchmakerAllocate/1", pkg: "./services/dev/", env: []string{"TETHER_BENCH_REPLICAS=1"},
		time: "1x", quick: []string{"TETHER_BENCH_SERVERS=100", "TETHER_BENCH_HOSTS=2", "TETHER_BENCH_ROUNDS=2"}},
	{name: "BenchmarkMatchmakerAllocate", id: "BenchmarkMatchmakerAllocate/2", pkg: "./services/dev/", env: []string{"TETHER_BENCH_REPLICAS=2"},
		time: "1x", quick: []string{"TETHER_BENCH_SERVERS=100", "TETHER_BENCH_HOSTS=2", "TETHER_BENCH_ROUNDS=2"}},
	// What a health ping and a watch update cost the agent, by SDK (docs/agones.md).
	{name: "BenchmarkHealthPing/tether-grpc-stream", pkg: "./services/agent/", time: "20000x", quick: []string{}},
	{name: "BenchmarkHealthPing/agones-grpc-stream", pkg: "./services/agent/", time: "20000x", quick: []string{}},
	{name: "BenchmarkHealthPing/agones-rest", pkg: "./services/agent/", time: "20000x", quick: []string{}},
	{name: "BenchmarkHealthPing/agones-rest-dial", pkg: "./services/agent/", time: "5000x", quick: []string{}},
	{name: "BenchmarkWatchUpdate/tether-grpc", pkg: "./services/agent/", time: "100000x", quick: []string{}},
	{name: "BenchmarkWatchUpdate/agones-grpc", pkg: "./services/agent/", time: "100000x", quick: []string{}},
	{name: "BenchmarkWatchUpdate/agones-rest", pkg: "./services/agent/", time: "100000x", quick: []string{}},
	// The stack (and the PostgreSQL it starts) on core 0, the game servers
	// moved to core 1 once READY: what one core of the stack does when the
	// game servers do not share it.
	{name: "BenchmarkMatchmakerAllocate", id: "BenchmarkMatchmakerAllocate/apart", pkg: "./services/dev/",
		env: []string{"TETHER_BENCH_REPLICAS=1", "TETHER_BENCH_GAME_CPUS=1"}, exec: "taskset -c 0",
		time: "1x", quick: []string{"TETHER_BENCH_SERVERS=100", "TETHER_BENCH_HOSTS=2", "TETHER_BENCH_ROUNDS=2"}},
}

var targets = []target{
	{"allocations sustained (2 API replicas)", "BenchmarkAllocate", "allocs/s", 5000, false, "/s", false},
	{"allocation p99", "BenchmarkAllocate", "p99-ms", 20, true, "ms", false},
	{"allocations sustained, a room each with a counter action (2 API replicas, real gRPC, 4 rooms a server)", "BenchmarkAllocate/rooms", "allocs/s", 5000, false, "/s", false},
	{"allocation p99, a room each with a counter action", "BenchmarkAllocate/rooms", "p99-ms", 20, true, "ms", false},
	{"allocations through real gRPC, real game servers, 1 API replica", "BenchmarkMatchmakerAllocate/1", "allocs/s", 5000, false, "/s", false},
	{"allocation p99 through real gRPC, 1 API replica", "BenchmarkMatchmakerAllocate/1", "p99-ms", 20, true, "ms", false},
	{"allocations through real gRPC, real game servers, 2 API replicas", "BenchmarkMatchmakerAllocate/2", "allocs/s", 5000, false, "/s", false},
	{"allocation p99 through real gRPC, 2 API replicas", "BenchmarkMatchmakerAllocate/2", "p99-ms", 20, true, "ms", false},
	{"machine CPU per allocation, whole cycle to READY again (1 replica; all processes)", "BenchmarkMatchmakerAllocate/1", "machine-cpu-µs/alloc", 0, false, " µs", true},
	{"  the same less what the idle stack and fleet use meanwhile", "BenchmarkMatchmakerAllocate/1", "active-machine-cpu-µs/alloc", 0, false, " µs", true},
	{"    of which the stack's process (API, NATS, projector, controller, agents, load generator)", "BenchmarkMatchmakerAllocate/1", "active-cpu-µs/alloc", 0, false, " µs", true},
	{"    of which the game servers (example game server, Go SDK)", "BenchmarkMatchmakerAllocate/1", "active-game-cpu-µs/alloc", 0, false, " µs", true},
	{"    of which PostgreSQL", "BenchmarkMatchmakerAllocate/1", "active-postgres-cpu-µs/alloc", 0, false, " µs", true},
	{"allocations through real gRPC, 1 API replica, the stack and PostgreSQL on one core, the game servers on the other", "BenchmarkMatchmakerAllocate/apart", "allocs/s", 0, false, "/s", true},
	{"allocation p99 through real gRPC, the stack on one core, the game servers on the other", "BenchmarkMatchmakerAllocate/apart", "p99-ms", 0, true, "ms", true},
	{"agent CPU per health ping: Tether's heartbeat stream (gRPC)", "BenchmarkHealthPing/tether-grpc-stream", "agent-cpu-µs/ping", 0, true, " µs", true},
	{"agent CPU per health ping: Agones' Health stream (gRPC)", "BenchmarkHealthPing/agones-grpc-stream", "agent-cpu-µs/ping", 0, true, " µs", true},
	{"agent CPU per health ping: Agones' POST /health, one kept connection", "BenchmarkHealthPing/agones-rest", "agent-cpu-µs/ping", 0, true, " µs", true},
	{"agent CPU per health ping: Agones' POST /health, a new connection each", "BenchmarkHealthPing/agones-rest-dial", "agent-cpu-µs/ping", 0, true, " µs", true},
	{"watch update encoded: Tether's SDK (protobuf)", "BenchmarkWatchUpdate/tether-grpc", "ns/op", 0, true, " ns", true},
	{"watch update encoded: Agones' SDK over gRPC", "BenchmarkWatchUpdate/agones-grpc", "ns/op", 0, true, " ns", true},
	{"watch update encoded: Agones' SDK over REST or a WebSocket (JSON)", "BenchmarkWatchUpdate/agones-rest", "ns/op", 0, true, " ns", true},
	{"projection throughput (replay from sequence 1)", "BenchmarkReplay", "events/s", 20000, false, "/s", false},
	{"live projection p99 publish→view lag at 5,000/s", "BenchmarkLiveLag", "p99-ms", 20, true, "ms", false},
	{"rebuild rate (1,000,000 events)", "BenchmarkRebuild", "events/s", 100000, false, "/s", false},
	{"player reconnect p99", "BenchmarkReconnect", "p99-ms", 5, true, "ms", false},
	{"explain, 1,000-event history, p99", "BenchmarkExplain", "p99-ms", 100, true, "ms", false},
	{"buffer of 3, 5 allocations: 3 READY again after the first, p50 (real processes)", "BenchmarkBufferRefill", "episode-p50-ms", 2000, true, "ms", false},
	{"buffer of 3: 3 READY again after the fifth allocation, p50", "BenchmarkBufferRefill", "refill-p50-ms", 0, true, "ms", true},
	{"crash to replacement READY, p50 (example game server, real processes)", "BenchmarkCrashReplacement", "p50-ms", 2000, true, "ms", false},
	{"crash to replacement READY, p99", "BenchmarkCrashReplacement", "p99-ms", 2000, true, "ms", false},
	{"hung process detected p99 (chaos; contract 4 s at its settings)", "chaos", "hang-p99-s", 4, true, "s", false},
	{"crashed process seen p99 (chaos)", "chaos", "crash-p99-ms", 100, true, "ms", false},
	{"false terminations (chaos)", "chaos", "false-terminations", 0, true, "", false},
	{"missed detections (chaos)", "chaos", "missed-detections", 0, true, "", false},
	{"scale: 100,000 simulated game servers on 10,000 hosts, audit passed", "sim", "audit-ok", 1, false, "", false},
	{"scale: events lost (published by agents − applied)", "sim", "lost-events", 0, true, "", false},
	{"scale: false terminations", "sim", "false-terminations", 0, true, "", false},
	{"scale: missed detections", "sim", "missed-detections", 0, true, "", false},
	{"scale: publish→view lag p99 in the steady phase", "sim", "lag-p99-ms", 50, true, "ms", false},
	{"scale: allocation p99 under that load", "sim", "alloc-p99-ms", 20, true, "ms", false},
	{"scale: allocation p99 as the API server timed it (bucket bound)", "sim", "alloc-served-p99-ms", 20, true, "ms", false},
	{"scale: hung process detected, max (contract 16 s at its settings)", "sim", "hang-max-s", 16, true, "s", false},
	{"scale: steady-state events/s", "sim", "events/s", 0, false, "/s", true},
	{"scale: controller pass over every fleet, mean", "sim", "pass-mean-ms", 0, false, "ms", true},
	{"scale: all READY after", "sim", "ready-s", 0, false, "s", true},
	{"scale: peak RSS of the tether process (all but PostgreSQL)", "sim", "rss-mib", 0, false, " MiB", true},
	{"scale, control plane on a core of its own: audit passed", "sim-split", "audit-ok", 1, false, "", false},
	{"scale, control plane on a core of its own: false terminations", "sim-split", "false-terminations", 0, true, "", false},
	{"scale, control plane on a core of its own: publish→view lag p99", "sim-split", "lag-p99-ms", 50, true, "ms", false},
	{"scale, control plane on a core of its own: allocation p99", "sim-split", "alloc-p99-ms", 20, true, "ms", false},
	{"scale, control plane on a core of its own: allocation p99 as the API server timed it (bucket bound)", "sim-split", "alloc-served-p99-ms", 20, true, "ms", false},
	{"scale, control plane on a core of its own: hung process detected, max", "sim-split", "hang-max-s", 16, true, "s", false},
	{"scale, control plane on a core of its own: controller pass over every fleet, mean", "sim-split", "pass-mean-ms", 0, false, "ms", true},
	{"scale, control plane on a core of its own: its CPU (cores, with PostgreSQL)", "sim-split", "control-plane-cores", 0, false, "", true},
}

// scaleArgs are the scale run's: every scale figure of the targets comes from
// it (docs/scaling.md explains each setting).
var scaleArgs = []string{"--hosts", "10000", "--servers-per-host", "10", "--fleets", "10", "--duration", "60s",
	"--health-period", "5s", "--host-heartbeat", "5s", "--unreachable-after", "15s", "--allocation-rate", "50"}

// quickScaleArgs shrink it for --quick.
var quickScaleArgs = []string{"--hosts", "50", "--servers-per-host", "10", "--fleets", "5", "--duration", "15s", "--health-period", "2s"}

func main() {
	jsonOut := flag.String("json", "bench.json", "write runs and medians here")
	runs := flag.Int("runs", 3, "runs of each benchmark; the median is reported")
	quick := flag.Bool("quick", false, "small sizes, for a smoke run (figures not comparable)")
	skip := flag.String("skip", "", "comma-separated benchmarks to skip (e.g. chaos,BenchmarkRebuild)")
	profiles := flag.String("cpuprofile", "", "write a CPU profile of each benchmark's runs to DIR/<benchmark>.prof (read with go tool pprof)")
	flag.Parse()
	if *profiles != "" {
		if err := os.MkdirAll(*profiles, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
	}
	skipped := strings.Split(*skip, ",")
	measured := map[string]map[string][]float64{} // bench → metric → runs
	for _, b := range benches {
		if slices.Contains(skipped, b.name) || slices.Contains(skipped, b.key()) {
			continue
		}
		fmt.Fprintf(os.Stderr, "== %s (%d runs)\n", b.key(), *runs)
		m, err := runBench(b, *runs, *quick, *profiles)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %s: %v\n", b.key(), err)
			os.Exit(1)
		}
		measured[b.key()] = m
	}
	if !slices.Contains(skipped, "chaos") {
		fmt.Fprintf(os.Stderr, "== chaos\n")
		m, err := runChaos(*quick)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: chaos: %v\n", err)
			os.Exit(1)
		}
		measured["chaos"] = m
	}
	if !slices.Contains(skipped, "sim") {
		fmt.Fprintf(os.Stderr, "== sim (the scale run, once)\n")
		m, err := runSim(*quick, *profiles)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: sim: %v\n", err)
			os.Exit(1)
		}
		measured["sim"] = m
	}
	if !slices.Contains(skipped, "sim-split") && !*quick {
		fmt.Fprintf(os.Stderr, "== sim-split (the scale run, the control plane on core 0 and the simulated hosts on core 1)\n")
		m, err := runSplitSim()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: sim-split: %v\n", err)
			os.Exit(1)
		}
		measured["sim-split"] = m
	}
	results := evaluate(measured)
	if err := printTable(os.Stdout, results); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "commit": commit(), "quick": *quick, "results": results}, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable: write JSON:", err)
			os.Exit(1)
		}
	}
}

// runBench runs one benchmark runs times and collects its metrics.
func runBench(b bench, runs int, quick bool, profiles string) (map[string][]float64, error) {
	args := []string{"test", "-run", "^$", "-bench", "^" + b.name + "$", "-benchtime", b.time, "-count", strconv.Itoa(runs), "-timeout", "30m"}
	if profiles != "" {
		prof, err := filepath.Abs(filepath.Join(profiles, strings.ReplaceAll(b.key(), "/", "-")+".prof"))
		if err != nil {
			return nil, err
		}
		// The test binary is kept beside it: pprof needs it for symbols.
		args = append(args, "-cpuprofile", prof, "-o", strings.TrimSuffix(prof, ".prof")+".test")
	}
	if b.exec != "" {
		args = append(args, "-exec", b.exec)
	}
	args = append(args, b.pkg)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), b.env...)
	if quick {
		cmd.Env = append(cmd.Env, b.quick...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, io.Discard
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(out.String(), 20))
	}
	m := parseBench(&out, b.name)
	if len(m) == 0 {
		return nil, fmt.Errorf("no result lines for %s in:\n%s", b.name, tail(out.String(), 20))
	}
	return m, nil
}

// parseBench reads `go test -bench` output: "BenchmarkX-2  1  123 ns/op  4.5 p99-ms …".
// go test prints a benchmark's name before it runs and its figures after;
// a line the benchmark's code prints meanwhile (a log line on stdout)
// moves the figures to a line of their own, "  1  123 ns/op …", which
// belongs to the name above it. Only a line that reads as figures (an
// iteration count, then ns/op) is taken: a benchmark's own tables may
// come in between too.
func parseBench(r io.Reader, name string) map[string][]float64 {
	out := map[string][]float64{}
	figures := func(f []string) {
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return
			}
			out[f[i+1]] = append(out[f[i+1]], v)
		}
	}
	iterations := func(s string) bool { _, err := strconv.Atoi(s); return err == nil }
	pending := false // the name was printed; its figures have not come yet
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) > 0 && (f[0] == name || strings.HasPrefix(f[0], name+"-")):
			if len(f) >= 4 && iterations(f[1]) {
				figures(f[2:])
				pending = false
			} else {
				pending = true
			}
		case pending && len(f) >= 3 && iterations(f[0]) && f[2] == "ns/op":
			figures(f[1:])
			pending = false
		}
	}
	return out
}

// chaosReport is the part of `tether chaos --json` read here.
type chaosReport struct {
	MissedDetections, FalseTerminations int
	HangDetectP99, CrashDetectP99       time.Duration
}

// runChaos runs the chaos drill once (real game server processes).
func runChaos(quick bool) (map[string][]float64, error) {
	args := []string{"--log-level", "error", "chaos", "--servers", "100", "--hosts", "4", "--duration", "60s", "--fault-every", "2s"}
	if quick {
		args = []string{"--log-level", "error", "chaos", "--servers", "20", "--hosts", "2", "--duration", "10s", "--fault-every", "1s"}
	}
	var r chaosReport
	if err := runTether(nil, args, false, nil, &r); err != nil {
		return nil, err
	}
	return map[string][]float64{
		"hang-p99-s":         {r.HangDetectP99.Seconds()},
		"crash-p99-ms":       {float64(r.CrashDetectP99) / float64(time.Millisecond)},
		"false-terminations": {float64(r.FalseTerminations)},
		"missed-detections":  {float64(r.MissedDetections)},
	}, nil
}

// simReport is the part of `tether sim --json` read here.
type simReport struct {
	ReadySeconds      float64               `json:"ready_seconds"`
	EventsPerSecond   float64               `json:"events_per_second"`
	ProjectionLag     struct{ P99 float64 } `json:"projection_lag_ms"`
	AllocationLatency struct{ P99 float64 } `json:"allocation_latency_ms"`
	AllocationServed  struct {
		N   int     `json:"n"`
		P99 float64 `json:"p99"` // a bucket bound; negative: more than its magnitude
	} `json:"allocation_served_ms"`
	HangDetection        struct{ Max float64 } `json:"hang_detection_ms"`
	ControllerPassMeanMs float64               `json:"controller_pass_mean_ms"`
	PublishedByAgents    int64                 `json:"published_by_agents"`
	AppliedByAgents      int64                 `json:"applied_by_agents"`
	FalseTerminations    int                   `json:"false_terminations"`
	MissedDetections     int                   `json:"missed_detections"`
	ProcessPeakRSS       int64                 `json:"process_peak_rss_bytes"`
	Failures             []string              `json:"failures"`
	CPU                  *struct {
		Components []struct {
			Cores        float64 `json:"cores"`
			ControlPlane bool    `json:"control_plane"`
		} `json:"components"`
	} `json:"cpu"`
}

// figures are the table's metrics of a sim report.
func (r simReport) figures() map[string][]float64 {
	ok := 0.0
	if len(r.Failures) == 0 {
		ok = 1
	}
	m := map[string][]float64{
		"audit-ok":           {ok},
		"lost-events":        {float64(r.PublishedByAgents - r.AppliedByAgents)},
		"false-terminations": {float64(r.FalseTerminations)},
		"missed-detections":  {float64(r.MissedDetections)},
		"lag-p99-ms":         {r.ProjectionLag.P99},
		"alloc-p99-ms":       {r.AllocationLatency.P99},
		"hang-max-s":         {r.HangDetection.Max / 1000},
		"events/s":           {r.EventsPerSecond},
		"pass-mean-ms":       {r.ControllerPassMeanMs},
		"ready-s":            {r.ReadySeconds},
		"rss-mib":            {float64(r.ProcessPeakRSS) / (1 << 20)},
	}
	if r.AllocationServed.N > 0 { // none timed: "not run", never a 0 that meets its target
		// "More than the last bound" (negative) is judged as that bound:
		// at least as slow, so an at-most target is not met by it.
		m["alloc-served-p99-ms"] = []float64{math.Abs(r.AllocationServed.P99)}
	}
	if r.CPU != nil {
		var cores float64
		for _, c := range r.CPU.Components {
			if c.ControlPlane {
				cores += c.Cores
			}
		}
		m["control-plane-cores"] = []float64{cores}
	}
	return m
}

// runSim runs the scale simulation once (it takes minutes; its audit is
// pass or fail, its figures one run's).
func runSim(quick bool, profiles string) (map[string][]float64, error) {
	args := append([]string{"--log-level", "error", "sim", "--progress-every", "30s"}, scaleArgs...)
	if quick {
		args = append([]string{"--log-level", "error", "sim"}, quickScaleArgs...)
	}
	if profiles != "" {
		args = append(args, "--cpuprofile", filepath.Join(profiles, "sim.prof"))
	}
	// The simulator exits 1 when its audit fails, with its report written:
	// the table shows the failure.
	var r simReport
	if err := runTether(nil, args, true, os.Stderr, &r); err != nil {
		return nil, err
	}
	return r.figures(), nil
}

// runSplitSim runs the scale simulation over two processes: the control
// plane (NATS, PostgreSQL, projector, API, controller) pinned to core 0
// and the simulated hosts, matchmaker and audit pinned to core 1
// (taskset), so that the control plane is measured on a core the
// simulated fleet does not share (docs/scaling.md).
func runSplitSim() (map[string][]float64, error) {
	if runtime.NumCPU() < 2 {
		return nil, errors.New("needs 2 cores")
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, fmt.Errorf("taskset (util-linux): %w", err)
	}
	dir, err := os.MkdirTemp("", "tether-bench-control-plane-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cp := exec.Command(taskset, append([]string{"-c", "0", "bin/tether", "--log-level", "error", "sim", "--role", "control-plane", "--data-dir", dir}, scaleArgs...)...)
	cp.Stderr = os.Stderr
	if err := cp.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cp.Process.Signal(syscall.SIGTERM) // it stops on SIGTERM; Wait reports how
		done := make(chan error, 1)
		go func() { done <- cp.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute):
			_ = cp.Process.Kill() // the wait above bounds a stop that hangs; the kill's error is moot
			err = <-done
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: sim-split: the control plane stopped with %v\n", err)
		}
	}()
	args := append([]string{"--log-level", "error", "sim", "--role", "hosts", "--control-plane", dir, "--progress-every", "30s"}, scaleArgs...)
	var r simReport
	if err := runTether([]string{taskset, "-c", "1"}, args, true, os.Stderr, &r); err != nil {
		return nil, err
	}
	return r.figures(), nil
}

// runTether runs bin/tether with args and --json FILE, and decodes the
// report it writes into into. A run that exits non-zero fails, unless
// reportOnFailure and it wrote its report. progress, if set, also gets the
// command's stderr as it comes.
func runTether(prefix, args []string, reportOnFailure bool, progress io.Writer, into any) error {
	f, err := os.CreateTemp("", "tether-bench-*.json")
	if err != nil {
		return err
	}
	path := f.Name()
	if err := f.Close(); err != nil {
		return err
	}
	defer os.Remove(path)
	args = append(args, "--json", path)
	argv := append(append(slices.Clone(prefix), "bin/tether"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if progress != nil {
		cmd.Stderr = io.MultiWriter(&out, progress)
	}
	runErr := cmd.Run()
	failed := func(err error) error {
		return fmt.Errorf("bin/tether %s: %w (run make build first)\n%s", strings.Join(args, " "), err, tail(out.String(), 20))
	}
	if runErr != nil && !reportOnFailure {
		return failed(runErr)
	}
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 0 {
		err = errors.New("no report written")
	}
	if err != nil {
		return failed(errors.Join(runErr, err))
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("report of bin/tether %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// evaluate takes each target's median and says whether it is met.
func evaluate(measured map[string]map[string][]float64) []result {
	var out []result
	for _, t := range targets {
		r := result{target: t}
		runs := measured[t.Bench][t.Metric]
		if len(runs) == 0 {
			r.Note = "not run"
			out = append(out, r)
			continue
		}
		r.Runs, r.Median = runs, median(runs)
		switch {
		case t.Reported:
			r.Met = true // no target
		case t.AtMost:
			r.Met = r.Median <= t.Bound
		default:
			r.Met = r.Median >= t.Bound
		}
		out = append(out, r)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printTable(w io.Writer, results []result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tBOUND\tMEDIAN\tRUNS\tVERDICT")
	for _, r := range results {
		if r.Note != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t%s\n", r.What, bound(r.target), r.Note)
			continue
		}
		var runs []string
		for _, v := range r.Runs {
			runs = append(runs, num(v))
		}
		verdict := "met"
		switch {
		case r.Reported:
			verdict = "reported"
		case !r.Met:
			verdict = "falls short"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\n", r.What, bound(r.target), num(r.Median), r.Unit, strings.Join(runs, " "), verdict)
	}
	return tw.Flush()
}

func bound(t target) string {
	if t.Bench == "" || t.Reported {
		return "-"
	}
	op := "≥"
	if t.AtMost {
		op = "≤"
	}
	return op + " " + num(t.Bound) + t.Unit
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
