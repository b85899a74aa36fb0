package commands

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A stream re-created while nats-server still removes the old one's
// directory fails with "error creating store for stream"; the creation is
// tried again, and other errors are returned as they are.
func TestRetryStoreFailed(t *testing.T) {
	storeFailed := &jetstream.APIError{Code: 500, ErrorCode: jsErrStreamStoreFailed, Description: "error creating store for stream"}
	calls := 0
	_, err := retryStoreFailed(t.Context(), nil, storeFailed, func() (jetstream.Stream, error) {
		calls++
		if calls < 3 {
			return nil, storeFailed
		}
		return nil, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want nil after 3", err, calls)
	}

	other := errors.New("other")
	calls = 0
	_, err = retryStoreFailed(t.Context(), nil, other, func() (jetstream.Stream, error) { calls++; return nil, nil })
	if !errors.Is(err, other) || calls != 0 {
		t.Fatalf("err %v after %d calls, want the first error and no retry", err, calls)
	}
}
