package apiserver

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every REST error carries an ErrorInfo reason, the gateway's own too, and
// a refusal with a RetryInfo says when to retry in Retry-After.
func TestGatewayErrorsCarryAReason(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	mux := runtime.NewServeMux()
	marshaler := &runtime.JSONPb{}
	answer := func(err error) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/v1/fleets", nil)
		s.gatewayError(context.Background(), mux, marshaler, w, r, err)
		return w
	}
	w := answer(status.Error(codes.Internal, "marshal failed"))
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `"reason":"INTERNAL"`) {
		t.Errorf("a bare INTERNAL: %d %s", w.Code, w.Body)
	}
	w = answer(status.Error(codes.DeadlineExceeded, "too slow"))
	if !strings.Contains(w.Body.String(), `"reason":"DEADLINE_EXCEEDED"`) {
		t.Errorf("a bare DEADLINE_EXCEEDED: %s", w.Body)
	}
	w = answer(exhausted(ReasonRateLimited, 1500*time.Millisecond, "slow down"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" || !strings.Contains(w.Body.String(), ReasonRateLimited) {
		t.Errorf("a rate limit: %d Retry-After %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if n := strings.Count(answer(refusal(codes.NotFound, ReasonNotFound, "no")).Body.String(), `"reason"`); n != 1 {
		t.Errorf("a status with its reason got %d reasons", n)
	}
}
