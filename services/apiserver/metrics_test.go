package apiserver_test

import (
	"context"
	"maps"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tetherhq/tether/services/apiserver"
	kit "github.com/tetherhq/tether/services/testkit/stack"
)

// allocationCounts reads tether_allocations by outcome.
func allocationCounts(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "tether_allocations" || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				if p.Attributes.Len() != 1 {
					t.Errorf("tether_allocations has labels %v, want the outcome alone", p.Attributes.ToSlice())
				}
				o, _ := p.Attributes.Value(attribute.Key("outcome"))
				out[o.AsString()] = p.Value
			}
		}
	}
	return out
}

// Every AllocateGameServer call is counted once, by an outcome of a fixed
// set, every outcome present from the first call on.
func TestAllocationsCountedByOutcome(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	k := kit.New(t, kit.WithProjector(), kit.WithAPI(1, func(_ *kit.Stack, a *apiserver.Options) { a.MeterProvider = meters }))
	s := &stack{Stack: k, t: t, base: "http://" + k.APIs[0].HTTPAddr()}
	s.createFleet("arena", fleetWithoutReplicas())
	// Two servers: a retry that comes before the views show the first
	// allocation takes the other, and the stream answers with the first.
	s.seedReady("arena", 2, 1, map[string]string{"mode": "ranked"})

	calls := []struct {
		path string
		body map[string]any
		want int
	}{
		{"/v1/fleets/arena/gameServers:allocate", map[string]any{"requestId": "match-1"}, http.StatusOK},
		{"/v1/fleets/arena/gameServers:allocate", map[string]any{"requestId": "match-1"}, http.StatusOK}, // a retry
		{"/v1/fleets/arena/gameServers:allocate", map[string]any{"selector": map[string]any{"matchLabels": map[string]string{"mode": "casual"}}},
			http.StatusTooManyRequests},
		{"/v1/fleets/nope/gameServers:allocate", map[string]any{}, http.StatusNotFound},
		{"/v1/fleets/arena/gameServers:allocate", map[string]any{"scheduling": "RANDOM"}, http.StatusBadRequest},
	}
	for _, c := range calls {
		if r := s.do(http.MethodPost, c.path, c.body); r.status != c.want {
			t.Fatalf("POST %s %v: %d %v, want %d", c.path, c.body, r.status, r.body, c.want)
		}
	}
	want := map[string]int64{
		apiserver.OutcomeAllocated: 1, apiserver.OutcomeRepeated: 1, apiserver.OutcomeExhausted: 1,
		apiserver.OutcomeNotFound: 1, apiserver.OutcomeInvalid: 1,
		apiserver.OutcomeContended: 0, apiserver.OutcomeUnavailable: 0, apiserver.OutcomeTimeout: 0,
		apiserver.OutcomeCanceled: 0, apiserver.OutcomeError: 0,
	}
	if got := allocationCounts(t, reader); !maps.Equal(got, want) {
		t.Fatalf("tether_allocations_total by outcome = %v, want %v", got, want)
	}
}
