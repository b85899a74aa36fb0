// Package wait lets tests wait for outcomes by polling with a deadline,
// never by sleeping for a guessed time.
package wait

import (
	"testing"
	"time"
)

// interval is the polling period.
const interval = 10 * time.Millisecond

// For polls cond until it holds, failing the test after d.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}

// Until polls check until it returns nil, failing the test after d with
// the last error it returned: a timeout says what it last saw, not only
// what it waited for.
func Until(t testing.TB, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %v", d, what, err)
			return
		}
		<-tick.C
	}
}

// Holds checks that cond stays true for the whole of d (a bounded
// observation window), failing the test as soon as it does not.
func Holds(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(interval * 10)
	defer tick.Stop()
	for time.Now().Before(end) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		<-tick.C
	}
}
