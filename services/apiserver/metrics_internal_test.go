package apiserver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestAllocationOutcome(t *testing.T) {
	tests := []struct {
		name     string
		replayed bool
		err      error
		want     string
	}{
		{"allocated", false, nil, OutcomeAllocated},
		{"a retry answered", true, nil, OutcomeRepeated},
		{"no READY server", false, &apiError{code: codes.ResourceExhausted, reason: ReasonNoReadyGameServer}, OutcomeExhausted},
		{"lost every race", false, &apiError{code: codes.Aborted, reason: ReasonAllocationContended}, OutcomeContended},
		{"a conflict that is not contention", false, &apiError{code: codes.Aborted, reason: ReasonVersionConflict}, OutcomeError},
		{"bad field", false, invalidField("scheduling", "bad"), OutcomeInvalid},
		{"request id reused", false, &apiError{code: codes.FailedPrecondition, reason: "REQUEST_ID_REUSED"}, OutcomeInvalid},
		{"no such fleet", false, &apiError{code: codes.NotFound, reason: ReasonNotFound}, OutcomeNotFound},
		{"store down", false, &apiError{code: codes.Unavailable, reason: ReasonUnavailable}, OutcomeUnavailable},
		{"caller's deadline", false, fmt.Errorf("read views: %w", context.DeadlineExceeded), OutcomeTimeout},
		{"caller gone", false, fmt.Errorf("append: %w", context.Canceled), OutcomeCanceled},
		{"a grpc status", false, status.Error(codes.Unavailable, "no"), OutcomeUnavailable},
		{"anything else", false, errors.New("boom"), OutcomeError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := allocationOutcome(tt.replayed, tt.err); got != tt.want {
				t.Fatalf("allocationOutcome(%v, %v) = %q, want %q", tt.replayed, tt.err, got, tt.want)
			}
		})
	}
}
