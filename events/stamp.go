package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
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
	// EventID, when set, is the first event's id instead of one derived
	// from the aggregate and the request id, and the others' ids derive
	// from it and their index. It is for a write whose id may not depend
	// on its aggregate: an allocation's retry may pick another server, and
	// must still write the first call's id, which the stream then keeps
	// once.
	EventID string
	// CorrelationID, when set, is the events' correlation id instead of
	// the request id or the first event's id: events that follow from
	// another keep its correlation (After).
	CorrelationID string
	// CausationID is the id of the event these were written because of, if
	// any.
	CausationID string
}

// After is the stamp of events producer writes because of cause: they act
// for cause's actor, at its time, for its request, in its trace and its
// correlation, and name it as their cause. An allocation's game session is
// created so.
func After(cause Envelope, producer string) Stamp {
	return Stamp{
		Producer: producer, Actor: cause.Actor, Time: cause.Time,
		RequestID: cause.RequestID, RequestFingerprint: cause.RequestFingerprint,
		TraceParent: cause.TraceParent, TraceState: cause.TraceState,
		CorrelationID: cause.CorrelationID, CausationID: cause.ID,
	}
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
		e.CausationID = s.CausationID
		switch {
		case s.EventID != "" && i == 0:
			e.ID = s.EventID
		case s.EventID != "":
			e.ID = DerivedID(s.EventID, strconv.Itoa(i))
		case s.RequestID != "":
			e.ID = DerivedID(aggregate, s.RequestID, strconv.Itoa(i))
		}
		if s.RequestID != "" {
			e.RequestID, e.RequestFingerprint = s.RequestID, s.RequestFingerprint
		}
		switch {
		case s.CorrelationID != "":
			e.CorrelationID = s.CorrelationID
		case s.RequestID != "":
			e.CorrelationID = s.RequestID
		case i == 0:
			e.CorrelationID = e.ID
		default:
			e.CorrelationID = out[0].ID
		}
		out[i] = e
	}
	return out
}

// DerivedID is an event id that derives from parts alone: the first 16
// bytes of the SHA-256 of the parts joined by NUL bytes, in hex. A writer
// that must write the same id whatever it decides gives one as
// Stamp.EventID.
func DerivedID(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:16])
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
