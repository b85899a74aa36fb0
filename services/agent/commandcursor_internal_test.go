package agent

import (
	"testing"
	"time"
)

// The cursor starts a consumer made anew at the first command not settled,
// tells a command settled before from one held for a retry, and starts
// again with a stream made anew (a lower sequence stored later).
func TestCommandCursor(t *testing.T) {
	var c commandCursor
	if got := c.from(); got != 0 {
		t.Fatalf("from before any command: %d, want 0", got)
	}
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(seq uint64) time.Time { return t0.Add(time.Duration(seq) * time.Second) }
	steps := []struct {
		seq         uint64
		stored      time.Time
		settle      bool
		wantHandled bool
		wantFrom    uint64
	}{
		{seq: 5, stored: at(5), settle: true, wantHandled: true, wantFrom: 6},
		{seq: 7, stored: at(7), settle: false, wantHandled: true, wantFrom: 7},  // held for a retry
		{seq: 9, stored: at(9), settle: true, wantHandled: true, wantFrom: 7},   // after the held one
		{seq: 5, stored: at(5), settle: true, wantHandled: false, wantFrom: 7},  // settled before: skipped
		{seq: 7, stored: at(7), settle: true, wantHandled: true, wantFrom: 10},  // the retry comes
		{seq: 9, stored: at(9), settle: true, wantHandled: false, wantFrom: 10}, // delivered again
		{seq: 2, stored: at(20), settle: true, wantHandled: true, wantFrom: 3},  // a stream made anew
		{seq: 1, stored: at(1), settle: true, wantHandled: false, wantFrom: 3},  // of the old one
	}
	for i, s := range steps {
		got := c.receive(s.seq, s.stored)
		if got != s.wantHandled {
			t.Fatalf("step %d: receive(%d) = %t, want %t", i, s.seq, got, s.wantHandled)
		}
		if got && s.settle {
			c.settle(s.seq)
		}
		if from := c.from(); from != s.wantFrom {
			t.Fatalf("step %d: from = %d, want %d", i, from, s.wantFrom)
		}
	}
}

// A command's age is read on the NATS server's clock: an agent whose clock
// is an hour behind does not take a command stored a second ago for an
// hour old, nor one an hour old for new.
func TestCommandAgeIsOnTheServersClock(t *testing.T) {
	var c commandCursor
	server := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	local := server.Add(-time.Hour)
	c.setServerTime(server, local)
	if got := c.age(server.Add(-time.Second), local); got != time.Second {
		t.Fatalf("age %s, want 1s", got)
	}
	if got := c.age(server.Add(-time.Hour), local.Add(time.Minute)); got != time.Hour+time.Minute {
		t.Fatalf("age %s, want 1h1m", got)
	}
	c.setServerTime(time.Time{}, local) // a server that did not say keeps the last offset
	if got := c.age(server, local); got != 0 {
		t.Fatalf("age %s, want 0", got)
	}
}
