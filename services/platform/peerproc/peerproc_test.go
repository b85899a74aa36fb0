package peerproc_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/platform/peerproc"
)

// The test binary is also the processes the tests connect from: with
// PEERPROC_CONNECT=addr it connects, says "connected" and holds the
// connection until its stdin closes; with PEERPROC_SPAWN=1 as well, it
// first starts itself as a child that does so, and waits for it.
func TestMain(m *testing.M) {
	if addr := os.Getenv("PEERPROC_CONNECT"); addr != "" {
		os.Exit(helper(addr))
	}
	os.Exit(m.Run())
}

func helper(addr string) int {
	if os.Getenv("PEERPROC_SPAWN") == "1" {
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "PEERPROC_SPAWN=0")
		child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := child.Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	fmt.Println("connected", c.LocalAddr())
	_, _ = io.Copy(io.Discard, os.Stdin) // hold until the test closes stdin
	return 0
}

// connectFrom starts a process (spawning: through a child of its own)
// that connects to l, and returns it with the connection accepted.
func connectFrom(t testing.TB, l net.Listener, spawning bool) (*exec.Cmd, net.Conn) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PEERPROC_CONNECT="+l.Addr().String())
	if spawning {
		cmd.Env = append(cmd.Env, "PEERPROC_SPAWN=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	from, ok := strings.CutPrefix(strings.TrimSpace(line), "connected ")
	if err != nil || !ok {
		t.Fatalf("helper: %q, %v", line, err)
	}
	return cmd, acceptFrom(t, l, from)
}

// acceptFrom accepts l's connections until the one from the address from,
// and closes the others: a test of another package, run at the same time,
// may connect to any port (a probe of its own).
func acceptFrom(t testing.TB, l net.Listener, from string) net.Conn {
	t.Helper()
	for range 100 {
		conn, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if conn.RemoteAddr().String() == from {
			t.Cleanup(func() { conn.Close() })
			return conn
		}
		t.Logf("a connection from %s, not %s: closed", conn.RemoteAddr(), from)
		conn.Close()
	}
	t.Fatalf("no connection from %s in 100", from)
	return nil
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// A connection is the process's it comes from, and its parent's tree's;
// the test process, which did not start it, is refused, and so is a
// sibling process.
func TestFromTreeKnowsTheProcessAtTheOtherEnd(t *testing.T) {
	l := listen(t)
	proc := peerproc.DefaultProc

	direct, conn := connectFrom(t, l, false)
	if pid, err := proc.FromTree(conn, direct.Process.Pid); err != nil || pid != direct.Process.Pid {
		t.Errorf("the connecting process: %d, %v; want %d", pid, err, direct.Process.Pid)
	}

	parent, childConn := connectFrom(t, l, true)
	pid, err := proc.FromTree(childConn, parent.Process.Pid)
	if err != nil || pid == parent.Process.Pid || pid <= 0 {
		t.Errorf("a child of the process: %d, %v; want the child's pid, not %d", pid, err, parent.Process.Pid)
	}

	if _, err := proc.FromTree(conn, parent.Process.Pid); !errors.Is(err, peerproc.ErrForeign) {
		t.Errorf("another process's connection: %v, want ErrForeign", err)
	}
	if _, err := proc.FromTree(childConn, direct.Process.Pid); !errors.Is(err, peerproc.ErrForeign) {
		t.Errorf("another tree's connection: %v, want ErrForeign", err)
	}

	// The test process itself connects.
	mine, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	accepted := acceptFrom(t, l, mine.LocalAddr().String())
	if _, err := proc.FromTree(accepted, direct.Process.Pid); !errors.Is(err, peerproc.ErrForeign) {
		t.Errorf("the test process's connection: %v, want ErrForeign", err)
	}
	if pid, err := proc.FromTree(accepted, os.Getpid()); err != nil || pid != os.Getpid() {
		t.Errorf("the test process's connection, from its own tree: %d, %v", pid, err)
	}
	if _, err := proc.FromTree(accepted, 0); !errors.Is(err, peerproc.ErrForeign) {
		t.Errorf("no process: %v, want ErrForeign", err)
	}
}

// The listener hands on the process's connections and closes the others.
func TestListenerRefusesOtherProcesses(t *testing.T) {
	inner := listen(t)
	owner := exec.Command("sleep", "60")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	refused := make(chan error, 4)
	l := &peerproc.Listener{Listener: inner, Root: func() int { return owner.Process.Pid },
		Refused: func(_ net.Addr, err error) { refused <- err }}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	// The test process is not in the owner's tree: refused, closed.
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case err := <-refused:
		if !errors.Is(err, peerproc.ErrForeign) {
			t.Errorf("refused with %v, want ErrForeign", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the foreign connection was not refused")
	case c := <-accepted:
		c.Close()
		t.Fatal("the foreign connection was accepted")
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("the refused connection reads %v, want it closed", err)
	}
	inner.Close() // ends the Accept
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// The kernel finds a peer socket: this process's own client end, none for
// a connection that does not exist (refused), and one over IPv6 loopback.
func TestPeerSocketsAreFoundInTheTables(t *testing.T) {
	l := listen(t)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := acceptFrom(t, l, c.LocalAddr().String())
	// The client end is this process's own: its inode is found from the
	// server's side, and this process holds it.
	local := s.LocalAddr().(*net.TCPAddr).AddrPort()
	remote := s.RemoteAddr().(*net.TCPAddr).AddrPort()
	inode, err := peerproc.PeerInode(local, remote)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := peerproc.DefaultProc.Holds(os.Getpid(), inode); err != nil || !held {
		t.Errorf("this process holds the client end's inode %d: %v, %v", inode, held, err)
	}
	if _, err := peerproc.PeerInode(local, netip.MustParseAddrPort("127.0.0.1:1")); !errors.Is(err, peerproc.ErrForeign) {
		t.Errorf("a connection that does not exist: %v, want ErrForeign", err)
	}
	// An IPv6 loopback connection, where the host has one.
	l6, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer l6.Close()
	c6, err := net.Dial("tcp", l6.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c6.Close()
	s6 := acceptFrom(t, l6, c6.LocalAddr().String())
	if pid, err := peerproc.DefaultProc.FromTree(s6, os.Getpid()); err != nil || pid != os.Getpid() {
		t.Errorf("over IPv6: %d, %v", pid, err)
	}
}

// BenchmarkFromTree is what a check costs a connection: the peer's socket
// found by the kernel, held by the process itself (the usual case) or
// by a child of it (the process tree read).
func BenchmarkFromTree(b *testing.B) {
	for _, spawning := range []bool{false, true} {
		name := "process"
		if spawning {
			name = "child"
		}
		b.Run(name, func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			cmd, conn := connectFrom(b, l, spawning)
			b.ResetTimer()
			for b.Loop() {
				if _, err := peerproc.DefaultProc.FromTree(conn, cmd.Process.Pid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Without the kernel's children files, the tree is read from every
// process's parent in its stat (whose command may hold spaces and
// parentheses).
func TestDescendantsFromParentsWithoutChildrenFiles(t *testing.T) {
	dir := t.TempDir()
	for pid, ppid := range map[int]int{1: 0, 10: 1, 11: 10, 12: 10, 13: 11, 20: 1, 30: 20} {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (a (game) server) S %d 1 1 0 -1\n", pid, ppid)
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := peerproc.Proc(dir).Descendants(10)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []int{11, 12, 13}; !slices.Equal(got, want) {
		t.Errorf("descendants of 10: %v, want %v", got, want)
	}
}

// BenchmarkPeerInode is the kernel's lookup of a connection's peer socket
// with none or 20,000 other sockets in TIME_WAIT on the host (closed
// loopback connections, as a game server pinging over a new connection
// each time leaves them): an exact lookup costs the same either way,
// where a dump filtered by the four-tuple walked them all (6.5 ms a
// query with 20,000).
func BenchmarkPeerInode(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	// From the server's side the peer is c's local end; here the query
	// is made from c's side, which finds the server's end as well.
	local, remote := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	timeWait := 0
	for _, n := range []int{0, 20000} {
		for ; timeWait < n; timeWait++ {
			d, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatalf("connection %d of %d: %v", timeWait, n, err)
			}
			_ = d.Close() // the client closes first: its end waits in TIME_WAIT
		}
		b.Run(fmt.Sprintf("time_wait=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := peerproc.PeerInode(local, remote); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
