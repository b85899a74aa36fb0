// Package natsjs is Tether's event store on NATS JetStream
// (docs/architecture.md, "Streams and buckets"):
// one stream (events.StreamName) capturing every subject under
// events.SubjectPrefix, one subject per aggregate instance, appends guarded
// by the subject's last sequence, and de-duplication by event id.
//
// It uses the nats.go jetstream package. Reads of single messages use direct
// gets (the stream allows them); histories use short-lived ephemeral
// consumers. The JetStream calls it shares with the other NATS adapters
// (publishes and reads of a stream's leader that wait out an election,
// stream setup) are in jsclient, below it; this package is the event store
// only.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
)

// Headers written on every event message, besides jetstream.MsgIDHeader
// (the event id).
const (
	// HeaderType carries the event type, so consumers can filter without decoding.
	HeaderType = "Tether-Type"
	// HeaderTraceParent carries the writer's W3C trace context.
	HeaderTraceParent = "traceparent"
	// HeaderTraceState accompanies HeaderTraceParent.
	HeaderTraceState = "tracestate"
)

// DefaultDuplicateWindow is the default of Options.DuplicateWindow.
const DefaultDuplicateWindow = 10 * time.Minute

// Options configure the store.
type Options struct {
	// Replicas of the stream; default 1 (3 in a NATS cluster). Replicas,
	// DuplicateWindow and Storage configure the stream Setup creates; New
	// opens it as it is.
	Replicas int
	// DuplicateWindow is how long JetStream remembers event ids for
	// de-duplication; default DefaultDuplicateWindow, covering an agent
	// outbox's retry horizon.
	DuplicateWindow time.Duration
	// Storage of the stream; default (the zero value) jetstream.FileStorage.
	Storage jetstream.StorageType
	// UnavailableWait is how long an append retries while the stream cannot
	// take it (no leader: a NATS election after a node is lost takes 4-9 s;
	// or no connection), within its context; default jsclient.DefaultUnavailableWait.
	// Negative: no retry, for a writer with a fallback of its own (the
	// agent's outbox). An append that gave up wraps events.ErrUnavailable.
	UnavailableWait time.Duration
	// Signer, when set, signs every appended event (HeaderSigner,
	// HeaderSignature) with the writer's NATS nkey, so readers that verify
	// know who wrote it (natsauth).
	Signer Signer
	// Verifier, when set, verifies the signatures of the events the store
	// reads and sets their Envelope.Writer, which the folds check.
	Verifier *Verifier
	// Logger; default discards.
	Logger *slog.Logger
	// TracerProvider traces appends (a span "events.append" each, in the
	// caller's trace); default no-op.
	TracerProvider trace.TracerProvider
	// MeterProvider counts the undecodable messages reads skip
	// (tether_events_undecodable_skipped); default no-op.
	MeterProvider metric.MeterProvider
}

