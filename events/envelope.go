package events

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// SchemaVersion is the envelope and payload schema version this build writes.
const SchemaVersion int32 = 1

// ErrUndecodable marks stored bytes that are not a valid envelope or whose
// payload type is unknown to this build: a poison event.
var ErrUndecodable = errors.New("events: undecodable event")

// UndecodableType is the Type of the envelope that stands for an
// undecodable stored message in a history (UndecodableAt).
const UndecodableType = "Undecodable"

// Envelope is one event with its metadata, as stored in the event stream.
type Envelope struct {
	// ID is unique per event and doubles as the store's de-duplication key.
	ID string
	// Type is the payload's message name, e.g. "FleetCreated".
	Type string
	// Aggregate is the resource name of the aggregate instance.
	Aggregate string
	// Time is when the fact happened, as seen by its producer.
	Time time.Time
	// Producer names the component that wrote it, e.g. "hosts/h1".
	Producer string
	// Actor is the principal on whose behalf it was written: the API's
	// caller once the API authenticates callers, else the producer. Empty on
	// events written before it existed.
	Actor string
	// RequestID is the API request id that caused it, if any.
	RequestID string
	// RequestFingerprint is the SHA-256 (hex) of the request's content,
	// set with RequestID: a retry that reuses the id with another content is
	// refused. Empty on events written before it existed.
	RequestFingerprint string
	// CorrelationID ties together the events of one logical operation.
	CorrelationID string
	// CausationID is the id of the event that caused this one, if any.
	CausationID string
	// TraceParent and TraceState carry the W3C trace context of the writer.
	TraceParent string
	// TraceState accompanies TraceParent.
	TraceState string
	// SchemaVersion is the version the producer wrote.
	SchemaVersion int32
	// Data is the payload, one of the messages of proto/tether/events/v1.
	Data proto.Message
	// Sequence is the stream sequence, set once stored (0 before).
	Sequence uint64
	// Writer is who signed the event, as the store that read it verified
	// the signature (see writers.go): empty when that store verifies no
	// signatures, UnverifiedWriter when the event carries no valid
	// signature of a known key, else the signer's principal ("controller",
	// "hosts/h1"). It is not stored in the envelope: the store derives it.
	Writer string
	// Subject is the stream subject the event was read from, set by the
	// store's reads and the projector (Decode); empty on an event not read
	// from the stream. It is not stored: a game server's fold refuses an
	// event read from another subject than the server's (ErrForeignSubject).
	Subject string
	// Undecodable is set, wrapping ErrUndecodable, on the envelope that
	// stands for a stored message that is not an event of its subject
	// (UndecodableAt). It is not stored either.
	Undecodable error
}

// UndecodableAt returns the envelope that stands for an undecodable message
// stored at seq on subject (err wraps ErrUndecodable): its Type is
// UndecodableType, its Aggregate the one the subject names ("" for none),
// its Data an empty message, and Undecodable says why. A history keeps it
// in its place, so a writer guards its append on the message's sequence,
// as on any other, while every fold leaves it out (Skipped): one bad
// message on a subject stops none of its readers.
func UndecodableAt(subject string, seq uint64, err error) Envelope {
	if !errors.Is(err, ErrUndecodable) {
		err = fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	name, _ := NameFromSubject(subject) // "" when the subject names no aggregate
	return Envelope{Type: UndecodableType, Aggregate: name, Subject: subject, Sequence: seq, Data: &emptypb.Empty{}, Undecodable: err}
}

// Skipped reports whether err is a fold's refusal of an event that a
// reader leaves out and goes on past, as the projector dead-letters it: an
// event its writer may not write (ErrUnauthorizedWriter), or one that is
// not an event of its subject (ErrUndecodable).
func Skipped(err error) bool {
	return errors.Is(err, ErrUnauthorizedWriter) || errors.Is(err, ErrUndecodable)
}

// New wraps a payload for an aggregate with a fresh random id.
func New(aggregate string, at time.Time, data proto.Message) Envelope {
	return Envelope{
		ID:            NewEventID(),
		Type:          TypeOf(data),
		Aggregate:     aggregate,
		Time:          at.UTC(),
		SchemaVersion: SchemaVersion,
		Data:          data,
	}
}

// TypeOf returns the event type name of a payload, e.g. "FleetCreated".
func TypeOf(data proto.Message) string {
	return string(data.ProtoReflect().Descriptor().Name())
}

// NewEventID returns a random 128-bit event id in hex.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error on supported platforms.
	return hex.EncodeToString(b[:])
}

