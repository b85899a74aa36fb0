package agent

import (
	"context"
	"fmt"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tetherhq/tether/events"
)

// partialStore stores the first stored events of every append and then
// fails, as a conflict between two of them does.
type partialStore struct {
	eventStore
	stored int
}

func (p partialStore) Append(context.Context, string, uint64, ...events.Envelope) (uint64, error) {
	if p.stored == 0 {
		return 0, fmt.Errorf("stream away")
	}
	return 0, &events.PartialAppendError{Stored: p.stored, Err: events.ErrConflict}
}

// The published counter counts what reached the stream: the events an
// append stored before it failed too (nothing appends them again), none
// of an append that stored nothing (its retry counts them).
func TestCountingStoreCountsWhatAPartialAppendStored(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	published, err := meter.Int64Counter("published")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	evs := make([]events.Envelope, 3)
	if _, err := (countingStore{eventStore: partialStore{stored: 2}, published: published}).Append(ctx, "s", 0, evs...); err == nil {
		t.Fatal("the partial append succeeded")
	}
	if _, err := (countingStore{eventStore: partialStore{}, published: published}).Append(ctx, "s", 0, evs...); err == nil {
		t.Fatal("the failed append succeeded")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sum := rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Sum[int64])
	if got := sum.DataPoints[0].Value; got != 2 {
		t.Fatalf("counted %d events, want the 2 the partial append stored", got)
	}
}