func (o *Options) setDefaults() {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
	}
	if o.UnavailableWait == 0 {
		o.UnavailableWait = jsclient.DefaultUnavailableWait
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a bad option.
func (o *Options) Validate() error {
	switch {
	case o.Replicas < 1 || o.Replicas > 5:
		return fmt.Errorf("natsjs: replicas %d, want 1 to 5", o.Replicas)
	case o.DuplicateWindow < 0:
		return fmt.Errorf("natsjs: negative duplicate window %s", o.DuplicateWindow)
	case o.Storage != jetstream.FileStorage && o.Storage != jetstream.MemoryStorage:
		return fmt.Errorf("natsjs: unknown storage type %d", o.Storage)
	}
	return nil
}

// Store appends events to the stream and reads them back. It is safe for
// concurrent use.
type Store struct {
	js       jetstream.JetStream
	stream   jetstream.Stream
	wait     time.Duration // Options.UnavailableWait
	signer   Signer
	verifier *Verifier
	log      *slog.Logger
	tracer   trace.Tracer
	skips    *skips
	// pull asks a history consumer for up to n of its messages, at once
	// or waiting up to historyRetryWait (pullHistory; a test's stand-in
	// for a server that answers a no-wait pull with nothing).
	pull func(cons jetstream.Consumer, n int, wait bool) (jetstream.MessageBatch, error)
}

// Setup creates the events stream, or updates its configuration where it
// differs (jsclient.EnsureStream): `tether migrate` runs it. The stream denies
// deletes and has no limits: no event leaves it but through a purge, and
// only the archiver purges (PurgeSubject), once the subject's events are
// durably in an archive segment recorded in the archive catalog.
//
// A stream set up by an older version denies purges, and nats-server
// cannot lift that in place: Setup leaves it so, with a warning, and the
// archiver archives nothing there (ErrPurgeDenied) until the stream is
// recreated with its events (docs/operations.md, "Archiving on a stream
// that denies purges").
func Setup(ctx context.Context, js jetstream.JetStream, opts Options) error {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return err
	}
	s, err := jsclient.EnsureStream(ctx, js, streamConfig(opts))
	if err != nil {
		return fmt.Errorf("natsjs: set up stream %s: %w", events.StreamName, err)
	}
	if s.CachedInfo().Config.DenyPurge {
		opts.Logger.WarnContext(ctx, "the events stream denies purges (set up by an older version), and NATS cannot lift that in place: "+
			"nothing will be archived until it is recreated with its events",
			"stream", events.StreamName)
	}
	return nil
}

// ErrPurgeDenied is the error of an archiving step on an events stream
// that denies purges: one set up before archiving existed, which
// nats-server cannot change in place (Setup).
var ErrPurgeDenied = errors.New("the events stream denies purges (set up by an older version of Tether): " +
	"recreate it with its events to archive (docs/operations.md, \"Archiving on a stream that denies purges\")")

// PurgesAllowed reports whether the events stream allows purges, as its
// configuration says now: an error wrapping ErrPurgeDenied if it does not.
func (s *Store) PurgesAllowed(ctx context.Context) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("natsjs: stream info: %w", err)
	}
	if info.Config.DenyPurge {
		return fmt.Errorf("natsjs: %w", ErrPurgeDenied)
	}
	return nil
}

// New returns a store over the events stream. It does not create the
// stream: a missing one is an error wrapping jsclient.ErrNotSetUp (Setup creates it).
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, events.StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, jsclient.NotSetUp("stream " + events.StreamName)
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: stream %s: %w", events.StreamName, err)
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	sk, err := newSkips(opts.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("natsjs: metrics: %w", err)
	}
	return &Store{js: js, stream: stream, pull: pullHistory, wait: opts.UnavailableWait, signer: opts.Signer, verifier: opts.Verifier, log: opts.Logger,
		tracer: tp.Tracer("github.com/tetherhq/tether/events/natsjs"), skips: sk}, nil
}

// streamConfig is the events stream's configuration under opts.
func streamConfig(opts Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        events.StreamName,
		Description: "Tether events: one subject per aggregate instance",
		Subjects:    []string{events.SubjectPrefix + ".>"},
		Storage:     opts.Storage,
		Replicas:    opts.Replicas,
		Duplicates:  opts.DuplicateWindow,
		// Single events are never deleted: an aggregate's history is
		// complete or archived whole. Purges are allowed for the archiver
		// alone (purge.go), which purges a subject only up to the last
		// sequence of a segment it has stored, verified and recorded, so
		// no event leaves the stream without being archived first. NATS
		// permissions keep the purge API from the other components
		// (natsauth).
		DenyDelete:  true,
		DenyPurge:   false,
		AllowDirect: true,
	}
}

// Stream returns the underlying JetStream stream, for readers with needs
// the store does not cover (e.g. the projector's durable consumers).
func (s *Store) Stream() jetstream.Stream { return s.stream }

