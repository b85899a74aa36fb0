package migrate

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A stream the server failed to create once is created by the next try;
// an error that is not transient is returned at once.
func TestRetryTransient(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	calls := 0
	err := retryTransient(context.Background(), log, "stream X", func() error {
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
	err = retryTransient(context.Background(), log, "stream X", func() error { calls++; return lasting })
	if !errors.Is(err, lasting) || calls != 1 {
		t.Fatalf("a lasting error: err %v after %d calls; want it after 1", err, calls)
	}
}
