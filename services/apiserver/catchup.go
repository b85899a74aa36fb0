package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tetherhq/tether/projections"
)

// A resource the views do not hold is NOT_FOUND only once the views have
// caught up with the stream: a replica that has just started may read
// views that are being rebuilt, restored or replayed (a restarted tether
// dev answered 404 for a fleet that existed, 250 ms after its start). So
// each replica reads the stream's last sequence when it starts, and until
// the views have applied it (Freshness), a read that finds no row answers
// UNAVAILABLE, reason PROJECTION_BEHIND, with a RetryInfo (Retry-After).

// catchUpRetry is how soon a read refused while the views catch up may be
// tried again.
const catchUpRetry = time.Second

// catchUpPoll is how long the replica waits before asking the stream's
// position again when it could not be read.
const catchUpPoll = time.Second

// viewsCatchUp says whether the views have applied the stream's position
// at the replica's start.
type viewsCatchUp struct {
	start atomic.Uint64 // the stream's last sequence at start, once read
	done  atomic.Bool
}

// caughtUp reports whether the views have reached the stream's position at
// start.
func (c *viewsCatchUp) caughtUp() bool { return c.done.Load() }

// ViewsCaughtUp reports whether the views have applied the event stream's
// last sequence as of the server's start; until then a read that finds no
// row answers UNAVAILABLE, reason PROJECTION_BEHIND. It is not part of the
// server's readiness: the API serves writes, and reads of what the views
// hold, while they catch up.
func (s *Server) ViewsCaughtUp() bool { return s.views.caughtUp() }

// catchUp reads the stream's last sequence (again after a failure, until
// ctx ends) and waits until the views have applied it. Without a watcher,
// which knows the stream's position, the views count as caught up.
func (s *Server) catchUp(ctx context.Context) {
	if s.opts.Watch == nil {
		s.views.done.Store(true)
		return
	}
	var seq uint64
	for warned := false; ; warned = true {
		var err error
		if seq, err = s.opts.Watch.StreamLastSequence(ctx); err == nil {
			break
		}
		if !warned {
			s.log.Warn("the stream's position unread: reads of missing rows answer UNAVAILABLE until the views reach it", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(catchUpPoll):
		}
	}
	s.views.start.Store(seq)
	if err := s.opts.Freshness.WaitFor(ctx, seq); err != nil {
		return // ctx ended
	}
	s.views.done.Store(true)
	s.log.Info("views caught up with the stream's position at start", "sequence", seq)
}

// behindNotFound turns a read that found no row in the views, made before
// the views caught up with the stream, into UNAVAILABLE: the row may be on
// its way. Any other error passes as it is.
func (s *Server) behindNotFound(err error) error {
	if err == nil || s.views.caughtUp() || !errors.Is(err, projections.ErrNotFound) {
		return err
	}
	msg := "the views have not yet caught up with the event stream since this API server started; retry"
	if seq := s.views.start.Load(); seq > 0 {
		msg = fmt.Sprintf("the views have not yet reached sequence %d, the event stream's when this API server started; retry", seq)
	}
	return &apiError{code: codes.Unavailable, reason: ReasonProjectionBehind, msg: msg, retry: catchUpRetry}
}

// unaryCatchUp and streamCatchUp apply behindNotFound to every handler's
// error; they run inside unaryErrors and streamErrors, which turn the
// result into a status.
func (s *Server) unaryCatchUp() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		return resp, s.behindNotFound(err)
	}
}

func (s *Server) streamCatchUp() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return s.behindNotFound(handler(srv, ss))
	}
}
