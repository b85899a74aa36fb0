package promcheck

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/metric"
)

// Recorder is a meter provider that remembers every synchronous
// instrument made through it (counters, up-down counters, histograms,
// gauges), so that Touch can give each a sample. A counter shows in a
// scrape only once it has counted something, and some count what a test
// cannot easily cause (an outbox full, a dead letter): Touch makes the
// scrape show every instrument the running code registered, under the
// name the exporter gives it. Observable instruments report through their
// callbacks and need no touch.
type Recorder struct {
	metric.MeterProvider

	mu      sync.Mutex
	touches []func(context.Context)
}

// NewRecorder wraps a meter provider.
func NewRecorder(mp metric.MeterProvider) *Recorder { return &Recorder{MeterProvider: mp} }

// Meter returns the named meter, recording the instruments made with it.
func (r *Recorder) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return recordingMeter{Meter: r.MeterProvider.Meter(name, opts...), r: r}
}

// Touch adds 0 to every counter, up-down counter and gauge, and records 0
// in every histogram, made so far, with no attributes.
func (r *Recorder) Touch(ctx context.Context) {
	r.mu.Lock()
	touches := append([]func(context.Context){}, r.touches...)
	r.mu.Unlock()
	for _, t := range touches {
		t(ctx)
	}
}

func (r *Recorder) add(touch func(context.Context)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.touches = append(r.touches, touch)
}

// recordingMeter records the synchronous instruments a meter makes.
type recordingMeter struct {
	metric.Meter
	r *Recorder
}

// record remembers an instrument made without error and returns it.
func record[I any](r *Recorder, i I, err error, touch func(context.Context, I)) (I, error) {
	if err == nil {
		r.add(func(ctx context.Context) { touch(ctx, i) })
	}
	return i, err
}

func (m recordingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	i, err := m.Meter.Int64Counter(name, opts...)
	return record(m.r, i, err, func(ctx context.Context, i metric.Int64Counter) { i.Add(ctx, 0) })
}

func (m recordingMeter) Float64Counter(name string, opts ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	i, err := m.Meter.Float64Counter(name, opts...)
	return record(m.r, i, err, func(ctx context.Context, i metric.Float64Counter) { i.Add(ctx, 0) })
}

func (m recordingMeter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	i, err := m.Meter.Int64UpDownCounter(name, opts...)
	return record(m.r, i, err, func(ctx context.Context, i metric.Int64UpDownCounter) { i.Add(ctx, 0) })
}

func (m recordingMeter) Float64UpDownCounter(name string, opts ...metric.Float64UpDownCounterOption) (metric.Float64UpDownCounter, error) {
	i, err := m.Meter.Float64UpDownCounter(name, opts...)
	return record(m.r, i, err, func(ctx context.Context, i metric.Float64UpDownCounter) { i.Add(ctx, 0) })
}

func (m recordingMeter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	i, err := m.Meter.Int64Histogram(name, opts...)
	return record(m.r, i, err, func(ctx context.Context, i metric.Int64Histogram) { i.Record(ctx, 0) })
}

func (m recordingMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	i, err := m.Meter.Float64Histogram(name, opts...)
	return record(m.r, i, err, func(ctx context.Context, i metric.Float64Histogram) { i.Record(ctx, 0) })
}

func (m recordingMeter) Int64Gauge(name string, opts ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	i, err := m.Meter.Int64Gauge(name, opts...)
	return record(m.r, i, err, func(ctx context.Context, i metric.Int64Gauge) { i.Record(ctx, 0) })
}

func (m recordingMeter) Float64Gauge(name string, opts ...metric.Float64GaugeOption) (metric.Float64Gauge, error) {
	i, err := m.Meter.Float64Gauge(name, opts...)
	return record(m.r, i, err, func(ctx context.Context, i metric.Float64Gauge) { i.Record(ctx, 0) })
}
