package postgres

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// traceApplied adds, to the trace of each event this batch applied (after
// the checkpoint cp it started from) whose writer's trace is sampled
// (traces, eventTraces), a span "projector.apply" from the batch's start
// to its commit: how long the event took to reach the views, in the trace
// of the call that wrote it (an allocation's, say). Events of unsampled
// traces, the usual case without an exporter, get none. The batch's own
// span links to the events' traces (traceLinks).
func (p *Projector) traceApplied(ctx context.Context, msgs []jetstream.Msg, traces []trace.SpanContext, cp uint64, start, committed time.Time) {
	for i, sc := range traces {
		if !sc.IsSampled() {
			continue
		}
		m := msgs[i]
		meta, err := m.Metadata()
		if err != nil || meta.Sequence.Stream <= cp {
			continue // a redelivery this batch skipped (ApplyBatch read every message's metadata already)
		}
		_, span := p.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), "projector.apply", trace.WithTimestamp(start),
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attribute.String("tether.subject", m.Subject()),
				attribute.Int64("tether.sequence", int64(meta.Sequence.Stream)), attribute.String("tether.partition", p.opts.Partition)))
		span.End(trace.WithTimestamp(committed))
	}
}
