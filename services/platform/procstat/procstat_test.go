package procstat

import (
	"testing"
	"time"
)

// Reading twice around some work: the machine has cores, its busy time
// only grows, and the work shows in it.
func TestReadCountsBusyTime(t *testing.T) {
	before, err := Read()
	if err != nil {
		t.Skipf("no /proc/stat here: %v", err)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ { // 0.3 s of CPU
		_ = x * x
	}
	after, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if after.Cores < 1 || after.Busy < before.Busy || after.Total <= before.Total {
		t.Fatalf("before %+v, after %+v", before, after)
	}
	if busy := after.BusySince(before); busy < 100*time.Millisecond {
		t.Fatalf("0.3 s of work read as %s of busy time", busy)
	}
	if s := after.BusyShareSince(before); s <= 0 || s > 1 {
		t.Fatalf("busy share %v", s)
	}
}