// Marshal encodes the envelope for the store.
func (e Envelope) Marshal() ([]byte, error) {
	if e.Data == nil {
		return nil, fmt.Errorf("events: envelope %s has no payload", e.ID)
	}
	if got := TypeOf(e.Data); e.Type != got {
		// Unmarshal would refuse these bytes: do not write a poison event.
		return nil, fmt.Errorf("events: envelope %s says type %q but carries %q", e.ID, e.Type, got)
	}
	data, err := anypb.New(e.Data)
	if err != nil {
		return nil, fmt.Errorf("events: pack %s payload: %w", e.Type, err)
	}
	return proto.Marshal(&eventsv1.Envelope{
		Id:                 e.ID,
		Type:               e.Type,
		Aggregate:          e.Aggregate,
		OccurTime:          timestamppb.New(e.Time),
		Producer:           e.Producer,
		Actor:              e.Actor,
		RequestId:          e.RequestID,
		RequestFingerprint: e.RequestFingerprint,
		CorrelationId:      e.CorrelationID,
		CausationId:        e.CausationID,
		Traceparent:        e.TraceParent,
		Tracestate:         e.TraceState,
		SchemaVersion:      e.SchemaVersion,
		Data:               data,
	})
}

// Unmarshal decodes a stored envelope. Errors wrap ErrUndecodable.
func Unmarshal(b []byte) (Envelope, error) {
	var pb eventsv1.Envelope
	if err := proto.Unmarshal(b, &pb); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrUndecodable, err)
	}
	if pb.GetData() == nil {
		return Envelope{}, fmt.Errorf("%w: event %q has no payload", ErrUndecodable, pb.GetId())
	}
	data, err := pb.GetData().UnmarshalNew()
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: event %q payload %q: %v", ErrUndecodable, pb.GetId(), pb.GetData().GetTypeUrl(), err)
	}
	env := Envelope{
		ID:                 pb.GetId(),
		Type:               pb.GetType(),
		Aggregate:          pb.GetAggregate(),
		Time:               pb.GetOccurTime().AsTime(),
		Producer:           pb.GetProducer(),
		Actor:              pb.GetActor(),
		RequestID:          pb.GetRequestId(),
		RequestFingerprint: pb.GetRequestFingerprint(),
		CorrelationID:      pb.GetCorrelationId(),
		CausationID:        pb.GetCausationId(),
		TraceParent:        pb.GetTraceparent(),
		TraceState:         pb.GetTracestate(),
		SchemaVersion:      pb.GetSchemaVersion(),
		Data:               data,
	}
	if got := TypeOf(data); env.Type != got {
		return Envelope{}, fmt.Errorf("%w: event %q says type %q but carries %q", ErrUndecodable, env.ID, env.Type, got)
	}
	return env, nil
}

// Decode decodes a message stored on subject: Unmarshal, and the subject
// must be the subject of the envelope's aggregate (an event of another
// aggregate, or anything on a subject that names none, is undecodable
// there). Errors wrap ErrUndecodable.
func Decode(subject string, b []byte) (Envelope, error) {
	env, err := Unmarshal(b)
	if err != nil {
		return Envelope{}, err
	}
	name, err := NameFromSubject(subject)
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: event %s: %w", ErrUndecodable, env.ID, err)
	}
	if name != env.Aggregate {
		return Envelope{}, fmt.Errorf("%w: event %s on subject %s names aggregate %s", ErrUndecodable, env.ID, subject, env.Aggregate)
	}
	env.Subject = subject
	return env, nil
}
