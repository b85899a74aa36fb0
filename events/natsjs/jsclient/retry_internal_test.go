package jsclient

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
)

// Which failures a publish is sent again after (retryable), and which a
// caller may retry later or elsewhere (Unavailable). A message id still
// being stored by an earlier attempt (10158, seen in the cluster test's
// NATS partition) is retried with the same id; it is not a sign that the
// server is cut off. Refusals are neither.
func TestRetryableAndUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		err                    error
		retryable, unavailable bool
	}{
		{"no meta or stream leader", &jetstream.APIError{Code: 503, ErrorCode: 10008}, true, true},
		{"no answer", fmt.Errorf("publish: %w", nats.ErrTimeout), true, true},
		{"no responders", nats.ErrNoResponders, true, true},
		{"reconnecting", nats.ErrConnectionReconnecting, true, true},
		{"gave up waiting", fmt.Errorf("%w: gave up", events.ErrUnavailable), false, true},
		{"same id still being stored", fmt.Errorf("publish: %w", &jetstream.APIError{Code: 409, ErrorCode: 10158}), true, false},
		{"wrong last sequence", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false, false},
		{"anything else", errors.New("boom"), false, false},
	} {
		if got := retryable(tc.err); got != tc.retryable {
			t.Errorf("%s: retryable %v, want %v", tc.name, got, tc.retryable)
		}
		if got := Unavailable(tc.err); got != tc.unavailable {
			t.Errorf("%s: Unavailable %v, want %v", tc.name, got, tc.unavailable)
		}
	}
}
