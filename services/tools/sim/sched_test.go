package sim

import (
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

// histogramSince reads what a cumulative runtime histogram gained over a
// phase, to each bucket's upper bound.
func TestHistogramSince(t *testing.T) {
	read := func() metrics.Value {
		s := []metrics.Sample{{Name: metricSchedLatency}}
		metrics.Read(s)
		return s[0].Value
	}
	before := read()
	if before.Kind() != metrics.KindFloat64Histogram {
		t.Skipf("%s: not a histogram in this runtime", metricSchedLatency)
	}
	// Goroutines that wait to run: the histogram gains samples.
	done := make(chan struct{})
	for range 50 {
		go func() { done <- struct{}{} }()
	}
	for range 50 {
		<-done
	}
	p50, p99, maxMs, n := histogramSince(read(), before)
	if n == 0 || p50 <= 0 || p99 < p50 || maxMs < p99 {
		t.Fatalf("p50 %v p99 %v max %v over %d schedulings", p50, p99, maxMs, n)
	}
	if p50, p99, maxMs, n := histogramSince(before, before); n != 0 || p50 != 0 || p99 != 0 || maxMs != 0 {
		t.Fatalf("no change read as p50 %v p99 %v max %v n %d", p50, p99, maxMs, n)
	}
}

// A made-up histogram: quantiles land in the right buckets, reported at
// their upper bounds, and an unbounded last bucket at its lower bound.
func TestHistogramSinceQuantiles(t *testing.T) {
	buckets := []float64{0, 0.001, 0.010, 0.100, math.Inf(1)}
	before := metrics.Float64Histogram{Counts: []uint64{5, 5, 5, 5}, Buckets: buckets}
	after := metrics.Float64Histogram{Counts: []uint64{5 + 98, 5 + 1, 5, 5 + 1}, Buckets: buckets}
	p50, p99, maxMs, n := histogramGained(&after, &before)
	if n != 100 || p50 != 1 || p99 != 10 || maxMs != 100 {
		t.Fatalf("p50 %v p99 %v max %v n %d; want 1, 10, 100 ms over 100", p50, p99, maxMs, n)
	}
}

// The slowest samples are kept, slowest first, with when each began.
func TestSlowSamplesKeepsTheSlowest(t *testing.T) {
	s := &slowSamples{keep: 3}
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for i, ms := range []int{5, 50, 1, 700, 20, 300} {
		s.add(t0.Add(time.Duration(i)*time.Second), time.Duration(ms)*time.Millisecond)
	}
	got := s.list()
	if len(got) != 3 || got[0].Ms != 700 || got[1].Ms != 300 || got[2].Ms != 50 || !got[0].At.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("kept %+v", got)
	}
}
