package apiserver

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
)

// reasonOf is a status error's ErrorInfo reason.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(interface{ GetReason() string }); ok {
			return info.GetReason()
		}
	}
	return ""
}

// TestLimiterCountsPerCaller walks one caller through its three limits
// with a clock the test moves; another caller is never held up by it.
func TestLimiterCountsPerCaller(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	l := newLimiter(Limits{Rate: 10, Burst: 3, MaxConcurrent: 2, MaxWatches: 1}, func() time.Time { return now })
	alice := events.WithActor(context.Background(), "alice (matchmaker, api-key)")
	bob := events.WithActor(context.Background(), "bob (viewer, api-key)")

	// Two calls in progress; a third waits for one of them.
	r1, err := l.admit(alice, false)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.admit(alice, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.admit(alice, false); status.Code(err) != codes.ResourceExhausted || reasonOf(err) != ReasonTooManyRequests {
		t.Fatalf("a third call in progress: %v", err)
	}
	if _, err := l.admit(bob, false); err != nil {
		t.Fatalf("another caller is held up: %v", err)
	}
	r1()
	r2()
	r3, err := l.admit(alice, false)
	if err != nil {
		t.Fatal(err)
	}
	r3()

	// The burst is spent (3 admitted, the refused one cost nothing): the
	// next is refused with when to retry, one tenth of a second at 10/s.
	_, err = l.admit(alice, false)
	if status.Code(err) != codes.ResourceExhausted || reasonOf(err) != ReasonRateLimited {
		t.Fatalf("above the burst: %v", err)
	}
	if d, ok := retryAfter(status.Convert(err)); !ok || d <= 0 || d > 100*time.Millisecond {
		t.Fatalf("retry after %s (%v), want at most 100ms", d, ok)
	}
	now = now.Add(100 * time.Millisecond)
	release, err := l.admit(alice, false)
	if err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
	release()

	// One stream, then none until it ends.
	now = now.Add(time.Second)
	closeWatch, err := l.admit(alice, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.admit(alice, true); status.Code(err) != codes.ResourceExhausted || reasonOf(err) != ReasonTooManyWatches {
		t.Fatalf("a second stream: %v", err)
	}
	closeWatch()
	now = now.Add(time.Second)
	if _, err := l.admit(alice, true); err != nil {
		t.Fatalf("a stream after the first ended: %v", err)
	}

	// An idle caller is forgotten.
	now = now.Add(2 * idleAfter)
	if _, err := l.admit(bob, false); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	_, kept := l.callers["alice (matchmaker, api-key)"]
	l.mu.Unlock()
	if !kept {
		t.Error("a caller holding a stream was forgotten")
	}
}
