package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
)

// Stamp is what a writer records on every event it writes: who wrote it,
// on whose behalf, when, for which request and in which trace. Every writer
// (the API, the allocator, the controller, the agents) wraps its decided
// events with Stamp.Envelopes, so the envelope is built in one place.
type Stamp struct {
	// Producer is the component: "apiservers/<replica>",
	// "controllers/<id>", "hosts/<id>".
	Producer string
	// Actor is the principal on whose behalf the events are written; empty
	// means the producer itself (ActorFrom reads it from a context).
	Actor string
	// Time is when the facts happened, as the producer sees it.
	Time time.Time
	// RequestID is the API request that caused the events, if any. With
	// one, event ids derive from it, so a retried request writes the same
	// ids and the store keeps one copy.
	RequestID string
	// RequestFingerprint is the digest of the request's content, set with
	// RequestID.
	RequestFingerprint string
	// TraceParent and TraceState are the writer's W3C trace context.
	TraceParent, TraceState string
}

// Envelopes wraps payloads decided on one aggregate. The events of one
// call share a correlation id: the request id if there is one, else the
// first event's id.
func (s Stamp) Envelopes(aggregate string, msgs []proto.Message) []Envelope {
	out := make([]Envelope, len(msgs))
	actor := s.Actor
	if actor == "" {
		actor = s.Producer
	}
	for i, m := range msgs {
		e := New(aggregate, s.Time, m)
		e.Producer, e.Actor = s.Producer, actor
		e.TraceParent, e.TraceState = s.TraceParent, s.TraceState
		switch {
		case s.RequestID != "":
			sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d", aggregate, s.RequestID, i))
			e.ID = hex.EncodeToString(sum[:16])
			e.RequestID, e.RequestFingerprint, e.CorrelationID = s.RequestID, s.RequestFingerprint, s.RequestID
		case i == 0:
			e.CorrelationID = e.ID
		default:
			e.CorrelationID = out[0].ID
		}
		out[i] = e
	}
	return out
}

// actorKey keys the actor in a context.
type actorKey struct{}

// WithActor returns a context that carries the principal a request acts
// for; the writers' stamps record it as the events' actor.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the principal ctx carries, or "" if none.
func ActorFrom(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}
