package migrate

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A stream the server failed to create once is created by the next try;
// an error that is not transient is returned at once.
func TestRetryTransient(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	calls := 0
	err := retryTransient(context.Background(), log, "stream X", time.Second, func(context.Context) error {
		if calls++; calls == 1 {
			return &jetstream.APIError{Code: 500, ErrorCode: jsErrStreamCreate, Description: "error creating store for stream"}
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("after one failed create: err %v, %d calls; want nil after 2", err, calls)
	}
	calls = 0
	lasting := &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}
	err = retryTransient(context.Background(), log, "stream X", time.Second, func(context.Context) error { calls++; return lasting })
	if !errors.Is(err, lasting) || calls != 1 {
		t.Fatalf("a lasting error: err %v after %d calls; want it after 1", err, calls)
	}
}

// A try whose reply never comes ends at its own deadline and the step is
// tried again, within the caller's context; the caller's context ending
// stops the tries at once.
func TestRetryTransientBoundsEachTry(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	calls := 0
	err := retryTransient(ctx, log, "stream X", 50*time.Millisecond, func(try context.Context) error {
		if calls++; calls == 1 {
			<-try.Done() // the reply is lost: the request waits for its deadline
			return try.Err()
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("after a lost reply: err %v, %d calls; want nil after 2", err, calls)
	}

	parent, stop := context.WithCancel(t.Context())
	calls = 0
	err = retryTransient(parent, log, "stream X", time.Minute, func(try context.Context) error {
		calls++
		stop()
		<-try.Done()
		return try.Err()
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("caller's context cancelled: err %v after %d calls; want context.Canceled after 1", err, calls)
	}
}
