package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// Watch calls fn with the server as the agent knows it, at once and then on
// every change (an allocation, labels, a shutdown notice in
// GameServer.Shutdown), until ctx ends or the Client is closed. When the
// stream breaks or the agent ends it, Watch opens it again: at once on the
// new connection after Reconnect, otherwise after a short delay that grows,
// up to 2 s, while breaks follow each other. fn may then see the same state
// again. fn runs on the caller's goroutine, one call at
// a time; a slow fn delays the next update.
//
// Watch returns only when ctx ends, with an error wrapping the cause of ctx
// (context.Canceled, context.DeadlineExceeded), or ErrClosed.
func (c *Client) Watch(ctx context.Context, fn func(*sdkv1.GameServer)) error {
	ctx, cancel := c.withLife(ctx)
	defer cancel()
	var bo backoff
	for {
		opened, conn := time.Now(), c.connection()
		err := c.watchStream(ctx, fn)
		if ctx.Err() != nil {
			return watchEnded(ctx)
		}
		delay := c.reopenDelay(&bo, opened, conn)
		c.log.Warn("watch stream broken; reopening", "err", err, "delay", delay)
		if !sleep(ctx, delay) {
			return watchEnded(ctx)
		}
	}
}

// watchEnded is what Watch returns once ctx has ended.
func watchEnded(ctx context.Context) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("sdk: watch: %w", cause)
}

// watchStream opens a watch and passes what it receives to fn until it
// breaks; it returns why.
func (c *Client) watchStream(ctx context.Context, fn func(*sdkv1.GameServer)) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	stream, err := api.WatchGameServer(ctx, &sdkv1.WatchGameServerRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("sdk: open watch: %w", err)
	}
	for {
		gs, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("sdk: watch: %w", errStreamEnded)
		}
		if err != nil {
			return fmt.Errorf("sdk: watch: %w", err)
		}
		fn(gs)
	}
}
