package sim

import (
	"fmt"
	"math"
	"runtime/metrics"
	"time"
)

// The Go runtime's own account of a phase: how long runnable goroutines
// waited for a thread, and what garbage collection took. A process whose
// goroutines wait seconds to run has tails of seconds whatever its
// average CPU; these rows tell that apart from a component that is slow.
const (
	metricSchedLatency = "/sched/latencies:seconds"
	metricGCPauses     = "/sched/pauses/total/gc:seconds"
	metricGCCPU        = "/cpu/classes/gc/total:cpu-seconds"
	metricGCAssistCPU  = "/cpu/classes/gc/mark/assist:cpu-seconds"
	metricGCCycles     = "/gc/cycles/total:gc-cycles"
	metricGOMAXPROCS   = "/sched/gomaxprocs:threads"
)

// RuntimeReport is the runtime's account of the phase.
type RuntimeReport struct {
	GOMAXPROCS int `json:"gomaxprocs"`
	// SchedulingDelay is how long goroutines waited, runnable, before they
	// ran (the runtime's histogram, to its bucket's upper bound).
	SchedulingDelayP50Ms float64 `json:"scheduling_delay_p50_ms"`
	SchedulingDelayP99Ms float64 `json:"scheduling_delay_p99_ms"`
	SchedulingDelayMaxMs float64 `json:"scheduling_delay_max_ms"`
	// Scheduled counts the goroutine schedulings the delays are of.
	Scheduled uint64 `json:"scheduled"`
	GCCycles  uint64 `json:"gc_cycles"`
	// GCCores is the collector's CPU per second of the phase, GCAssistCores
	// the part of it taken from the goroutines that allocate.
	GCCores       float64 `json:"gc_cores"`
	GCAssistCores float64 `json:"gc_assist_cores"`
	GCPauseMaxMs  float64 `json:"gc_pause_max_ms"` // stop-the-world, longest
}

// runtimeSample is a reading of the metrics a RuntimeReport is made of.
type runtimeSample []metrics.Sample

// readRuntime reads the metrics now.
func readRuntime() runtimeSample {
	s := runtimeSample{
		{Name: metricSchedLatency}, {Name: metricGCPauses}, {Name: metricGCCPU},
		{Name: metricGCAssistCPU}, {Name: metricGCCycles}, {Name: metricGOMAXPROCS},
	}
	metrics.Read(s)
	return s
}

// since reports the phase between earlier and s, of wall length wall.
func (s runtimeSample) since(earlier runtimeSample, wall time.Duration) RuntimeReport {
	var r RuntimeReport
	for i, m := range s {
		before := earlier[i].Value
		switch m.Name {
		case metricSchedLatency:
			r.SchedulingDelayP50Ms, r.SchedulingDelayP99Ms, r.SchedulingDelayMaxMs, r.Scheduled = histogramSince(m.Value, before)
		case metricGCPauses:
			_, _, r.GCPauseMaxMs, _ = histogramSince(m.Value, before)
		case metricGCCPU:
			r.GCCores = floatSince(m.Value, before) / wall.Seconds()
		case metricGCAssistCPU:
			r.GCAssistCores = floatSince(m.Value, before) / wall.Seconds()
		case metricGCCycles:
			if m.Value.Kind() == metrics.KindUint64 && before.Kind() == metrics.KindUint64 {
				r.GCCycles = m.Value.Uint64() - before.Uint64()
			}
		case metricGOMAXPROCS:
			if m.Value.Kind() == metrics.KindUint64 {
				r.GOMAXPROCS = int(m.Value.Uint64())
			}
		}
	}
	return r
}

// floatSince is the growth of a cumulative float metric; 0 when the
// runtime does not have it.
func floatSince(now, before metrics.Value) float64 {
	if now.Kind() != metrics.KindFloat64 || before.Kind() != metrics.KindFloat64 {
		return 0
	}
	return now.Float64() - before.Float64()
}

// histogramSince gives the p50, p99 and maximum, in milliseconds, of what a
// cumulative histogram gained between before and now, each to its bucket's
// upper bound (a bucket without one reads as its lower bound), and how
// many samples it gained.
func histogramSince(now, before metrics.Value) (p50, p99, maxMs float64, n uint64) {
	if now.Kind() != metrics.KindFloat64Histogram || before.Kind() != metrics.KindFloat64Histogram {
		return 0, 0, 0, 0
	}
	return histogramGained(now.Float64Histogram(), before.Float64Histogram())
}

// histogramGained is histogramSince on the histograms themselves.
func histogramGained(h, b *metrics.Float64Histogram) (p50, p99, maxMs float64, n uint64) {
	if len(h.Counts) != len(b.Counts) {
		return 0, 0, 0, 0
	}
	counts := make([]uint64, len(h.Counts))
	for i := range counts {
		counts[i] = h.Counts[i] - b.Counts[i]
		n += counts[i]
	}
	if n == 0 {
		return 0, 0, 0, 0
	}
	bound := func(i int) float64 {
		if up := h.Buckets[i+1]; !math.IsInf(up, 1) {
			return up * 1000
		}
		return h.Buckets[i] * 1000
	}
	quantile := func(q float64) float64 {
		rank := uint64(math.Ceil(q * float64(n)))
		var seen uint64
		for i, c := range counts {
			seen += c
			if seen >= rank && c > 0 {
				return bound(i)
			}
		}
		return 0
	}
	for i := len(counts) - 1; i >= 0; i-- {
		if counts[i] > 0 {
			maxMs = bound(i)
			break
		}
	}
	return quantile(0.5), quantile(0.99), maxMs, n
}

// print adds the runtime's rows to the report.
func (r RuntimeReport) print(row func(k, v string, args ...any)) {
	row("goroutines waiting to run", "p50 %s, p99 %s, max %s (%d schedulings; GOMAXPROCS %d)",
		msText(r.SchedulingDelayP50Ms), msText(r.SchedulingDelayP99Ms), msText(r.SchedulingDelayMaxMs), r.Scheduled, r.GOMAXPROCS)
	row("garbage collection", "%d cycles, %.2f cores (%.2f of it assists by allocating goroutines), longest pause %s",
		r.GCCycles, r.GCCores, r.GCAssistCores, msText(r.GCPauseMaxMs))
}

// msText prints a duration in milliseconds with sense for its size.
func msText(ms float64) string {
	if ms < 1 {
		return fmt.Sprintf("%.0f µs", ms*1000)
	}
	return fmt.Sprintf("%.1f ms", ms)
}
