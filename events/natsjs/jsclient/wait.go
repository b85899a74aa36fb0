package jsclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
)

// DefaultUnavailableWait is how long a call waits for a stream that cannot
// answer (LeaderGet's wait, and the default of the event store's
// Options.UnavailableWait): longer than the longest NATS election
// (nats-server's raft election timeout is 4-9 s), so a caller with time to
// wait sees a slow append, not a failed one.
const DefaultUnavailableWait = 12 * time.Second

// PublishWaiting publishes msg to a stream, retrying for up to wait (none
// if negative) while nothing can take it: no stream leader during a NATS
// election, no answer, no connection. Then it gives up with an error that
// wraps events.ErrUnavailable. A retry is safe for a message with an id
// (jetstream.MsgIDHeader): JetStream answers an id it already stored with
// the first store's acknowledgement, marked duplicate, before it looks at
// an expected sequence.
func PublishWaiting(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, wait time.Duration) (*jetstream.PubAck, error) {
	if wait < 0 {
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil && retryable(err) {
			return nil, fmt.Errorf("%w: %w", events.ErrUnavailable, err)
		}
		return ack, err
	}
	var ack *jetstream.PubAck
	err := waitAvailable(ctx, wait, func(ctx context.Context) error {
		var err error
		ack, err = js.PublishMsg(ctx, msg)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ack, nil
}

// waitAvailable runs try, and again while it fails for want of an answer
// (retryable: no stream leader during a NATS election, no answer, no
// connection), for up to wait (one attempt if negative), backing off from
// 50 to 500 ms. Each attempt is bounded by attemptTimeout: a request in
// flight to a server that died, or that a server drops (a JetStream API
// request reaching a replica that is not the leader is not answered), is
// never answered, and waiting out the caller's whole deadline on it would
// leave no time to send it again once the stream has a leader. The error
// it gives up with wraps events.ErrUnavailable.
func waitAvailable(ctx context.Context, wait time.Duration, try func(ctx context.Context) error) error {
	attempt := func() error {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		err := try(actx)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", attemptTimeout, nats.ErrTimeout)
		}
		return err
	}
	err := attempt()
	if err == nil || !retryable(err) {
		return err
	}
	giveUp := time.Now().Add(wait)
	backoff := 50 * time.Millisecond
	for n := 2; ; n++ {
		if time.Now().Add(backoff).After(giveUp) {
			return fmt.Errorf("%w: gave up after %d attempts in %s: %w", events.ErrUnavailable, n-1, max(wait, 0), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (then %w)", events.ErrUnavailable, err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
		if err = attempt(); err == nil || !retryable(err) {
			return err
		}
	}
}

// attemptTimeout bounds each attempt of waitAvailable.
const attemptTimeout = 2 * time.Second

// jsClusterNotAvailable is JetStream's error code 10008, "JetStream system
// temporarily unavailable" (no meta leader, e.g. during an election).
const jsClusterNotAvailable = 10008

// jsDuplicateInProcess is JetStream's error code 10158, "duplicate message
// id is in process": a message with the same id, sent by an earlier attempt,
// is proposed to the stream's replicas but not yet stored. Sent again
// later, the message is answered as that one's duplicate, or stored if the
// proposal was lost with its leader.
const jsDuplicateInProcess = 10158

// retryable reports whether a publish may be sent again as it is, and
// should be: nothing could take it (unavailable), or an earlier attempt of
// the same message is still being stored.
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	return unavailable(err) || errors.As(err, &apiErr) && apiErr.ErrorCode == jsDuplicateInProcess
}

// Unavailable reports whether err is JetStream not being able to answer
// for now (no stream leader, no answer, no connection) rather than a
// refusal: a caller may try again, here or through another server.
func Unavailable(err error) bool {
	return errors.Is(err, events.ErrUnavailable) || unavailable(err)
}

// unavailable reports whether a publish failed because nothing could take
// it for now (no stream leader, no answer, no connection), as opposed to a
// refusal: the same message may be sent again.
func unavailable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jsClusterNotAvailable
	}
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// StreamInfo asks for a stream's state, and again while its leader does
// not answer, as an append does (attempts of attemptTimeout, for up to
// wait, within ctx): a request sent as the leader changes (a NATS node
// restarting) goes unanswered, and a single one waited out the caller's
// whole deadline, 5 s of a controller pass in which nothing was replaced.
// Its error wraps events.ErrUnavailable when it gives up for want of an
// answer.
func StreamInfo(ctx context.Context, st jetstream.Stream, wait time.Duration) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	err := waitAvailable(ctx, wait, func(ctx context.Context) error {
		var err error
		info, err = st.Info(ctx)
		return err
	})
	return info, err
}
