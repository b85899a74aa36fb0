package controller

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/wait"
)

// A wake never makes the next pass later than the next tick: after a pass
// that took 10 s (waiting on NATS during a partition), the woken wait of
// twice that held the controller's next pass for 20 s.
func TestAWakeNeverDelaysTheNextPass(t *testing.T) {
	tick := make(chan time.Time)
	wakes := make(chan struct{}, 1)
	wakes <- struct{}{}
	done := make(chan bool, 1)
	go func() { done <- waitNextPass(context.Background(), tick, wakes, time.Now(), 10*time.Second) }()
	// The wait has taken the wake, so the tick comes during its gap.
	wait.For(t, 10*time.Second, "the wake taken", func() bool { return len(wakes) == 0 })
	select {
	case tick <- time.Now():
	case <-time.After(10 * time.Second):
		t.Fatal("the woken wait did not take the tick")
	}
	select {
	case woken := <-done:
		if woken {
			t.Error("the pass after the tick reported a wake")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the next pass still waits after the tick")
	}

	// A short pass: the wake runs the next one after its gap.
	short := make(chan struct{}, 1)
	short <- struct{}{}
	if woken := waitNextPass(context.Background(), tick, short, time.Now(), time.Millisecond); !woken {
		t.Error("a wake after a short pass did not run the next one")
	}
}
