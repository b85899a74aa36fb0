package natstest

import (
	"context"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

// UnansweredOnce is a stream whose first info request is never answered
// (it waits for its context to end), as one sent to a NATS node as it
// restarts, or as the stream's leader changes, may not be; the requests
// after it go to the stream.
type UnansweredOnce struct {
	jetstream.Stream
	calls atomic.Int32
}

// Info implements jetstream.Stream.
func (u *UnansweredOnce) Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	if u.calls.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return u.Stream.Info(ctx, opts...)
}

// InfoCalls is the number of info requests made so far.
func (u *UnansweredOnce) InfoCalls() int { return int(u.calls.Load()) }