// Append publishes events to one aggregate's subject, in order, each
// synchronously, and returns the stream sequence of the last one.
//
// expected is the subject's last sequence as the caller decided on it: 0
// means the subject must have no event yet, events.AnySequence disables the
// check. If the subject's last sequence differs, Append returns an error
// wrapping events.ErrConflict and the caller re-reads and decides again.
// Each later event of the call is guarded by the previous one's sequence, so
// the events land contiguously on the subject; the call is not atomic,
// though: if a later event conflicts, the earlier ones stay stored.
//
// Re-appending an already stored event (a retry of the same call, same
// event ids and expected sequence) is not an error and returns the original
// sequences, whether or not another writer appended in between.
//
// How: JetStream de-duplicates by the Nats-Msg-Id header within the
// duplicate window and answers with the original sequence. But a standalone
// (R1) server checks Nats-Expected-Last-Subject-Sequence before it looks at
// its de-duplication table (nats-server 2.15 stream.go; TestServerOrder pins
// this down), so a retry whose guard is now stale is refused with error
// 10071 rather than acknowledged as a duplicate. Clustered streams (R>1)
// check duplicates first, at the cluster level. So on a conflict Append
// reads the first message on the subject after the guard: if the original
// call stored the event, it stored it exactly there, because it was guarded
// by the same sequence. Same id there means a retry; anything else is a
// genuine conflict. A genuine conflict thus costs one direct get. With a
// guard this also holds after the duplicate window has passed; with
// events.AnySequence only the window protects against a second copy.
func (s *Store) Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	if err := checkSubject(subject); err != nil {
		return 0, err
	}
	if len(evs) == 0 {
		return 0, fmt.Errorf("natsjs: append to %s: no events", subject)
	}
	ctx, span := s.startAppend(ctx, subject, evs[0].Type, len(evs))
	seq, err := s.appendAll(ctx, subject, expected, evs)
	endSpan(span, err)
	return seq, err
}

// appendAll is Append's work, in its span.
func (s *Store) appendAll(ctx context.Context, subject string, expected uint64, evs []events.Envelope) (uint64, error) {
	// Encode everything first: a bad envelope must not leave its
	// predecessors stored.
	msgs := make([]*nats.Msg, len(evs))
	for i, e := range evs {
		m, err := s.message(subject, e)
		if err != nil {
			return 0, err
		}
		msgs[i] = m
	}

	guard := expected
	for i, msg := range msgs {
		setGuard(msg, guard)
		seq, err := s.publish(ctx, msg, guard, evs[i])
		if err != nil {
			if i > 0 {
				return 0, &events.PartialAppendError{Stored: i, Err: err}
			}
			return 0, err
		}
		guard = seq
	}
	return guard, nil
}

// TryAppend appends one event guarded by expected, like Append, but on a
// failed guard it returns events.ErrConflict at once, without looking
// whether the event was stored by an earlier try: for callers that read
// the subject's last event after a conflict anyway (allocation), that look
// is a second read of the same thing, and on a large stream it is the
// expensive part of a conflict. duplicate is true when the stream already
// held an event with this id (within its duplicate window, on any
// subject): seq is then that event's.
func (s *Store) TryAppend(ctx context.Context, subject string, expected uint64, e events.Envelope) (seq uint64, duplicate bool, err error) {
	if err := checkSubject(subject); err != nil {
		return 0, false, err
	}
	msg, err := s.message(subject, e)
	if err != nil {
		return 0, false, err
	}
	setGuard(msg, expected)
	ctx, span := s.startAppend(ctx, subject, e.Type, 1)
	ack, err := s.publishMsg(ctx, msg)
	endSpan(span, err)
	if err == nil {
		return ack.Sequence, ack.Duplicate, nil
	}
	if isConflict(err) {
		return 0, false, fmt.Errorf("%w: %s is no longer at sequence %d: %w", events.ErrConflict, subject, expected, err)
	}
	return 0, false, fmt.Errorf("natsjs: append %s %s to %s: %w", e.Type, e.ID, subject, err)
}

