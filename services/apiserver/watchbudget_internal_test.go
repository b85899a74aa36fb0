package apiserver

import (
	"context"
	"errors"
	"testing"
)

// openWatch opens a share of b for a watch whose context it returns.
func openWatch(b *watchBudget) (*watchHold, context.Context) {
	ctx, cancel := context.WithCancelCause(context.Background())
	return b.open(cancel), ctx
}

// A watch takes bytes up to its own bound, and then waits for its own;
// one that would take the total over its bound ends the watch that holds
// the most, whose bytes go when it closes: the total never holds more than
// its bound but for the one event a watch that holds nothing may take.
func TestWatchBudgetEndsTheFattestWatch(t *testing.T) {
	b := newWatchBudget(100, 250)
	fat, fatCtx := openWatch(b)
	thin, thinCtx := openWatch(b)
	late, _ := openWatch(b)
	for range 10 {
		if !fat.reserve(10).ok {
			t.Fatal("the fat watch could not take its first 100 bytes")
		}
	}
	if r := fat.reserve(10); r.ok || r.evicted != nil || r.freed != nil {
		t.Fatalf("over its own bound: %+v, want to wait for its own client", r)
	}
	if !thin.reserve(90).ok || !late.reserve(50).ok {
		t.Fatal("the total had room")
	}
	r := late.reserve(20) // 240 + 20 > 250
	if r.ok || r.evicted != fat || r.freed == nil {
		t.Fatalf("over the total: %+v, want the fattest watch (100 bytes) ended", r)
	}
	r.evicted.end(errWatchEvicted)
	if !errors.Is(context.Cause(fatCtx), errWatchEvicted) || thinCtx.Err() != nil {
		t.Fatalf("causes: fat %v, thin %v", context.Cause(fatCtx), context.Cause(thinCtx))
	}
	if again := late.reserve(20); again.ok || again.evicted != nil {
		t.Fatalf("before the ended watch closed: %+v, want to wait without ending another", again)
	}
	fat.close()
	select {
	case <-r.freed:
	default:
		t.Fatal("closing the ended watch did not say that bytes were freed")
	}
	if !late.reserve(20).ok || b.heldTotal() != 160 {
		t.Fatalf("after the ended watch closed: total %d, want 160", b.heldTotal())
	}
	thin.release(90)
	thin.close()
	late.close()
	if b.heldTotal() != 0 {
		t.Fatalf("every watch closed, the budget holds %d bytes", b.heldTotal())
	}
}

// A watch that holds nothing takes one event whatever its size, so events
// larger than a bound still go, one at a time.
func TestWatchBudgetTakesOneEventOfAnySize(t *testing.T) {
	b := newWatchBudget(100, 150)
	w, _ := openWatch(b)
	if !w.reserve(1000).ok {
		t.Fatal("an event larger than both bounds was refused to a watch that holds nothing")
	}
	if r := w.reserve(1); r.ok {
		t.Fatal("a second event was taken past the bounds")
	}
	w.release(1000)
	if !w.reserve(1).ok {
		t.Fatal("released, the watch could not take another event")
	}
}
