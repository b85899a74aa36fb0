package postgres

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// traceApplied adds, to the trace of each event of a committed batch whose
// writer's trace is sampled (traces, eventTraces), a span
// "projector.apply" from the batch's start to its commit: how long the
// event took to reach the views, in the trace of the call that wrote it
// (an allocation's, say). Events of unsampled traces, the usual case
// without an exporter, get none. The batch's own span links to the
// events' traces (traceLinks).
func (p *Projector) traceApplied(ctx context.Context, msgs []jetstream.Msg, traces []trace.SpanContext, start, committed time.Time) {
	for i, sc := range traces {
		if !sc.IsSampled() {
			continue
		}
		m := msgs[i]
		attrs := []attribute.KeyValue{attribute.String("tether.subject", m.Subject()), attribute.String("tether.partition", p.opts.Partition)}
		if meta, err := m.Metadata(); err == nil { // a JetStream delivery always has it
			attrs = append(attrs, attribute.Int64("tether.sequence", int64(meta.Sequence.Stream)))
		}
		_, span := p.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), "projector.apply", trace.WithTimestamp(start),
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(committed))
	}
}
