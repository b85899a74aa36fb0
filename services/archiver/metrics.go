package archiver

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The archiver's metrics (docs/observability.md lists them). Label values
// are bounded: outcome is one of three, kind one of the archived kinds.

// Outcomes of a pass, the values of tether_archiver_passes' outcome label.
const (
	outcomeDone   = "done"
	outcomeBusy   = "busy"
	outcomeFailed = "failed"
)

// metrics are the archiver's instruments.
type metrics struct {
	passes     metric.Int64Counter
	duration   metric.Float64Histogram
	segments   metric.Int64Counter
	aggregates metric.Int64Counter
	events     metric.Int64Counter
	bytes      metric.Int64Counter
	purged     metric.Int64Counter
	late       metric.Int64Counter
}

// newMetrics makes the instruments, every counter from zero.
func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	meter := mp.Meter("github.com/tetherhq/tether/services/archiver")
	m := &metrics{}
	var err error
	counters := []struct {
		c          *metric.Int64Counter
		name, desc string
		unit       string
	}{
		{&m.passes, "tether_archiver_passes", "Archiving passes, by outcome: done, busy (a rebuild, a check or another pass held the archive lock), failed (the next pass resumes).", ""},
		{&m.segments, "tether_archiver_segments", "Archive segments finished: written, verified, recorded, purged from the stream and removed from the views.", ""},
		{&m.aggregates, "tether_archiver_aggregates", "Aggregates archived, by kind (gs, gsess, fleet).", ""},
		{&m.events, "tether_archiver_events", "Events archived.", ""},
		{&m.bytes, "tether_archiver_segment_bytes", "Bytes of the archive segments finished.", "By"},
		{&m.purged, "tether_archiver_purged_events", "Events purged from the events stream, each archived first.", ""},
		{&m.late, "tether_archiver_late_events", "Events appended to an ended aggregate after the archiver read it: they stay in the stream, after the archived part.", ""},
	}
	for _, c := range counters {
		opts := []metric.Int64CounterOption{metric.WithDescription(c.desc)}
		if c.unit != "" {
			opts = append(opts, metric.WithUnit(c.unit))
		}
		if *c.c, err = meter.Int64Counter(c.name, opts...); err != nil {
			return nil, err
		}
	}
	if m.duration, err = meter.Float64Histogram("tether_archiver_pass_duration_seconds",
		metric.WithDescription("Time an archiving pass took."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	ctx := context.Background()
	for _, o := range []string{outcomeDone, outcomeBusy, outcomeFailed} {
		m.passes.Add(ctx, 0, metric.WithAttributes(attribute.String("outcome", o)))
	}
	for _, c := range []metric.Int64Counter{m.segments, m.events, m.bytes, m.purged, m.late} {
		c.Add(ctx, 0)
	}
	return m, nil
}

// pass counts a pass and its duration.
func (m *metrics) pass(ctx context.Context, res Result, err error) {
	outcome := outcomeDone
	switch {
	case err != nil:
		outcome = outcomeFailed
	case res.Busy:
		outcome = outcomeBusy
	}
	m.passes.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	m.duration.Record(ctx, res.Duration.Seconds())
}

// segment counts a finished segment.
func (m *metrics) segment(ctx context.Context, s *segment) {
	m.segments.Add(ctx, 1)
	m.bytes.Add(ctx, s.bytes)
	for _, ag := range s.aggs {
		m.aggregates.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", ag.kind)))
		m.events.Add(ctx, ag.events)
	}
}

// countPurged counts purged events.
func (m *metrics) countPurged(ctx context.Context, n uint64) { m.purged.Add(ctx, int64(n)) }

// countLate counts an event appended after its aggregate was read.
func (m *metrics) countLate(ctx context.Context) { m.late.Add(ctx, 1) }
