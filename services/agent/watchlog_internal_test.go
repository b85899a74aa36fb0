package agent

import (
	"fmt"
	"testing"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// A watcher gets every change after it opened, in order, however late it
// asks; one more than watchBacklog behind gets the last watchBacklog; and
// nothing is kept while nobody watches.
func TestWatchLogKeepsEveryChangeForAWatcher(t *testing.T) {
	var w watchLog
	n := 0
	view := func() *sdkv1.GameServer { n++; return &sdkv1.GameServer{State: fmt.Sprint(n)} }
	w.record(view)
	if n != 0 || len(w.views) != 0 {
		t.Fatalf("recorded %d views with nobody watching", n)
	}
	seen := w.open()
	for range 3 {
		w.record(view)
	}
	got, next := w.since(seen)
	if states(got) != "[1 2 3]" {
		t.Fatalf("a watcher behind by three changes got %s, want [1 2 3]", states(got))
	}
	if more, _ := w.since(next); len(more) != 0 {
		t.Fatalf("a watcher that saw everything got %s more", states(more))
	}
	late := w.open() // a second watcher, from now on
	for range watchBacklog + 5 {
		w.record(view)
	}
	got, _ = w.since(next)
	if len(got) != watchBacklog || got[0].GetState() != fmt.Sprint(n-watchBacklog+1) || got[len(got)-1].GetState() != fmt.Sprint(n) {
		t.Fatalf("a watcher %d changes behind got %d views (%s … %s), want the last %d", watchBacklog+5, len(got), got[0].GetState(), got[len(got)-1].GetState(), watchBacklog)
	}
	if got, _ := w.since(late); len(got) != watchBacklog {
		t.Fatalf("the second watcher got %d views, want %d", len(got), watchBacklog)
	}
	w.close()
	w.close()
	if w.views != nil {
		t.Fatalf("%d views kept after the last watcher left", len(w.views))
	}
}

func states(vs []*sdkv1.GameServer) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.GetState()
	}
	return fmt.Sprint(out)
}
