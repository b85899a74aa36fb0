package netns_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/netns"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// listen is a TCP listener of the host's (nil: of the test process, on the
// bridge's address), closed when the test ends; it returns its address.
func listen(t *testing.T, n *netns.Network, h *netns.Host) string {
	t.Helper()
	var l net.Listener
	var err error
	if h == nil {
		l, err = net.Listen("tcp", net.JoinHostPort(n.BridgeIP(), "0"))
	} else {
		l, err = h.Listen("tcp", net.JoinHostPort(h.IP, "0"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() }) // nothing to report at the end of a test
	return l.Addr().String()
}

// reach connects from a host to addr, over TCP, within 2 s (the kernel
// completes the handshake; nothing accepts).
func reach(t *testing.T, from *netns.Host, addr string) error {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	c, err := from.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// reaches waits until from reaches addr.
func reaches(t *testing.T, what string, from *netns.Host, addr string) {
	t.Helper()
	wait.Until(t, 10*time.Second, what, func() error { return reach(t, from, addr) })
}

// Two hosts reach each other and the bridge; a cut link reaches nobody
// until it is healed.
func TestHostsReachEachOtherUntilCut(t *testing.T) {
	netns.SkipUnlessAvailable(t)
	n := netns.New(t)
	a, b := n.Host("a"), n.Host("b")
	atB, atBridge := listen(t, n, b), listen(t, n, nil)
	reaches(t, "a to reach b", a, atB)
	reaches(t, "b to reach the bridge", b, atBridge)
	b.Cut()
	if err := reach(t, a, atB); err == nil {
		t.Fatal("a reaches b over a cut link")
	}
	b.Heal()
	reaches(t, "a to reach b after the heal", a, atB)
}

// An isolated pair cannot reach each other, while both still reach a
// third host, until they rejoin.
func TestIsolateIsAPartitionBetweenTwoHosts(t *testing.T) {
	netns.SkipUnlessAvailable(t)
	n := netns.New(t)
	a, b, c := n.Host("a"), n.Host("b"), n.Host("c")
	atA, atB, atC := listen(t, n, a), listen(t, n, b), listen(t, n, c)
	a.Isolate(b)
	if err := reach(t, a, atB); err == nil {
		t.Fatal("a reaches b while isolated from it")
	}
	if err := reach(t, b, atA); err == nil {
		t.Fatal("b reaches a while isolated from it")
	}
	for _, h := range []*netns.Host{a, b} {
		reaches(t, h.Name+" to reach c, which it is not isolated from", h, atC)
	}
	a.Rejoin(b)
	reaches(t, "a to reach b after rejoining", a, atB)
}
