// Package netns builds a network of hosts on one Linux machine for tests:
// each host is a network namespace with its own address, joined by a veth
// pair to one bridge, so processes started in it reach each other (and the
// test process, on the bridge's address) over a real network whose links a
// test can cut and heal. It needs root and iproute2's `ip`; Available says
// why not when they are missing, and SkipUnlessAvailable skips a test then
// (or fails it, where RequireEnv asks). A test reaches into a host without
// a process of its own there: Host.Listen and Host.DialContext open their
// sockets in its namespace.
//
// Everything a Network creates is named after a random prefix and removed
// when the test ends.
package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireEnv, set to 1 (CI, .ci/run), makes SkipUnlessAvailable fail a
// test instead of skipping it.
const RequireEnv = "TETHER_REQUIRE_NETNS"

// Available reports why this machine cannot build a network, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("iproute2's ip is not installed: %w", err)
	}
	return nil
}

// SkipUnlessAvailable skips the test, saying why, on a machine that cannot
// build a network (Available), or fails it there if RequireEnv is 1.
func SkipUnlessAvailable(t testing.TB) {
	t.Helper()
	err := Available()
	switch {
	case err == nil:
	case os.Getenv(RequireEnv) == "1":
		t.Fatalf("netns: %v, and %s=1: run the test as root with iproute2 installed", err, RequireEnv)
	default:
		t.Skipf("netns: %v (%s=1 makes this a failure)", err, RequireEnv)
	}
}

// Network is a bridge and the hosts joined to it.
type Network struct {
	t      testing.TB
	prefix string // names every namespace, link and the bridge
	subnet string // "10.X.Y", a /24
	bridge string

	mu    sync.Mutex
	hosts []*Host
}

// Host is one network namespace on the bridge.
type Host struct {
	// Name is the host's name in the test; Namespace is the namespace's.
	Name, Namespace string
	// IP is its address on the bridge.
	IP   string
	link string // the bridge-side end of its veth pair
	net  *Network
}

// New creates the bridge, with the first address of a random 10.x.y.0/24
// subnet, in the test's (root) namespace.
func New(t testing.TB) *Network {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	x, _ := rand.Int(rand.Reader, big.NewInt(200))
	n := &Network{t: t, prefix: "tt" + hex.EncodeToString(b[:2])}
	n.subnet = fmt.Sprintf("10.%d.%d", 20+x.Int64(), b[2])
	n.bridge = n.prefix + "br"
	t.Cleanup(n.remove)
	n.ip("link", "add", n.bridge, "type", "bridge")
	n.ip("addr", "add", n.BridgeIP()+"/24", "dev", n.bridge)
	n.ip("link", "set", n.bridge, "up")
	return n
}

// BridgeIP is the test process's address on the network.
func (n *Network) BridgeIP() string { return n.subnet + ".1" }

// Host creates a namespace joined to the bridge, with the next address.
func (n *Network) Host(name string) *Host {
	n.t.Helper()
	n.mu.Lock()
	i := len(n.hosts)
	h := &Host{Name: name, Namespace: fmt.Sprintf("%s-%s", n.prefix, name), IP: fmt.Sprintf("%s.%d", n.subnet, 10+i),
		link: fmt.Sprintf("%sv%da", n.prefix, i), net: n}
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	inner := fmt.Sprintf("%sv%db", n.prefix, i)
	n.ip("netns", "add", h.Namespace)
	n.ip("link", "add", h.link, "type", "veth", "peer", "name", inner)
	n.ip("link", "set", inner, "netns", h.Namespace)
	n.ip("link", "set", h.link, "master", n.bridge)
	n.ip("link", "set", h.link, "up")
	n.ip("-n", h.Namespace, "link", "set", "lo", "up")
	n.ip("-n", h.Namespace, "addr", "add", h.IP+"/24", "dev", inner)
	n.ip("-n", h.Namespace, "link", "set", inner, "up")
	return h
}

// Command returns a command that runs in the host's namespace.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Namespace, name}, args...)...)
}

// Listen listens in the host's namespace, e.g. on h.IP+":0": other hosts
// reach it there, with no process of the test's in the namespace.
func (h *Host) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := h.inNamespace(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// DialContext connects from the host's namespace, as a process in it would.
func (h *Host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := h.inNamespace(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// inNamespace runs fn, and waits for it, on an OS thread that has entered
// the host's network namespace: a socket fn opens belongs to that
// namespace for good, whichever thread uses it afterwards. The thread
// serves nothing else: its goroutine ends still locked to it, so the
// runtime ends the thread rather than reuse it.
func (h *Host) inNamespace(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, on purpose
		done <- h.enter(fn)
	}()
	return <-done
}

// enter moves the calling thread into the host's network namespace (the
// file `ip netns add` made) and runs fn there.
func (h *Host) enter(fn func() error) error {
	f, err := os.Open(filepath.Join("/run/netns", h.Namespace))
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("netns: enter %s: %w", h.Namespace, err)
	}
	return fn()
}

// Cut takes the host's link down: it can reach nobody, nobody reaches it.
func (h *Host) Cut() { h.net.ip("link", "set", h.link, "down") }

// Heal brings the host's link back up.
func (h *Host) Heal() { h.net.ip("link", "set", h.link, "up") }

// Isolate partitions the host from others while both keep their links
// (and so everyone else): a blackhole route to each other's address on
// both sides, so neither reaches the other and connections between them
// stall as on a real partition.
func (h *Host) Isolate(others ...*Host) {
	for _, o := range others {
		h.net.ip("-n", h.Namespace, "route", "add", "blackhole", o.IP+"/32")
		h.net.ip("-n", o.Namespace, "route", "add", "blackhole", h.IP+"/32")
	}
}

// Rejoin undoes Isolate.
func (h *Host) Rejoin(others ...*Host) {
	for _, o := range others {
		h.net.ip("-n", h.Namespace, "route", "del", "blackhole", o.IP+"/32")
		h.net.ip("-n", o.Namespace, "route", "del", "blackhole", h.IP+"/32")
	}
}

// ip runs `ip args…` and fails the test on error.
func (n *Network) ip(args ...string) {
	n.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// remove deletes the namespaces and the bridge (deleting a namespace
// deletes its veth pair). Processes still running in a namespace keep it
// alive until they exit: the test stops them first.
func (n *Network) remove() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range n.hosts {
		if out, err := exec.Command("ip", "netns", "del", h.Namespace).CombinedOutput(); err != nil {
			n.t.Errorf("ip netns del %s: %v\n%s", h.Namespace, err, out)
		}
	}
	if out, err := exec.Command("ip", "link", "del", n.bridge).CombinedOutput(); err != nil {
		n.t.Errorf("ip link del %s: %v\n%s", n.bridge, err, out)
	}
}
