package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
)

// Allocation outcomes: the values of tether_allocations_total's outcome
// label, a fixed set (docs/observability.md).
const (
	// OutcomeAllocated: a server was allocated.
	OutcomeAllocated = "allocated"
	// OutcomeRepeated: a retry with a request id already served was
	// answered with its allocation (nothing new was allocated).
	OutcomeRepeated = "repeated"
	// OutcomeExhausted: no READY server matched (NO_READY_GAME_SERVER).
	OutcomeExhausted = "exhausted"
	// OutcomeContended: every attempt lost its race with another writer
	// (ALLOCATION_CONTENDED).
	OutcomeContended = "contended"
	// OutcomeInvalid: the request was refused as it stands (a bad field, a
	// request id reused with another request).
	OutcomeInvalid = "invalid"
	// OutcomeNotFound: the fleet does not exist, or was deleted.
	OutcomeNotFound = "not_found"
	// OutcomeUnavailable: the event store or the views could not be
	// reached, or the views were too far behind (retry).
	OutcomeUnavailable = "unavailable"
	// OutcomeTimeout: the caller's deadline ran out first.
	OutcomeTimeout = "timeout"
	// OutcomeCanceled: the caller went away.
	OutcomeCanceled = "canceled"
	// OutcomeError: anything else (an internal error, logged).
	OutcomeError = "error"
)

// allocationOutcomes lists every outcome, each series started at zero.
var allocationOutcomes = []string{
	OutcomeAllocated, OutcomeRepeated, OutcomeExhausted, OutcomeContended, OutcomeInvalid,
	OutcomeNotFound, OutcomeUnavailable, OutcomeTimeout, OutcomeCanceled, OutcomeError,
}

// allocationMetrics counts allocations by outcome.
type allocationMetrics struct {
	allocations metric.Int64Counter
}

// newAllocationMetrics makes the counter, every outcome's series started at
// zero so that alerts see the first of each.
func newAllocationMetrics(mp metric.MeterProvider) (allocationMetrics, error) {
	c, err := mp.Meter("github.com/tetherhq/tether/services/apiserver").Int64Counter("tether_allocations",
		metric.WithDescription("AllocateGameServer calls by outcome: allocated, repeated, exhausted, contended, invalid, not_found, unavailable, timeout, canceled, error."))
	if err != nil {
		return allocationMetrics{}, fmt.Errorf("apiserver: allocation metrics: %w", err)
	}
	for _, o := range allocationOutcomes {
		c.Add(context.Background(), 0, metric.WithAttributes(attribute.String("outcome", o)))
	}
	return allocationMetrics{allocations: c}, nil
}

// repeatMark is the context key of an allocation's repeat mark.
type repeatMark struct{}

// withRepeatMark returns a context in which markRepeated records that the
// call was answered with an earlier allocation of its request id (from the
// views, or from the stream when its append was a duplicate).
func withRepeatMark(ctx context.Context) (context.Context, *atomic.Bool) {
	b := &atomic.Bool{}
	return context.WithValue(ctx, repeatMark{}, b), b
}

// markRepeated marks the call of ctx as answered with an earlier allocation.
func markRepeated(ctx context.Context) {
	if b, ok := ctx.Value(repeatMark{}).(*atomic.Bool); ok {
		b.Store(true)
	}
}

// record counts one AllocateGameServer call: replayed says it was answered
// with an earlier allocation of the same request id.
func (a *allocationService) record(ctx context.Context, replayed bool, err error) {
	outcome := allocationOutcome(replayed, err)
	a.metrics.allocations.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

// allocationOutcome classifies an allocation's result by the error the
// caller receives (classify, as toStatus does; its logs are toStatus's).
func allocationOutcome(replayed bool, err error) string {
	if err == nil {
		if replayed {
			return OutcomeRepeated
		}
		return OutcomeAllocated
	}
	ae, st := classify(slog.New(slog.DiscardHandler), "", err)
	if st != nil {
		ae = &apiError{code: st.Code()}
	}
	switch ae.code {
	case codes.ResourceExhausted:
		return OutcomeExhausted
	case codes.Aborted:
		if ae.reason == ReasonAllocationContended {
			return OutcomeContended
		}
		return OutcomeError
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.AlreadyExists:
		return OutcomeInvalid
	case codes.NotFound:
		return OutcomeNotFound
	case codes.Unavailable:
		return OutcomeUnavailable
	case codes.DeadlineExceeded:
		return OutcomeTimeout
	case codes.Canceled:
		return OutcomeCanceled
	}
	return OutcomeError
}
