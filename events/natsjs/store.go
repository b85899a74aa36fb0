// Package natsjs is Tether's event store on NATS JetStream (DESIGN.md §4):
// one stream, one subject per aggregate instance, appends guarded by the
// subject's last sequence, and de-duplication by event id.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
)

// Headers written on every event message.
const (
	// HeaderType carries the event type, so consumers can filter without decoding.
	HeaderType = "Tether-Type"
	// HeaderTraceParent and HeaderTraceState carry the writer's W3C trace context.
	HeaderTraceParent = "traceparent"
	// HeaderTraceState accompanies HeaderTraceParent.
	HeaderTraceState = "tracestate"
)

// Options configure the store.
type Options struct {
	// Stream name; default events.StreamName.
	Stream string
	// Replicas of the stream; default 1 (3 in a NATS cluster).
	Replicas int
	// DuplicateWindow is how long event ids are remembered for
	// de-duplication; default 10m, covering an agent outbox's retry horizon.
	DuplicateWindow time.Duration
	// Storage; default file storage.
	Storage jetstream.StorageType
	// Logger; default discards.
	Logger *slog.Logger
}

// Store appends and reads events.
type Store struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string
	log    *slog.Logger
}

// New creates or updates the stream and returns a store over it.
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if opts.Stream == "" {
		opts.Stream = events.StreamName
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.DuplicateWindow <= 0 {
		opts.DuplicateWindow = 10 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        opts.Stream,
		Description: "Tether events: one subject per aggregate instance",
		Subjects:    []string{events.SubjectPrefix + ".>"},
		Storage:     opts.Storage,
		Replicas:    opts.Replicas,
		Duplicates:  opts.DuplicateWindow,
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
	})
	if err != nil {
		return nil, fmt.Errorf("natsjs: create stream %s: %w", opts.Stream, err)
	}
	return &Store{js: js, stream: stream, name: opts.Stream, log: opts.Logger}, nil
}

// Stream returns the underlying stream.
func (s *Store) Stream() jetstream.Stream { return s.stream }

// Append publishes events to one aggregate's subject. expected is the
// subject's last sequence as the caller decided on it (0: no event yet;
// events.AnySequence: no check); a mismatch returns an error wrapping
// events.ErrConflict. Later events of the same call are guarded by the
// previous one's sequence. It returns the stream sequence of the last event.
//
// Re-appending an already stored event id (a retry) is not a conflict: it
// returns the original sequence. JetStream checks the expected sequence
// before its de-duplication window, so a retry whose guard is now stale is
// refused as a conflict by the server; Append then looks for the event id
// among the subject's newer messages and, if it is there, treats the append
// as the duplicate it is.
func (s *Store) Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	if len(evs) == 0 {
		return 0, errors.New("natsjs: append of no events")
	}
	var last uint64
	for i, e := range evs {
		data, err := e.Marshal()
		if err != nil {
			return 0, err
		}
		msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, e.ID)
		msg.Header.Set(HeaderType, e.Type)
		if e.TraceParent != "" {
			msg.Header.Set(HeaderTraceParent, e.TraceParent)
			if e.TraceState != "" {
				msg.Header.Set(HeaderTraceState, e.TraceState)
			}
		}
		guard := expected
		if i > 0 {
			guard = last
		}
		if guard != events.AnySequence {
			msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(guard, 10))
		}
		ack, err := s.js.PublishMsg(ctx, msg)
		if err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
				apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
				seq, found, ferr := s.findStored(ctx, subject, guard, e.ID)
				if ferr != nil {
					return 0, ferr
				}
				if found {
					s.log.Debug("append was a retry of a stored event", "subject", subject, "event_id", e.ID, "sequence", seq)
					last = seq
					continue
				}
				return 0, fmt.Errorf("%w: %s expected at sequence %d: %s", events.ErrConflict, subject, guard, apiErr.Description)
			}
			return 0, fmt.Errorf("natsjs: append %s to %s: %w", e.Type, subject, err)
		}
		if ack.Duplicate {
			s.log.Debug("append was a duplicate", "subject", subject, "event_id", e.ID, "sequence", ack.Sequence)
		}
		last = ack.Sequence
	}
	return last, nil
}

// maxRetryScan bounds how many newer messages findStored looks through.
const maxRetryScan = 64

// findStored looks for an event id among the subject's messages after a
// sequence, returning its sequence if found.
func (s *Store) findStored(ctx context.Context, subject string, after uint64, id string) (uint64, bool, error) {
	seq := after + 1
	for range maxRetryScan {
		msg, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, fmt.Errorf("natsjs: look for event %s on %s: %w", id, subject, err)
		}
		if msg.Header.Get(jetstream.MsgIDHeader) == id {
			return msg.Sequence, true, nil
		}
		seq = msg.Sequence + 1
	}
	return 0, false, nil
}

// LastSequence returns the sequence of the subject's last event, 0 if none.
func (s *Store) LastSequence(ctx context.Context, subject string) (uint64, error) {
	msg, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("natsjs: last message of %s: %w", subject, err)
	}
	return msg.Sequence, nil
}

// StreamLastSequence returns the stream's last sequence.
func (s *Store) StreamLastSequence(ctx context.Context) (uint64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("natsjs: stream info: %w", err)
	}
	return info.State.LastSeq, nil
}

// History returns the events on subject (wildcards allowed) with sequence
// >= from, in order, each with its Sequence set. It reads with direct gets
// (one per event), which suits aggregate histories of tens to thousands of
// events. An undecodable event is an error wrapping events.ErrUndecodable.
func (s *Store) History(ctx context.Context, subject string, from uint64) ([]events.Envelope, error) {
	out := []events.Envelope{}
	seq := max(from, 1)
	for {
		msg, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("natsjs: read %s from %d: %w", subject, seq, err)
		}
		env, err := events.Unmarshal(msg.Data)
		if err != nil {
			return nil, fmt.Errorf("sequence %d on %s: %w", msg.Sequence, msg.Subject, err)
		}
		env.Sequence = msg.Sequence
		out = append(out, env)
		seq = msg.Sequence + 1
	}
}
