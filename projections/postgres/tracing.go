package postgres

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceApplied adds, to the trace of each event of a committed batch whose
// writer's trace is sampled, a span "projector.apply" from the batch's
// start to its commit: how long the event took to reach the views, in the
// trace of the call that wrote it (an allocation's, say). Events of
// unsampled traces, the usual case without an exporter, cost one header
// parse each. The batch's own span links to the events' traces
// (traceLinks).
func (p *Projector) traceApplied(ctx context.Context, msgs []jetstream.Msg, start, committed time.Time) {
	prop := propagation.TraceContext{}
	for _, m := range msgs {
		h := m.Headers()
		tp := h.Get("traceparent")
		if tp == "" {
			continue
		}
		parent := prop.Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": h.Get("tracestate")})
		if !trace.SpanContextFromContext(parent).IsSampled() {
			continue
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		_, span := p.tracer.Start(parent, "projector.apply", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("tether.subject", m.Subject()), attribute.Int64("tether.sequence", int64(meta.Sequence.Stream)),
				attribute.String("tether.partition", p.opts.Partition)))
		span.End(trace.WithTimestamp(committed))
	}
}
