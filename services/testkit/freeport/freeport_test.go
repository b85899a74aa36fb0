//go:build unix

package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Blocks handed out are bindable and never overlap while held, and a
// port in use makes its block unavailable.
func TestBlocksAreFreeAndDisjoint(t *testing.T) {
	taken := map[int]bool{}
	for range 20 {
		base := Block(t, 25)
		for p := base; p < base+25; p++ {
			if taken[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			taken[p] = true
		}
	}

	base := Block(t, 10)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+3)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(base, 10) {
		t.Fatalf("block %d counted free with port %d in use", base, base+3)
	}
}

// A block held by one holder is not handed to another until released.
func TestLockedBlockIsSkipped(t *testing.T) {
	release, ok, err := lock(Low, 2)
	if err != nil || !ok {
		t.Skipf("the first block is held elsewhere (%v)", err)
	}
	if _, again, err := lock(Low+chunk, 1); err != nil || again {
		t.Fatalf("a held chunk was locked again (ok %v, err %v)", again, err)
	}
	release()
	release2, ok, err := lock(Low, 2)
	if err != nil || !ok {
		t.Fatalf("a released block could not be locked (ok %v, err %v)", ok, err)
	}
	release2()
}

func TestRefusesImpossibleBlocks(t *testing.T) {
	for _, n := range []int{0, -1, High - Low + 1} {
		if _, _, err := take(n); err == nil {
			t.Errorf("a block of %d ports was handed out", n)
		}
	}
}
