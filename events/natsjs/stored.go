package natsjs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
)

// StoredMessage is one event message as the stream stored it, undecoded:
// what an archive segment keeps of it (events/archive.Record).
type StoredMessage struct {
	// Sequence is its stream sequence.
	Sequence uint64
	// Subject is its aggregate's subject.
	Subject string
	// Time is when the stream stored it.
	Time time.Time
	// Header holds every header it was stored with (the event type, its
	// id, the writer's signature, the trace context, the append's guard).
	Header nats.Header
	// Data is the encoded envelope, byte for byte.
	Data []byte
}

// Stored returns the messages on subject (no wildcards) with sequences
// from from to to, inclusive, in order, as the stream's leader holds them:
// headers as stored (not a direct get's, which adds its own) and data byte
// for byte, undecoded and unverified. Reading the leader, not a replica,
// it misses nothing the stream had stored when it asked. It costs one
// request a message: for the archiver, not for hot paths.
func (s *Store) Stored(ctx context.Context, subject string, from, to uint64) ([]StoredMessage, error) {
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	var out []StoredMessage
	for next := max(from, 1); next <= to; {
		m, found, err := s.leaderGet(ctx, jsclient.MsgRequest{Seq: next, NextFor: subject})
		if err != nil {
			return nil, fmt.Errorf("natsjs: read %s from %d: %w", subject, next, err)
		}
		if !found || m.Sequence > to {
			break
		}
		out = append(out, StoredMessage{Sequence: m.Sequence, Subject: subject, Time: m.Time, Header: m.Header, Data: m.Data})
		next = m.Sequence + 1
	}
	return out, nil
}

// Decode decodes a stored message, as read from the stream or kept by an
// archive segment (events/archive.Record has the same fields), the way the
// store's own reads decode: its Sequence set and, when the store verifies
// signatures (Options.Verifier), its Writer from the message's signature
// headers, which a segment keeps byte for byte. Errors wrap
// events.ErrUndecodable for data that is not an envelope.
func (s *Store) Decode(m StoredMessage) (events.Envelope, error) {
	return s.open(m.Data, m.Subject, m.Header, m.Sequence)
}

// FirstEvent returns the first event stored on subject (no wildcards) as
// the stream's leader holds it, or ok=false when it holds none (the
// subject has no events, or they were purged). A replica behind the
// leader would answer that a subject written a moment ago has none.
func (s *Store) FirstEvent(ctx context.Context, subject string) (events.Envelope, bool, error) {
	if err := checkSubject(subject); err != nil {
		return events.Envelope{}, false, err
	}
	m, found, err := s.leaderGet(ctx, jsclient.MsgRequest{Seq: 1, NextFor: subject})
	if err != nil {
		return events.Envelope{}, false, fmt.Errorf("natsjs: first event of %s from the stream's leader: %w", subject, err)
	}
	if !found {
		return events.Envelope{}, false, nil
	}
	e, err := s.open(m.Data, m.Subject, m.Header, m.Sequence)
	return e, err == nil, err
}

// LeaderLastSequence returns the sequence of the last message on subject
// (a wildcard: of the messages it matches) as the stream's leader holds
// it, 0 if it has none. Unlike LastSequence, a replica that is behind
// cannot answer it: for a caller that acts on the subject's end (the
// archiver, before it purges; the API, before it writes).
func (s *Store) LeaderLastSequence(ctx context.Context, subject string) (uint64, error) {
	if rest, ok := strings.CutPrefix(subject, events.SubjectPrefix+"."); !ok || rest == "" || strings.ContainsAny(subject, " \t\r\n") {
		return 0, fmt.Errorf("natsjs: %q is not an event subject under %s", subject, events.SubjectPrefix)
	}
	m, found, err := s.leaderGet(ctx, jsclient.MsgRequest{LastFor: subject})
	if err != nil {
		return 0, fmt.Errorf("natsjs: last event of %s from the stream's leader: %w", subject, err)
	}
	if !found {
		return 0, nil
	}
	return m.Sequence, nil
}