// setGuard makes msg's append conditional on its subject's last sequence
// being guard, unless guard is events.AnySequence. The first event of a
// game server on a host subject (guard 0) is conditional on every host
// subject of its name being empty (Nats-Expected-Last-Subject-Sequence-Subject):
// a name has one server, whichever host it was placed on, as it had when
// its subject did not name the host.
func setGuard(msg *nats.Msg, guard uint64) {
	if guard == events.AnySequence {
		return
	}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(guard, 10))
	if guard != 0 {
		return
	}
	if _, hosted := events.SubjectHost(msg.Subject); !hosted {
		return
	}
	if name, err := events.NameFromSubject(msg.Subject); err == nil {
		msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, events.GameServerHostSubjects(name))
	}
}

// publish appends one event guarded by guard and returns its sequence.
func (s *Store) publish(ctx context.Context, msg *nats.Msg, guard uint64, e events.Envelope) (uint64, error) {
	ack, err := s.publishMsg(ctx, msg)
	if err == nil {
		if ack.Duplicate {
			s.log.Debug("append was a duplicate", "subject", msg.Subject, "event_id", e.ID, "sequence", ack.Sequence)
		}
		return ack.Sequence, nil
	}
	if !isConflict(err) {
		return 0, fmt.Errorf("natsjs: append %s %s to %s: %w", e.Type, e.ID, msg.Subject, err)
	}
	seq, found, ferr := s.storedAfter(ctx, msg.Subject, guard, e.ID)
	if ferr != nil {
		return 0, ferr
	}
	if found {
		s.log.Debug("append was a retry of a stored event", "subject", msg.Subject, "event_id", e.ID, "sequence", seq)
		return seq, nil
	}
	return 0, fmt.Errorf("%w: %s is no longer at sequence %d: %w", events.ErrConflict, msg.Subject, guard, err)
}

// publishMsg publishes msg, retrying for up to the store's wait while the
// stream cannot take it (jsclient.PublishWaiting).
func (s *Store) publishMsg(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	ack, err := jsclient.PublishWaiting(ctx, s.js, msg, s.wait)
	if err == nil && ack.Duplicate {
		s.log.Debug("append was a duplicate", "subject", msg.Subject, "sequence", ack.Sequence)
	}
	return ack, err
}

// message encodes an event as the message that stores it, signed when
// the store has a Signer.
func (s *Store) message(subject string, e events.Envelope) (*nats.Msg, error) {
	data, err := e.Marshal()
	if err != nil {
		return nil, fmt.Errorf("natsjs: append to %s: %w", subject, err)
	}
	if e.ID == "" {
		return nil, fmt.Errorf("natsjs: append %s to %s: event has no id", e.Type, subject)
	}
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, e.ID)
	h.Set(HeaderType, e.Type)
	if e.TraceParent != "" {
		h.Set(HeaderTraceParent, e.TraceParent)
	}
	if e.TraceState != "" {
		h.Set(HeaderTraceState, e.TraceState)
	}
	if s.signer != nil {
		if err := sign(s.signer, subject, data, h); err != nil {
			return nil, fmt.Errorf("natsjs: sign %s %s: %w", e.Type, e.ID, err)
		}
	}
	return &nats.Msg{Subject: subject, Data: data, Header: h}, nil
}

// isConflict reports whether a publish error is a failed expected-sequence
// check: 10071 (wrong last sequence), or 10164 (the same on a replicated
// stream while another write to the subject is in flight).
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// storedAfter reports whether the first message on subject after sequence
// after is the event id, and its sequence if so.
func (s *Store) storedAfter(ctx context.Context, subject string, after uint64, id string) (uint64, bool, error) {
	m, found, err := s.leaderGet(ctx, jsclient.MsgRequest{Seq: after + 1, NextFor: subject})
	if err != nil {
		return 0, false, fmt.Errorf("natsjs: look for event %s on %s after a conflict: %w", id, subject, err)
	}
	if !found || m.Header.Get(jetstream.MsgIDHeader) != id {
		return 0, false, nil
	}
	return m.Sequence, true, nil
}

