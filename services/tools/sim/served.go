package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tetherhq/tether/services/tools/allocload"
)

// The control plane's own figures of the steady phase, read from its
// meters: the controller's passes and the API server's timing of each
// allocation. The matchmaker times its calls as a client; in the split
// run it runs in the hosts process, on the core the simulated fleet
// saturates, and its figure includes its own waits to be scheduled. The
// API server's figure (otelgrpc's rpc.server.call.duration, the metric an
// operator's dashboard reads) starts when the server has read the call
// and ends when it has answered, so the two together say which side a
// slow allocation was slow on.
const (
	// rpcServerCallDuration is otelgrpc's server-side call duration, in
	// seconds, labelled by method.
	rpcServerCallDuration = "rpc.server.call.duration"
	// allocateMethod ends the rpc.method label of AllocateGameServer (the
	// label is the full method name or the bare one, by semconv version).
	allocateMethod = "AllocateGameServer"
	// steadyFile is where a control plane apart (RoleControlPlane) writes
	// its figures of the steady phase, in its data directory, for the
	// hosts role's report.
	steadyFile = "steady.json"
	// steadyFileWait bounds the hosts role's wait for that file.
	steadyFileWait = 30 * time.Second
)

// servedBounds are the bucket bounds (seconds) of rpcServerCallDuration
// in the simulation: fine enough around the 20 ms allocation target to
// tell p99s apart (otelgrpc's default has none between 10 and 25 ms).
var servedBounds = []float64{
	0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.010, 0.012, 0.014, 0.016, 0.018, 0.020,
	0.025, 0.030, 0.040, 0.050, 0.075, 0.100, 0.150, 0.200, 0.300, 0.500, 0.750, 1, 2, 5, 10, 30, 60,
}

// servedView gives rpcServerCallDuration the simulation's buckets.
func servedView() sdkmetric.Option {
	return sdkmetric.WithView(sdkmetric.NewView(
		sdkmetric.Instrument{Name: rpcServerCallDuration},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: servedBounds}},
	))
}

// isAllocation keeps the data points of AllocateGameServer calls.
func isAllocation(attrs attribute.Set) bool {
	v, ok := attrs.Value("rpc.method")
	return ok && strings.HasSuffix(v.AsString(), allocateMethod)
}

// ControlPlaneFigures are what the control plane's meters measured over the
// steady phase. Figures read from histograms are bucket upper bounds (never
// less than the true value); a negative one means more than its magnitude.
type ControlPlaneFigures struct {
	ControllerPasses     uint64  `json:"controller_passes"`
	ControllerPassMeanMs float64 `json:"controller_pass_mean_ms"`
	ControllerPassMaxMs  float64 `json:"controller_pass_max_ms"`
	// AllocationServed is AllocateGameServer as the API server timed it.
	AllocationServed Latency `json:"allocation_served_ms"`
}

// meterReading is the control plane's histograms at one time.
type meterReading struct {
	passes, served histogram
}

// readMeters reads this process's control-plane histograms.
func (w *world) readMeters(ctx context.Context) (meterReading, error) {
	var rm metricdata.ResourceMetrics
	if err := w.meter.Collect(ctx, &rm); err != nil {
		return meterReading{}, err
	}
	passes, err := histogramOf(rm, controllerPassMetric, nil)
	if err != nil {
		return meterReading{}, err
	}
	served, err := histogramOf(rm, rpcServerCallDuration, isAllocation)
	if err != nil {
		return meterReading{}, err
	}
	return meterReading{passes: passes, served: served}, nil
}

// since gives the figures of what was recorded after earlier.
func (r meterReading) since(earlier meterReading) ControlPlaneFigures {
	var f ControlPlaneFigures
	n, mean, maxBound := r.passes.since(earlier.passes)
	f.ControllerPasses, f.ControllerPassMeanMs, f.ControllerPassMaxMs = n, mean*1000, maxBound*1000
	s, e := r.served, earlier.served
	f.AllocationServed = Latency{
		N:   int(s.count - e.count),
		P50: s.quantileSince(e, 0.50) * 1000,
		P99: s.quantileSince(e, 0.99) * 1000,
		Max: s.quantileSince(e, 1) * 1000,
	}
	return f
}

// removeSteadyFigures removes a steadyFile left in dir by an earlier run,
// so that the one read after this run's steady phase is this run's.
func removeSteadyFigures(dir string) error {
	err := os.Remove(filepath.Join(dir, steadyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// awaitSteadyFigures reads the figures a control plane apart writes in dir
// once told the steady phase ended, waiting at most timeout for them.
func awaitSteadyFigures(ctx context.Context, dir string, timeout time.Duration) (ControlPlaneFigures, error) {
	path := filepath.Join(dir, steadyFile)
	var f ControlPlaneFigures
	ok, err := awaitJSONFile(ctx, path, timeout, &f, nil)
	if err == nil && !ok {
		err = fmt.Errorf("sim: the control plane wrote no %s within %s of the steady phase's end", path, timeout)
	}
	return f, err
}

// allocationTrace records the spans of the API's allocations for
// Options.TraceAllocations. A nil *allocationTrace records nothing.
type allocationTrace struct {
	rec *allocload.SpanRecorder
	tp  *sdktrace.TracerProvider
}

// allocationTraceLimit bounds the spans kept: a 60 s steady phase at 50
// allocations a second ends about 3,000 allocations of a few spans each.
const allocationTraceLimit = 100_000

// newAllocationTrace samples the traces whose root is an allocation's
// server span, and in them the spans of this process's own steps (its
// appends). The spans that join its trace from elsewhere (the projector's
// of its events, an agent's of its notice: remote parents) are left out:
// they are not the allocation's wait, and a breakdown would count them as
// such when they ended before it.
func newAllocationTrace() *allocationTrace {
	rec := allocload.NewSpanRecorder(allocationTraceLimit)
	return &allocationTrace{rec: rec, tp: sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(rec), sdktrace.WithSampler(sdktrace.ParentBased(allocationRoots{},
			sdktrace.WithRemoteParentSampled(sdktrace.NeverSample()),
			sdktrace.WithRemoteParentNotSampled(sdktrace.NeverSample()))))}
}

// provider is the tracer provider to give the control plane; nil (the
// interface, so that components default to no-op) without a trace.
func (t *allocationTrace) provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// reset forgets the spans recorded so far (those of the ramp).
func (t *allocationTrace) reset() {
	if t != nil {
		t.rec.Reset()
	}
}

// print writes where the recorded allocations' server time went.
func (t *allocationTrace) print(out io.Writer) {
	if t == nil {
		return
	}
	fmt.Fprintln(out, "allocations traced in the steady phase, where their server time went:")
	if err := allocload.Breakdowns(t.rec.Spans()).Table(out); err != nil {
		fmt.Fprintln(out, "allocation trace:", err)
	}
}

// shutdown stops the provider; the spans are already recorded.
func (t *allocationTrace) shutdown() {
	if err := t.tp.Shutdown(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "sim: allocation trace:", err)
	}
}

// allocationRoots samples a root span when it is an allocation's gRPC
// server span (not the REST gateway's client span of the same name), and
// nothing else that starts a trace.
type allocationRoots struct{}

// ShouldSample implements sdktrace.Sampler.
func (allocationRoots) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	d := sdktrace.Drop
	if p.Name == allocload.AllocateSpan && p.Kind == trace.SpanKindServer {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}

// Description implements sdktrace.Sampler.
func (allocationRoots) Description() string { return "AllocationRoots" }
