package sim

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/platform/procstat"
)

// checkpoint is the projector's checkpoint: the last stream sequence the
// views include.
func (w *world) checkpoint(ctx context.Context) (uint64, error) {
	var seq int64
	err := w.stack.Pool.QueryRow(ctx, `SELECT coalesce(max(sequence), 0) FROM projector_checkpoints`).Scan(&seq)
	return uint64(seq), err
}

// sampleLag measures, once a second until ctx ends, how long the views take
// to include everything in the stream at the moment of the sample: the
// publish→view lag of the newest event, which bounds every other's. Each
// sample is kept with when it was taken (slowSamples), so that a report can
// say when the slowest came.
func (w *world) sampleLag(ctx context.Context, into *latencies, slowest *slowSamples) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		target, err := w.stack.Store.StreamLastSequence(ctx)
		if err != nil {
			continue // ctx ending, or NATS busy: no sample
		}
		began := time.Now()
		for ctx.Err() == nil && time.Since(began) < time.Minute {
			cp, err := w.checkpoint(ctx)
			if err == nil && cp >= target {
				d := time.Since(began)
				into.add(d)
				slowest.add(began, d)
				break
			}
			sleepCtx(ctx, 2*time.Millisecond)
		}
	}
}

// slowSamples keeps the slowest samples of a phase with when each began,
// to be laid beside what else happened then (a controller pass, a garbage
// collection: `GODEBUG=gctrace=1` on the control plane).
type slowSamples struct {
	mu   sync.Mutex
	keep int
	s    []TimedSample
}

// TimedSample is one latency sample and when it began.
type TimedSample struct {
	At time.Time `json:"at"`
	Ms float64   `json:"ms"`
}

// add offers a sample; only the keep slowest stay.
func (s *slowSamples) add(at time.Time, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s = append(s.s, TimedSample{At: at, Ms: float64(d) / float64(time.Millisecond)})
	slices.SortFunc(s.s, func(a, b TimedSample) int { return cmp.Compare(b.Ms, a.Ms) }) // slowest first
	if len(s.s) > s.keep {
		s.s = s.s[:s.keep]
	}
}

// list returns the kept samples, slowest first.
func (s *slowSamples) list() []TimedSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.s)
}

// memory tracks the peak Go heap in use per component (from the runtime's
// heap profile) and the peak proportional memory of PostgreSQL's processes.
type memory struct {
	mu       sync.Mutex
	heapPeak map[string]int64
	pgPeak   int64
}

// sample takes one heap profile and one PostgreSQL reading.
func (m *memory) sample() {
	heap := heapByComponent()
	pg := postgresPSS()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.heapPeak == nil {
		m.heapPeak = map[string]int64{}
	}
	for k, v := range heap {
		m.heapPeak[k] = max(m.heapPeak[k], v)
	}
	m.pgPeak = max(m.pgPeak, pg)
}

// memoryEvery is how often memory is sampled.
const memoryEvery = 30 * time.Second

// run samples every memoryEvery until ctx ends.
func (m *memory) run(ctx context.Context) {
	t := time.NewTicker(memoryEvery)
	defer t.Stop()
	for {
		m.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// components, most specific first: a heap sample belongs to the first whose
// code is on its allocation stack (an agent's NATS client buffers are the
// agent's; the API's view queries are the API's).
var components = []struct{ name, pkg string }{
	{"API server", "tether/services/apiserver."},
	{"controller", "tether/services/controller."},
	{"simulated hosts (agents, processes)", "tether/services/agent."},
	{"simulated hosts (agents, processes)", "tether/services/tools/sim."},
	{"projector", "tether/projections/postgres."},
	{"NATS server", "nats-server/v2/"},
	{"NATS client", "nats.go"},
}

// heapByComponent attributes the live heap to components by allocation
// stack, scaling the runtime's sampled records as pprof does. The profile
// describes the heap as of the last garbage collection the process made
// on its own. Each sample used to force one first: at 100,000 servers a
// collection of a 6 GB heap, which held up the simulated hosts' process
// every 30 s, and with it the lag and allocation samples taken in that
// process: the slowest lag samples of a split run came 30 s apart, 1.2 s
// each, while the control plane's goroutines never waited more than
// 0.34 s to run (docs/scaling.md).
func heapByComponent() map[string]int64 {
	var recs []runtime.MemProfileRecord
	for {
		// ok is false when the profile grew past recs since the size was
		// read: read it again, a little bigger.
		n, ok := runtime.MemProfile(recs, true)
		if ok {
			recs = recs[:n]
			break
		}
		recs = make([]runtime.MemProfileRecord, n+64)
	}
	rate := float64(runtime.MemProfileRate)
	out := map[string]int64{}
	for _, r := range recs {
		bytes, objs := r.InUseBytes(), r.InUseObjects()
		if bytes <= 0 || objs <= 0 {
			continue
		}
		scale := 1.0
		if rate > 1 {
			avg := float64(bytes) / float64(objs)
			scale = 1 / (1 - math.Exp(-avg/rate))
		}
		out[componentOf(r.Stack())] += int64(float64(bytes) * scale)
	}
	return out
}

func componentOf(stack []uintptr) string {
	var funcs []string
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		funcs = append(funcs, f.Function)
		if !more {
			break
		}
	}
	for _, c := range components {
		for _, fn := range funcs {
			if strings.Contains(fn, c.pkg) {
				return c.name
			}
		}
	}
	return "other (runtime, gRPC, pgx pools)"
}

// postgresPSS sums the proportional set size (shared memory counted once)
// of the PostgreSQL processes descended from this process.
func postgresPSS() int64 {
	var total int64
	for _, pid := range postgresProcesses(procstat.Processes(), os.Getpid()) {
		total += pssOf(pid)
	}
	return total
}

// postgresProcesses picks the PostgreSQL processes descended from process
// root (the run's own server, not another on the machine).
func postgresProcesses(procs map[int]procstat.Process, root int) []int {
	var out []int
	for _, pid := range procstat.Descendants(procs, root) {
		if procs[pid].Comm == "postgres" {
			out = append(out, pid)
		}
	}
	return out
}

// pssOf reads a process's Pss from /proc/<pid>/smaps_rollup, in bytes.
func pssOf(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			return kiloBytes(rest)
		}
	}
	return 0
}

