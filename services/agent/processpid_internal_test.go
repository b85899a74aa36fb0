package agent

import (
	"testing"
	"time"
)

// An SDK connection that arrives before the agent knows the pid of the
// process it just started waits for it, rather than be refused as not the
// server's process; one that arrives while none is started gets 0 after
// its wait, and the pid is forgotten when the process ends.
func TestProcessPidWaitsForTheProcessBeingStarted(t *testing.T) {
	gs := &gameServer{pidKnown: make(chan struct{}), done: make(chan struct{})}
	got := make(chan int, 1)
	go func() { got <- gs.processPid(time.Minute) }()
	gs.setPid(4242)
	select {
	case pid := <-got:
		if pid != 4242 {
			t.Fatalf("pid %d, want 4242", pid)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end when the pid was set")
	}
	if pid := gs.processPid(time.Minute); pid != 4242 {
		t.Fatalf("with a process known: %d", pid)
	}
	gs.setPid(0)
	if pid := gs.processPid(time.Millisecond); pid != 0 {
		t.Fatalf("after the process ended: %d, want 0", pid)
	}
	gs.setPid(7)
	gs.setPid(7) // set twice: no double close
	if pid := gs.processPid(time.Minute); pid != 7 {
		t.Fatalf("the next process: %d, want 7", pid)
	}
	close(gs.done)
	gs.setPid(0)
	if pid := gs.processPid(time.Minute); pid != 0 {
		t.Fatalf("a finished server: %d, want 0 at once", pid)
	}
}
