package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// Reopening a broken stream (heartbeats, watch).
const (
	// backoffMin is the first delay before reopening a stream.
	backoffMin = 50 * time.Millisecond
	// backoffMax bounds the delay between attempts.
	backoffMax = 2 * time.Second
	// healthyStream is how long a stream must have lived for its break
	// to count as a new failure rather than another one in a row.
	healthyStream = time.Second
	// closeTimeout bounds the wait for the agent to acknowledge a clean
	// close of a heartbeat stream.
	closeTimeout = time.Second
)

// errStreamEnded is the cause when the agent ended a stream without error.
var errStreamEnded = errors.New("stream ended by the agent")

// StartHeartbeat sends heartbeats in the background until ctx ends, stop
// is called or the Client is closed: it keeps a HealthStream open and sends
// one heartbeat on it at once and then every HeartbeatInterval. When the
// stream breaks it is reopened: at once on the new connection after
// Reconnect, otherwise (agent restarted, connection lost) after a short
// delay that grows, up to 2 s, while breaks follow each other. stop ends the stream cleanly (the agent sees a close, not a
// reset) and returns once the heartbeats have stopped; calling it again
// does nothing.
func (c *Client) StartHeartbeat(ctx context.Context) (stop func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.log.Warn("heartbeat not started: client closed")
		return func() {}
	}
	c.beats.Add(1) // under mu: Close cannot be waiting yet
	c.mu.Unlock()

	ctx, cancel := c.withLife(ctx)
	done := make(chan struct{})
	go func() {
		defer c.beats.Done()
		defer close(done)
		c.heartbeat(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// PauseHeartbeat stops sending heartbeats without closing anything: the
// heartbeat stream stays open and silent, as in a hung process (for tests
// and the example's misbehaviour). A stream that breaks while paused is not
// reopened until ResumeHeartbeat.
func (c *Client) PauseHeartbeat() {
	if c.pause.set(true) {
		c.log.Warn("heartbeats paused")
	}
}

// ResumeHeartbeat sends a heartbeat at once and then heartbeats as before
// PauseHeartbeat.
func (c *Client) ResumeHeartbeat() {
	if c.pause.set(false) {
		c.log.Info("heartbeats resumed")
	}
}

// withLife returns a context that also ends, with cause ErrClosed, when the
// Client is closed.
func (c *Client) withLife(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(c.life, func() { cancel(ErrClosed) })
	return ctx, func() {
		unhook()
		cancel(context.Canceled)
	}
}

// heartbeat runs heartbeat streams, one after the other, until ctx ends.
func (c *Client) heartbeat(ctx context.Context) {
	var bo backoff
	for {
		if !c.pause.waitResumed(ctx) {
			return
		}
		opened, conn := time.Now(), c.connection()
		err := c.heartbeatStream(ctx)
		if ctx.Err() != nil {
			if err != nil {
				c.log.Warn("heartbeat stream not closed cleanly", "err", err)
			}
			return
		}
		delay := c.reopenDelay(&bo, opened, conn)
		c.log.Warn("heartbeat stream broken; reopening", "err", err, "delay", delay)
		if !sleep(ctx, delay) {
			return
		}
	}
}

// heartbeatStream opens a HealthStream and heartbeats on it until it breaks
// (it returns why) or ctx ends (it closes the stream cleanly and returns
// nil, or why it could not).
func (c *Client) heartbeatStream(ctx context.Context) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	// The stream outlives ctx by a clean close; until it is open, ctx
	// cancels the wait for a connection.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	unhook := context.AfterFunc(ctx, cancel)
	stream, err := api.HealthStream(sctx, grpc.WaitForReady(true))
	if !unhook() {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("sdk: open heartbeat stream: %w", err)
	}
	// The agent answers only when the stream ends: a pending receive
	// learns at once that it broke, without waiting for the next send.
	ended := make(chan error, 1)
	go func() { ended <- stream.RecvMsg(new(sdkv1.HealthStreamResponse)) }()
	broken := func(err error) error {
		if err == nil {
			err = errStreamEnded
		}
		return fmt.Errorf("sdk: heartbeat stream: %w", err)
	}

	tick := time.NewTicker(c.opts.HeartbeatInterval)
	defer tick.Stop()
	due := true
	for {
		paused, changed := c.pause.state()
		if due && !paused {
			if err := stream.Send(&sdkv1.HealthStreamRequest{}); err != nil {
				// A failed send returns io.EOF; the reason comes from the receive.
				select {
				case err := <-ended:
					return broken(err)
				case <-time.After(closeTimeout):
					return broken(err)
				}
			}
		}
		due = false
		select {
		case <-ctx.Done():
			if err := stream.CloseSend(); err != nil {
				return fmt.Errorf("sdk: close heartbeat stream: %w", err)
			}
			select {
			case err := <-ended:
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("sdk: close heartbeat stream: %w", err)
				}
				return nil
			case <-time.After(closeTimeout):
				return errors.New("sdk: close heartbeat stream: no answer from the agent")
			}
		case err := <-ended:
			return broken(err)
		case <-tick.C:
			due = true
		case <-changed:
			due = true // resumed: heartbeat at once
		}
	}
}

// pauser holds whether heartbeats are paused.
type pauser struct {
	mu      sync.Mutex
	paused  bool
	changed chan struct{} // closed and replaced on every change
}

// set pauses or resumes; it reports whether that changed anything.
func (p *pauser) set(paused bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == paused {
		return false
	}
	p.paused = paused
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

// state returns whether heartbeats are paused and a channel closed on the
// next change.
func (p *pauser) state() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.changed
}

// waitResumed waits until heartbeats are not paused; false if ctx ended.
func (p *pauser) waitResumed(ctx context.Context) bool {
	for {
		paused, changed := p.state()
		if !paused {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// connection returns the number of the current connection; Reconnect
// changes it.
func (c *Client) connection() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns
}

// reopenDelay is how long to wait before reopening a stream opened at
// opened on connection conn that has just broken. A break that Reconnect
// caused is no failure: the stream reopens at once on the new connection.
// A stream that lived long enough was healthy: the delays start over.
func (c *Client) reopenDelay(bo *backoff, opened time.Time, conn int) time.Duration {
	if c.connection() != conn {
		bo.reset()
		return 0
	}
	if time.Since(opened) >= healthyStream {
		bo.reset()
	}
	return bo.next()
}

// backoff is the delay before reopening a stream: it doubles from
// backoffMin to backoffMax, with jitter so that the servers of a restarted
// agent do not all come back at once.
type backoff struct{ cur time.Duration }

func (b *backoff) next() time.Duration {
	b.cur = max(backoffMin, min(2*b.cur, backoffMax))
	return b.cur/2 + rand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits for d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
