package agent

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tetherhq/tether/events"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// allocationTrace is the trace the sending of an allocation to the game
// server joins: the command being handled when the agent learnt of it (the
// API's notice, in the allocation's trace), or else the trace its event
// was written in (the agent learnt of it by reading the stream).
func allocationTrace(ctx context.Context, e events.Envelope) trace.SpanContext {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc
	}
	carrier := propagation.MapCarrier{"traceparent": e.TraceParent, "tracestate": e.TraceState}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

// sendTraced sends view, the server as it was at a change, by send (a WatchGameServer stream's
// Send); when an allocation is in it (allocation valid), in a span
// "agent.notify" of the allocation's trace: the end of the path from the
// matchmaker's call to the game server.
func (gs *gameServer) sendTraced(send func(*sdkv1.GameServer) error, view *sdkv1.GameServer, allocation trace.SpanContext) error {
	if !allocation.IsValid() {
		return send(view)
	}
	_, span := gs.a.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), allocation), "agent.notify",
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attribute.String("tether.game_server", gs.name)))
	defer span.End()
	err := send(view)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}
