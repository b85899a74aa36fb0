package allocload

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// AllocateSpan is the name of the API's server span of an allocation
// (OpenTelemetry's gRPC instrumentation).
const AllocateSpan = "tether.v1.AllocationService/AllocateGameServer"

// SpanRecorder is an OpenTelemetry span exporter that keeps the finished
// spans in memory (up to a bound), for Breakdown.
type SpanRecorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
	limit int
}

// NewSpanRecorder keeps at most limit spans.
func NewSpanRecorder(limit int) *SpanRecorder { return &SpanRecorder{limit: limit} }

// ExportSpans keeps the spans.
func (r *SpanRecorder) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(spans), r.limit-len(r.spans))
	if n > 0 {
		r.spans = append(r.spans, spans[:n]...)
	}
	return nil
}

// Shutdown does nothing.
func (r *SpanRecorder) Shutdown(context.Context) error { return nil }

// Reset forgets the spans kept.
func (r *SpanRecorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = nil
}

// Spans returns the spans kept.
func (r *SpanRecorder) Spans() []sdktrace.ReadOnlySpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Step is one step of allocations in a Breakdown: the time the allocations
// spent in spans of one kind.
type Step struct {
	// Name is the span's name; an append's carries its event type.
	Name string
	// PerCall is how many such spans an allocation had, on average.
	PerCall float64
	// Mean, P50 and P99 are of an allocation's total time in the step,
	// over the allocations that had it.
	Mean, P50, P99 time.Duration
	// Share is the step's part of the allocations' server time.
	Share float64
}

// Breakdown is where allocations' server time went, from their spans.
type Breakdown struct {
	// Allocations is the number of allocation server spans read.
	Allocations int
	// Server is the server span's duration: mean, p50, p99.
	ServerMean, ServerP50, ServerP99 time.Duration
	// Steps are the allocations' child spans by kind, most time first; the
	// last, "(in the handler, outside any span)", is the rest.
	Steps []Step
	// Background are child spans that ended after their allocation
	// answered (a candidate list read in the background): not waited for.
	Background map[string]int
}

// Breakdowns groups the spans by trace: for each allocation server span,
// the spans under it (any depth) that ended before it are its steps.
func Breakdowns(spans []sdktrace.ReadOnlySpan) Breakdown {
	byTrace := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byTrace[s.SpanContext().TraceID()] = append(byTrace[s.SpanContext().TraceID()], s)
	}
	b := Breakdown{Background: map[string]int{}}
	perStep := map[string][]time.Duration{}
	counts := map[string]int{}
	var servers []time.Duration
	var rest []time.Duration
	var total time.Duration
	for _, group := range byTrace {
		var root sdktrace.ReadOnlySpan
		for _, s := range group {
			if s.Name() == AllocateSpan && s.SpanKind() == trace.SpanKindServer {
				root = s
			}
		}
		if root == nil {
			continue
		}
		d := root.EndTime().Sub(root.StartTime())
		servers = append(servers, d)
		total += d
		sums := map[string]time.Duration{}
		var inSteps time.Duration
		for _, s := range group {
			if s == root {
				continue
			}
			name := stepName(s)
			if s.EndTime().After(root.EndTime()) {
				b.Background[name]++
				continue
			}
			sd := s.EndTime().Sub(s.StartTime())
			sums[name] += sd
			counts[name]++
			inSteps += sd
		}
		for name, sd := range sums {
			perStep[name] = append(perStep[name], sd)
		}
		rest = append(rest, max(0, d-inSteps))
	}
	b.Allocations = len(servers)
	if b.Allocations == 0 {
		return b
	}
	b.ServerMean, b.ServerP50, b.ServerP99 = stats(servers)
	perStep["(in the handler, outside any span)"] = rest
	counts["(in the handler, outside any span)"] = len(rest)
	for name, ds := range perStep {
		mean, p50, p99 := stats(ds)
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		b.Steps = append(b.Steps, Step{Name: name, PerCall: float64(counts[name]) / float64(b.Allocations),
			Mean: mean, P50: p50, P99: p99, Share: float64(sum) / float64(total)})
	}
	sort.Slice(b.Steps, func(i, j int) bool { return b.Steps[i].Share > b.Steps[j].Share })
	return b
}

// stepName names a span's step: an append with its event type.
func stepName(s sdktrace.ReadOnlySpan) string {
	if s.Name() != "events.append" {
		return s.Name()
	}
	for _, a := range s.Attributes() {
		if a.Key == "tether.event_type" {
			return "events.append " + a.Value.AsString()
		}
	}
	return s.Name()
}

// stats returns the mean, p50 and p99 of ds (sorted in place).
func stats(ds []time.Duration) (mean, p50, p99 time.Duration) {
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds)), quantile(ds, 0.5), quantile(ds, 0.99)
}

// Table writes the breakdown.
func (b Breakdown) Table(w io.Writer) error {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }
	fmt.Fprintf(w, "%d allocations; server span mean %s ms, p50 %s ms, p99 %s ms\n", b.Allocations, ms(b.ServerMean), ms(b.ServerP50), ms(b.ServerP99))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tper call\tmean ms\tp50 ms\tp99 ms\tshare of server time")
	for _, s := range b.Steps {
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%s\t%s\t%.1f %%\n", s.Name, s.PerCall, ms(s.Mean), ms(s.P50), ms(s.P99), 100*s.Share)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(b.Background) > 0 {
		var parts []string
		for n, c := range b.Background {
			parts = append(parts, fmt.Sprintf("%s %d", n, c))
		}
		slices.Sort(parts)
		fmt.Fprintf(w, "in the background, not waited for: %v\n", parts)
	}
	return nil
}