// leaderGet reads one event from the events stream's leader (jsclient.LeaderGet):
// after a conflict, a write of ours that was stored a moment ago must not
// be missed, and CurrentHistory must not stop short.
func (s *Store) leaderGet(ctx context.Context, r jsclient.MsgRequest) (jsclient.LeaderMessage, bool, error) {
	return jsclient.LeaderGetWaiting(ctx, s.js.Conn(), events.StreamName, r, s.wait)
}

// CurrentHistory is History checked against the stream's leader: it
// returns every event on subject (no wildcards) from sequence from that
// the leader held when CurrentHistory asked it. History's direct gets and
// consumer may be answered by a replica behind the leader (catching up,
// or cut off from the others in a minority partition), and a caller that
// decides on absence (no such server yet, an event the state refuses)
// must not decide on a replica's past. The events such a replica missed
// are read from the leader one by one. It costs History plus one request
// to the leader.
func (s *Store) CurrentHistory(ctx context.Context, subject string, from uint64) ([]events.Envelope, error) {
	return s.currentHistory(ctx, subject, from, s.History)
}

// currentHistory completes what read returns from the stream's leader.
func (s *Store) currentHistory(ctx context.Context, subject string, from uint64,
	read func(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)) ([]events.Envelope, error) {
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	hist, err := read(ctx, subject, from)
	if err != nil {
		return nil, err
	}
	last, found, err := s.leaderGet(ctx, jsclient.MsgRequest{LastFor: subject})
	if err != nil {
		return nil, fmt.Errorf("natsjs: last event of %s from the stream's leader: %w", subject, err)
	}
	done := max(from, 1) - 1 // the sequence read up to
	if len(hist) > 0 {
		done = hist[len(hist)-1].Sequence
	}
	for found && done < last.Sequence {
		m, ok, err := s.leaderGet(ctx, jsclient.MsgRequest{Seq: done + 1, NextFor: subject})
		if err != nil {
			return nil, fmt.Errorf("natsjs: read %s after %d from the stream's leader: %w", subject, done, err)
		}
		if !ok {
			return nil, fmt.Errorf("natsjs: read %s after %d from the stream's leader: its last event %d is gone", subject, done, last.Sequence)
		}
		hist = append(hist, s.read(ctx, m.Data, subject, m.Header, m.Sequence))
		done = m.Sequence
	}
	return hist, nil
}

// checkSubject refuses subjects the stream does not capture, and wildcards,
// which cannot be published to.
func checkSubject(subject string) error {
	rest, ok := strings.CutPrefix(subject, events.SubjectPrefix+".")
	if !ok || rest == "" || strings.ContainsAny(subject, "*> \t\r\n") {
		return fmt.Errorf("natsjs: %q is not an event subject under %s", subject, events.SubjectPrefix)
	}
	return nil
}

// LastSequence returns the sequence of the subject's last event, 0 if it has
// none. It is one direct get.
func (s *Store) LastSequence(ctx context.Context, subject string) (uint64, error) {
	msg, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("natsjs: last event of %s: %w", subject, err)
	}
	return msg.Sequence, nil
}

// Event returns the event stored at a stream sequence: one direct get,
// and, if that finds nothing, a read of the stream's leader. Callers ask
// for a sequence the stream acknowledged (a retried request's first
// event), which a replica behind the leader may not hold yet.
func (s *Store) Event(ctx context.Context, seq uint64) (events.Envelope, error) {
	msg, err := s.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		m, found, lerr := s.leaderGet(ctx, jsclient.MsgRequest{Seq: seq})
		switch {
		case lerr != nil:
			err = fmt.Errorf("%w (and from the stream's leader: %w)", err, lerr)
		case found && m.Sequence == seq:
			return s.open(m.Data, m.Subject, m.Header, m.Sequence)
		}
	}
	if err != nil {
		return events.Envelope{}, fmt.Errorf("natsjs: read event %d: %w", seq, err)
	}
	return s.decode(msg)
}

