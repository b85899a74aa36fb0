package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"

	"github.com/tetherhq/tether/events"
)

// A store that could not be reached maps to UNAVAILABLE, which clients
// retry (on another replica); a store that refused stays INTERNAL.
func TestStoreUnavailableIsUnavailable(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"append gave up waiting for NATS", fmt.Errorf("allocate: %w", fmt.Errorf("%w: no response from stream", events.ErrUnavailable)), codes.Unavailable},
		{"append gave up at the deadline", fmt.Errorf("%w: no response (then %w)", events.ErrUnavailable, context.DeadlineExceeded), codes.Unavailable},
		{"JetStream without a leader answering a read", fmt.Errorf("projections: stream info: %w",
			&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), codes.Unavailable},
		{"JetStream not answering a read", fmt.Errorf("natsjs: read: %w", nats.ErrTimeout), codes.Unavailable},
		{"JetStream refusing", &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}, codes.Internal},
		{"PostgreSQL shutting down", fmt.Errorf("read candidates: %w", &pgconn.PgError{Code: "57P01"}), codes.Unavailable},
		{"PostgreSQL starting up", &pgconn.PgError{Code: "57P03"}, codes.Unavailable},
		{"PostgreSQL connection failure", &pgconn.PgError{Code: "08006"}, codes.Unavailable},
		{"PostgreSQL refusal", &pgconn.PgError{Code: "23505"}, codes.Internal},
		{"anything else", errors.New("boom"), codes.Internal},
	} {
		if got := toStatus(log, "/test", tc.err).Code(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
