package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
	"github.com/tetherhq/tether/projections"
)

// maxWriteAttempts bounds the re-read-and-decide loop on conflicts.
const maxWriteAttempts = 5

// decideFunc decides a command against an aggregate's current state, read
// from the views once they have applied the aggregate's last sequence.
type decideFunc func(ctx context.Context, last uint64) ([]proto.Message, error)

// writeResult is what a write appended.
type writeResult struct {
	// Sequence is the stream sequence of the last event written, or the
	// aggregate's last sequence when the command changed nothing.
	Sequence uint64
	// Events are the appended envelopes.
	Events []events.Envelope
	// Replayed is true when the request id had already been written.
	Replayed bool
}

// write runs the API's write path for one aggregate (events/write): read
// its last sequence from the stream's leader, wait until the views have
// applied it, decide on that state, and append with the sequence as the
// concurrency guard. (A replica behind the leader would give an older
// sequence: an append guarded by it conflicts, but a refusal, such as
// NOT_FOUND for a fleet the views do not show yet, appends nothing and
// would stand.) On a
// conflict it re-reads and decides again, unless the client pinned a version
// (etag), which then gets VERSION_CONFLICT. A request id makes it
// idempotent: a retry finds its earlier events and changes nothing, and the
// event ids derive from it so even racing retries are stored once.
func (s *Server) write(ctx context.Context, name, requestID, etag string, decide decideFunc) (writeResult, error) {
	subject, err := s.subjectOf(ctx, name)
	if err != nil {
		return writeResult{}, err
	}
	return s.writeOn(ctx, name, subject, requestID, etag, decide)
}

// subjectOf is the subject of an existing aggregate's events: a game
// server's own (events.SubjectOf), as the views show it (a server keeps
// its subject for life, so any of its rows says it); else, and for a game
// server the views do not show, events.Subject of its name.
func (s *Server) subjectOf(ctx context.Context, name string) (string, error) {
	if _, _, err := events.ParseGameServerName(name); err != nil {
		return events.Subject(name)
	}
	row, err := s.opts.Views.GameServer(ctx, name)
	if errors.Is(err, projections.ErrNotFound) {
		return events.Subject(name)
	}
	if err != nil {
		return "", err
	}
	return events.SubjectOf(row.State)
}

// writeOn is write on the aggregate's subject as given.
func (s *Server) writeOn(ctx context.Context, name, subject, requestID, etag string, decide decideFunc) (writeResult, error) {
	var last uint64
	read := func(ctx context.Context) (uint64, error) {
		var err error
		if last, err = s.opts.Store.LeaderLastSequence(ctx, subject); err != nil {
			return 0, fmt.Errorf("read %s: %w", name, err)
		}
		if err := s.waitFresh(ctx, last); err != nil {
			return 0, err
		}
		if requestID != "" {
			seq, err := s.opts.Views.RequestSequence(ctx, name, requestID)
			if err != nil {
				return 0, err
			}
			if seq > 0 {
				if err := s.checkReplay(ctx, requestID, seq); err != nil {
					return 0, err
				}
				return 0, replayed{seq}
			}
		}
		if etag != "" && etag != strconv.FormatUint(last, 10) {
			return 0, &apiError{code: codes.Aborted, reason: ReasonVersionConflict,
				msg: fmt.Sprintf("etag %q does not match the current version of %s; read it again", etag, name)}
		}
		return last, nil
	}
	attempts := maxWriteAttempts
	if etag != "" {
		attempts = 1 // the client pinned a version: a conflict is theirs to resolve
	}
	res, err := write.Do(ctx, s.opts.Store, write.Op{
		Name:    name,
		Subject: subject,
		Read:    read,
		Decide:  func(ctx context.Context) ([]proto.Message, error) { return decide(ctx, last) },
		Stamp:   func(ctx context.Context) events.Stamp { return s.stamp(ctx, requestID) },
	}, write.Policy{Attempts: attempts})
	var r replayed
	if errors.As(err, &r) {
		return writeResult{Sequence: r.seq, Replayed: true}, nil
	}
	if err != nil {
		return writeResult{}, err
	}
	return writeResult{Sequence: res.Sequence, Events: res.Events}, nil
}

// replayed stops a write whose request id is already in the stream, at
// sequence seq: the request was carried out before.
type replayed struct{ seq uint64 }

func (r replayed) Error() string { return fmt.Sprintf("request already written at sequence %d", r.seq) }

// stamp is what this replica records on the events it writes for a
// request: itself as producer, the caller as actor (events.ActorFrom; the
// replica itself until callers are authenticated), the request id and its
// fingerprint, and the request's trace context.
func (s *Server) stamp(ctx context.Context, requestID string) events.Stamp {
	carrier := propagation.MapCarrier{}
	s.prop.Inject(ctx, carrier)
	st := events.Stamp{Producer: s.producer, Actor: events.ActorFrom(ctx), Time: s.opts.Now(), RequestID: requestID,
		TraceParent: carrier.Get("traceparent"), TraceState: carrier.Get("tracestate")}
	if requestID != "" {
		st.RequestFingerprint = requestFingerprint(ctx)
	}
	return st
}

// checkReplay refuses a request whose request id was first used, at
// stream sequence seq, by a request with another content.
func (s *Server) checkReplay(ctx context.Context, requestID string, seq uint64) error {
	if requestFingerprint(ctx) == "" {
		return nil
	}
	stored, err := s.opts.Store.Event(ctx, seq)
	if err != nil {
		return fmt.Errorf("read the first write of request %s: %w", requestID, err)
	}
	return checkFingerprint(ctx, requestID, stored.RequestFingerprint)
}

// waitFresh waits, bounded by ReadWait, until the views have applied seq.
func (s *Server) waitFresh(ctx context.Context, seq uint64) error {
	if seq == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.opts.ReadWait)
	defer cancel()
	if err := s.opts.Freshness.WaitFor(wctx, seq); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &apiError{code: codes.Unavailable, reason: ReasonProjectionBehind,
			msg: fmt.Sprintf("the views have not reached sequence %d within %s; retry later", seq, s.opts.ReadWait)}
	}
	return nil
}
