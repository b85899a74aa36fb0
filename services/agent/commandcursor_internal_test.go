package agent

import "testing"

// The cursor starts a consumer made anew at the first command not settled,
// and tells a command settled before from one held for a retry.
func TestCommandCursor(t *testing.T) {
	var c commandCursor
	if got := c.from(); got != 0 {
		t.Fatalf("from before any command: %d, want 0", got)
	}
	steps := []struct {
		seq         uint64
		settle      bool
		wantHandled bool
		wantFrom    uint64
	}{
		{seq: 5, settle: true, wantHandled: true, wantFrom: 6},
		{seq: 7, settle: false, wantHandled: true, wantFrom: 7},  // held for a retry
		{seq: 9, settle: true, wantHandled: true, wantFrom: 7},   // after the held one
		{seq: 5, settle: true, wantHandled: false, wantFrom: 7},  // settled before: skipped
		{seq: 7, settle: true, wantHandled: true, wantFrom: 10},  // the retry comes
		{seq: 9, settle: true, wantHandled: false, wantFrom: 10}, // delivered again
	}
	for i, s := range steps {
		got := c.receive(s.seq)
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