// LastEvent returns the last event on a subject (one direct get), or
// ok=false when it has none. An undecodable last message comes back as the
// envelope that stands for it (events.UndecodableAt).
func (s *Store) LastEvent(ctx context.Context, subject string) (events.Envelope, bool, error) {
	msg, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.Envelope{}, false, nil
	}
	if err != nil {
		return events.Envelope{}, false, fmt.Errorf("natsjs: last event of %s: %w", subject, err)
	}
	return s.read(ctx, msg.Data, msg.Subject, msg.Header, msg.Sequence), true, nil
}

// StreamLastSequence returns the sequence of the last event in the stream,
// 0 if it is empty, asked as jsclient.StreamInfo asks.
func (s *Store) StreamLastSequence(ctx context.Context) (uint64, error) {
	info, err := jsclient.StreamInfo(ctx, s.stream, s.wait)
	if err != nil {
		return 0, fmt.Errorf("natsjs: stream info: %w", err)
	}
	return info.State.LastSeq, nil
}

// historyBatch bounds the messages asked for in one pull request.
const historyBatch = 1024

// historyInactive is how long the server keeps a history consumer that its
// reader abandoned (the reader deletes it when done).
const historyInactive = 30 * time.Second

// History returns the events on subject (wildcards allowed) with sequence
// >= from (0 and 1 both mean all), in stream order, each with its Sequence
// set. It reads what is stored when it starts: events appended meanwhile
// may or may not be included. An undecodable message is in its place as
// the envelope that stands for it (events.UndecodableAt, skipped by every
// fold), logged and counted once.
//
// It never waits for events. On a subject without wildcards it first
// reads the subject's last event (one direct get, found by the server's
// index of subjects): that answers alone when the subject has nothing at
// or after from, and when the last event was appended guarded by from-1,
// so that nothing lies between (the usual read of a reader that knows a
// server up to its previous event: an agent told of an allocation). Else,
// or with wildcards, a direct get finds the first event at or after from:
// the server looks through every message stored since from for it, on a
// large stream the expensive part. A history of one event ends there.
// Longer histories are read through an ephemeral, unacknowledged,
// in-memory consumer starting at the first event, which History deletes
// when done; the consumer's pending count at creation says when to stop.
func (s *Store) History(ctx context.Context, subject string, from uint64) ([]events.Envelope, error) {
	from = max(from, 1)
	var last *jetstream.RawStreamMsg
	if !strings.ContainsAny(subject, "*>") {
		var err error
		last, err = s.stream.GetLastMsgForSubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return []events.Envelope{}, nil
		case err != nil:
			return nil, fmt.Errorf("natsjs: read last event of %s: %w", subject, err)
		case last.Sequence < from:
			return []events.Envelope{}, nil
		case last.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == strconv.FormatUint(from-1, 10):
			return []events.Envelope{s.read(ctx, last.Data, last.Subject, last.Header, last.Sequence)}, nil
		}
	}
	first, err := s.stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return []events.Envelope{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: read %s from %d: %w", subject, from, err)
	}
	var lastSeq uint64
	if last != nil && last.Sequence >= first.Sequence {
		lastSeq = last.Sequence
	} else if lastSeq, err = s.lastSequenceAfter(ctx, subject, first.Sequence); err != nil {
		return nil, err
	}
	if lastSeq == first.Sequence {
		return []events.Envelope{s.read(ctx, first.Data, first.Subject, first.Header, first.Sequence)}, nil
	}
	cons, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       "tether history read",
		FilterSubject:     subject,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       first.Sequence,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: historyInactive,
	})
	if err != nil {
		return nil, fmt.Errorf("natsjs: read %s from %d: %w", subject, from, err)
	}
	info := cons.CachedInfo()
	defer s.deleteConsumer(ctx, info.Name)

	remaining := info.NumPending
	out := make([]events.Envelope, 0, remaining)
	var delivered uint64
	waited := false // the last pull waited, after one that came back empty
	for remaining > 0 {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("natsjs: read %s: %w", subject, err)
		}
		// Every requested message is already stored, so a no-wait pull
		// returns at once with all of them. Once, under load, one came back
		// empty with events pending (the server answers "no messages" or
		// "request timeout", which the client reports as an empty batch):
		// the read then waits for them, once, before it gives up.
		batch, err := s.pull(cons, int(min(remaining, historyBatch)), waited)
		if err != nil {
			return nil, fmt.Errorf("natsjs: read %s: %w", subject, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("natsjs: read %s: %w", subject, err)
			}
			delivered++
			if meta.Sequence.Consumer != delivered {
				// AckNone means no redelivery: a gap is a lost message.
				return nil, fmt.Errorf("natsjs: read %s: delivery %d arrived as %d; messages were lost, read again", subject, delivered, meta.Sequence.Consumer)
			}
			out = append(out, s.read(ctx, m.Data(), m.Subject(), m.Headers(), meta.Sequence.Stream))
			remaining--
			if remaining == 0 {
				break
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("natsjs: read %s: %w", subject, err)
		}
		switch {
		case got > 0:
			waited = false
		case waited:
			return nil, fmt.Errorf("natsjs: read %s: %d events pending but none delivered within %s", subject, remaining, historyRetryWait)
		default:
			s.log.Debug("a history pull came back empty with events pending; pulling again, waiting", "subject", subject, "pending", remaining)
			waited = true
		}
	}
	return out, nil
}

