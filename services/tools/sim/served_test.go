package sim

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tetherhq/tether/services/tools/allocload"
)

// TestQuantileSinceIsTheBucketHoldingIt: a quantile of what was recorded
// since an earlier reading is the upper bound of the bucket that holds it,
// what was recorded before does not count, and a value past the last bound
// reads as that bound negated.
func TestQuantileSinceIsTheBucketHoldingIt(t *testing.T) {
	bounds := []float64{1, 2, 5, 10}
	earlier := histogram{count: 50, bounds: bounds, counts: []uint64{0, 0, 0, 50, 0}} // 50 between 5 and 10, before
	// Since: 90 in (0,1], 9 in (2,5], 1 in (5,10].
	h := histogram{count: 150, bounds: bounds, counts: []uint64{90, 0, 9, 51, 0}}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 1}, {0.9, 1}, {0.91, 5}, {0.99, 5}, {1, 10}} {
		if got := h.quantileSince(earlier, c.q); got != c.want {
			t.Errorf("q%.2f = %v, want %v", c.q, got, c.want)
		}
	}
	over := histogram{count: 51, bounds: bounds, counts: []uint64{0, 0, 0, 50, 1}}
	if got := over.quantileSince(earlier, 1); got != -10 {
		t.Errorf("max past the last bound = %v, want -10", got)
	}
	if got := earlier.quantileSince(earlier, 0.99); got != 0 {
		t.Errorf("nothing since: %v, want 0", got)
	}
}

// TestServedAllocationsAreReadApart: the served figures take the
// AllocateGameServer calls of otelgrpc's histogram, in the simulation's
// buckets, and leave the other methods out.
func TestServedAllocationsAreReadApart(t *testing.T) {
	ctx := context.Background()
	w := &world{meter: sdkmetric.NewManualReader()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(w.meter), servedView())
	h, err := mp.Meter("otelgrpc").Float64Histogram(rpcServerCallDuration, metric.WithUnit("s"))
	if err != nil {
		t.Fatal(err)
	}
	alloc := metric.WithAttributes(attribute.String("rpc.method", "tether.v1.AllocationService/AllocateGameServer"))
	other := metric.WithAttributes(attribute.String("rpc.method", "tether.v1.FleetService/ListFleets"))
	h.Record(ctx, 0.003, alloc) // before the reading: not counted
	before, err := w.readMeters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 98 {
		h.Record(ctx, 0.0035, alloc)
	}
	h.Record(ctx, 0.019, alloc)
	h.Record(ctx, 0.150, alloc)
	h.Record(ctx, 9, other)
	after, err := w.readMeters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := after.since(before).AllocationServed
	if want := (Latency{N: 100, P50: 4, P99: 20, Max: 150}); got != want {
		t.Fatalf("served %+v, want %+v", got, want)
	}
}

// TestAllocationTraceTakesTheServerSpansOwnSteps: the trace keeps an
// allocation's gRPC server span and its local children, and leaves out
// the REST gateway's client span of the same name, other roots, and spans
// that join from another process (a remote parent: the projector's).
func TestAllocationTraceTakesTheServerSpansOwnSteps(t *testing.T) {
	at := newAllocationTrace()
	defer at.shutdown()
	tr := at.provider().Tracer("test")
	ctx := context.Background()

	_, client := tr.Start(ctx, allocload.AllocateSpan, trace.WithSpanKind(trace.SpanKindClient))
	_, other := tr.Start(ctx, "tether.v1.FleetService/ListFleets", trace.WithSpanKind(trace.SpanKindServer))
	sctx, server := tr.Start(ctx, allocload.AllocateSpan, trace.WithSpanKind(trace.SpanKindServer))
	_, step := tr.Start(sctx, "events.append")
	remote := trace.ContextWithRemoteSpanContext(ctx, server.SpanContext())
	_, joined := tr.Start(remote, "projector.apply")
	for _, s := range []trace.Span{joined, step, server, other, client} {
		s.End()
	}
	var got []string
	for _, s := range at.rec.Spans() {
		got = append(got, s.Name())
	}
	want := []string{"events.append", allocload.AllocateSpan}
	if !slices.Equal(got, want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}
}
