package netns_test

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/netns"
)

// Two hosts reach each other and the bridge; a cut link reaches nobody
// until it is healed.
func TestHostsReachEachOtherUntilCut(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skip("skipping: ", err)
	}
	n := netns.New(t)
	a, b := n.Host("a"), n.Host("b")
	ping := func(from *netns.Host, to string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return from.Command(ctx, "ping", "-c", "1", "-W", "1", to).Run()
	}
	if err := ping(a, b.IP); err != nil {
		t.Fatalf("a cannot reach b: %v", err)
	}
	if err := ping(b, n.BridgeIP()); err != nil {
		t.Fatalf("b cannot reach the bridge: %v", err)
	}
	b.Cut()
	if err := ping(a, b.IP); err == nil {
		t.Fatal("a reaches b over a cut link")
	}
	b.Heal()
	if err := ping(a, b.IP); err != nil {
		t.Fatalf("a cannot reach b after the heal: %v", err)
	}
}

// An isolated pair cannot reach each other, while both still reach a
// third host, until they rejoin.
func TestIsolateIsAPartitionBetweenTwoHosts(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skip("skipping: ", err)
	}
	n := netns.New(t)
	a, b, c := n.Host("a"), n.Host("b"), n.Host("c")
	ping := func(from *netns.Host, to string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return from.Command(ctx, "ping", "-c", "1", "-W", "1", to).Run()
	}
	a.Isolate(b)
	if err := ping(a, b.IP); err == nil {
		t.Fatal("a reaches b while isolated from it")
	}
	if err := ping(b, a.IP); err == nil {
		t.Fatal("b reaches a while isolated from it")
	}
	for _, h := range []*netns.Host{a, b} {
		if err := ping(h, c.IP); err != nil {
			t.Fatalf("%s cannot reach c, which it is not isolated from: %v", h.Name, err)
		}
	}
	a.Rejoin(b)
	if err := ping(a, b.IP); err != nil {
		t.Fatalf("a cannot reach b after rejoining: %v", err)
	}
}