// historyRetryWait bounds a history pull made after a no-wait pull came
// back empty with events pending.
const historyRetryWait = 2 * time.Second

// pullHistory asks a history consumer for up to n messages, without
// waiting unless wait.
func pullHistory(cons jetstream.Consumer, n int, wait bool) (jetstream.MessageBatch, error) {
	if wait {
		return cons.Fetch(n, jetstream.FetchMaxWait(historyRetryWait))
	}
	return cons.FetchNoWait(n)
}

// lastSequenceAfter returns the sequence of subject's last event, which
// a replica showed to be at least first. Two direct gets may be answered
// by two replicas, one behind the other (catching up, or cut off from the
// others): if the last event comes back older than first, or missing, it
// is read from the stream's leader.
func (s *Store) lastSequenceAfter(ctx context.Context, subject string, first uint64) (uint64, error) {
	last, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if err == nil && last.Sequence >= first {
		return last.Sequence, nil
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, fmt.Errorf("natsjs: read last event of %s: %w", subject, err)
	}
	m, found, err := s.leaderGet(ctx, jsclient.MsgRequest{LastFor: subject})
	switch {
	case err != nil:
		return 0, fmt.Errorf("natsjs: read last event of %s from the stream's leader (a replica is behind): %w", subject, err)
	case !found || m.Sequence < first:
		return 0, fmt.Errorf("natsjs: read last event of %s: the stream's leader has none at or after %d, which a replica showed", subject, first)
	}
	return m.Sequence, nil
}

// decode decodes a message read by a direct get.
func (s *Store) decode(m *jetstream.RawStreamMsg) (events.Envelope, error) {
	return s.open(m.Data, m.Subject, m.Header, m.Sequence)
}

// open decodes a stored event and, with a Verifier, says who wrote it;
// errors name its sequence.
func (s *Store) open(data []byte, subject string, h nats.Header, seq uint64) (events.Envelope, error) {
	env, err := events.Decode(subject, data)
	if err != nil {
		return events.Envelope{}, fmt.Errorf("natsjs: sequence %d on %s: %w", seq, subject, err)
	}
	env.Sequence = seq
	env.Writer = s.verifier.Writer(subject, seq, data, h)
	return env, nil
}

// deleteConsumer removes a history consumer, even when the read's context
// has ended; the inactivity threshold is the fallback.
func (s *Store) deleteConsumer(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Warn("delete history consumer", "consumer", name, "err", err)
	}
}

// startAppend starts the span of an append of n events to subject, the
// first of type typ.
func (s *Store) startAppend(ctx context.Context, subject, typ string, n int) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, "events.append", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("tether.subject", subject), attribute.String("tether.event_type", typ), attribute.Int("tether.events", n)))
}

// endSpan ends span, recording err (a conflict too: the caller decides
// again, but this append did not store).
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