// kiloBytes reads a /proc size such as "  1234 kB" in bytes; 0 (unknown) if
// the kernel wrote something else.
func kiloBytes(field string) int64 {
	kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(field), "kB")), 10, 64)
	if err != nil {
		return 0
	}
	return kb * 1024
}

// peakRSS is this process's peak resident set (VmHWM), in bytes.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return kiloBytes(rest)
		}
	}
	return 0
}

// tableSizes lists the projection tables with their rows and total size
// (indexes and TOAST included), largest first.
func (w *world) tableSizes(ctx context.Context) ([]TableSize, error) {
	rows, err := w.stack.Pool.Query(ctx, `
SELECT c.relname, pg_total_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r'
ORDER BY 2 DESC`)
	if err != nil {
		return nil, fmt.Errorf("sim: table sizes: %w", err)
	}
	defer rows.Close()
	var out []TableSize
	for rows.Next() {
		var t TableSize
		if err := rows.Scan(&t.Name, &t.Bytes); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		// The names come from pg_class; quoting keeps odd ones safe.
		q := fmt.Sprintf(`SELECT count(*) FROM %q`, out[i].Name)
		if err := w.stack.Pool.QueryRow(ctx, q).Scan(&out[i].Rows); err != nil {
			return nil, fmt.Errorf("sim: count %s: %w", out[i].Name, err)
		}
	}
	return out, nil
}

// streamSizes reads the JetStream streams' message counts and bytes.
func (w *world) streamSizes(ctx context.Context) ([]StreamSize, error) {
	var out []StreamSize
	for _, name := range []string{events.StreamName, commands.StreamName, "KV_" + hostbeat.Bucket} {
		s, err := w.stack.JetStream.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("sim: stream %s: %w", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("sim: stream %s: %w", name, err)
		}
		out = append(out, StreamSize{Name: name, Messages: info.State.Msgs, Bytes: info.State.Bytes, Subjects: info.State.NumSubjects})
	}
	return out, nil
}

// histogram is a cumulative histogram read from the simulation's meter.
type histogram struct {
	count  uint64
	sum    float64
	bounds []float64
	counts []uint64
}

// histogramOf sums the named float histogram of rm over the data points
// whose attributes keep accepts (all of them if keep is nil).
func histogramOf(rm metricdata.ResourceMetrics, name string, keep func(attribute.Set) bool) (histogram, error) {
	var h histogram
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			data, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				return histogram{}, fmt.Errorf("sim: %s is a %T, not a float histogram", name, m.Data)
			}
			for _, dp := range data.DataPoints {
				if keep != nil && !keep(dp.Attributes) {
					continue
				}
				h.count += dp.Count
				h.sum += dp.Sum
				if h.bounds == nil {
					h.bounds = slices.Clone(dp.Bounds)
					h.counts = make([]uint64, len(dp.BucketCounts))
				}
				for i, c := range dp.BucketCounts {
					if i < len(h.counts) {
						h.counts[i] += c
					}
				}
			}
		}
	}
	return h, nil
}

// since is the histogram of what was recorded after an earlier reading:
// the mean, and the upper bound of the highest bucket that got a record (a
// max, to bucket precision; see quantileSince).
func (h histogram) since(earlier histogram) (n uint64, mean, maxBound float64) {
	n = h.count - earlier.count
	if n == 0 {
		return 0, 0, 0
	}
	mean = (h.sum - earlier.sum) / float64(n)
	return n, mean, h.quantileSince(earlier, 1)
}

// quantileSince is the q-quantile (0 < q ≤ 1; 1 is the max) of what was
// recorded after an earlier reading, to bucket precision: the upper bound
// of the bucket that holds it, so never less than the true value. Past the
// last bound it is that bound negated: "more than" it (JSON has no
// infinity). Nothing recorded since gives 0.
func (h histogram) quantileSince(earlier histogram, q float64) float64 {
	n := h.count - earlier.count
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, c := range h.counts {
		if i < len(earlier.counts) {
			c -= earlier.counts[i]
		}
		if seen += c; seen < rank || c == 0 {
			continue
		}
		if i < len(h.bounds) {
			return h.bounds[i]
		}
		break
	}
	if len(h.bounds) == 0 {
		return 0
	}
	return -h.bounds[len(h.bounds)-1]
}
