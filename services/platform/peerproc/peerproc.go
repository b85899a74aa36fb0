// Package peerproc tells which process holds the other end of a loopback
// TCP connection, from the kernel: a sock_diag lookup over netlink gives
// the peer socket's inode, and a process's descriptors (/proc/<pid>/fd)
// show whether it holds that socket. A server on a port
// meant for one process uses it to refuse every other: TCP carries no
// credential, and a client that sends none (an Agones SDK client) is
// known only by the process it is.
//
// Linux only; the caller must be allowed to read the processes'
// descriptors (the same user, or root).
package peerproc

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrForeign is why a connection is refused: the process at its other end
// is not the one the port is for, nor one of its descendants.
var ErrForeign = errors.New("peerproc: the connection comes from another process")

// Proc is where the kernel's process tables are read from; "/proc"
// unless a test says otherwise.
type Proc string

// DefaultProc is the system's /proc.
const DefaultProc Proc = "/proc"

// FromTree checks that the other end of conn, a TCP connection on
// loopback, is held by process root or one of its descendants, and
// returns the pid that holds it. A socket held by several processes (a
// descriptor inherited across fork) counts if one of them is in the tree.
func (p Proc) FromTree(conn net.Conn, root int) (int, error) {
	local, ok1 := conn.LocalAddr().(*net.TCPAddr)
	remote, ok2 := conn.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("peerproc: %s is not a TCP connection", conn.RemoteAddr())
	}
	inode, err := PeerInode(local.AddrPort(), remote.AddrPort())
	if err != nil {
		return 0, err
	}
	if root <= 0 {
		return 0, fmt.Errorf("%w: no process to accept it from", ErrForeign)
	}
	// The process itself first: the usual caller, and no table to read.
	if held, err := p.Holds(root, inode); err != nil {
		return 0, err
	} else if held {
		return root, nil
	}
	tree, err := p.Descendants(root)
	if err != nil {
		return 0, err
	}
	for _, pid := range tree {
		held, err := p.Holds(pid, inode)
		if err != nil {
			continue // ended meanwhile: it holds nothing
		}
		if held {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("%w (%s, not process %d or a child of it)", ErrForeign, remote, root)
}

// PeerInode returns the inode of the socket at the other end of the
// connection whose near end is local and far end remote: the kernel is
// asked for the one socket whose own address is remote and whose peer's
// is local, by an exact sock_diag lookup (socketInode), which costs the
// same however many sockets the host has.
func PeerInode(local, remote netip.AddrPort) (uint64, error) {
	inode, err := socketInode(unmap(remote), unmap(local))
	if err != nil {
		// A socket the kernel does not have (another network namespace's)
		// and a query that failed are both refusals; the cause says which.
		return 0, fmt.Errorf("%w: the kernel names no socket %s -> %s here: %v", ErrForeign, remote, local, err)
	}
	return inode, nil
}

// unmap turns an IPv4-mapped IPv6 address into its IPv4 form, the family
// the kernel keeps a socket of either kind in when it is IPv4.
func unmap(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// Holds reports whether process pid has a descriptor on the socket with
// this inode.
func (p Proc) Holds(pid int, inode uint64) (bool, error) {
	dir := filepath.Join(string(p), strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("peerproc: descriptors of %d: %w", pid, err)
	}
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if target == want {
			return true, nil
		}
	}
	return false, nil
}

// Descendants lists the processes below root (its children, theirs, …),
// from each process's children (/proc/<pid>/task/<tid>/children), or,
// where the kernel does not keep those, from every process's parent.
func (p Proc) Descendants(root int) ([]int, error) {
	childrenOf := p.children
	if _, err := p.children(root); err != nil {
		byParent, err := p.childrenByParent()
		if err != nil {
			return nil, err
		}
		childrenOf = func(pid int) ([]int, error) { return byParent[pid], nil }
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 && len(out) < maxTree {
		kids, err := childrenOf(queue[0])
		queue = queue[1:]
		if err != nil {
			continue // ended meanwhile
		}
		out = append(out, kids...)
		queue = append(queue, kids...)
	}
	return out, nil
}

// maxTree bounds the processes a tree is searched through.
const maxTree = 4096

// children lists pid's children, from the children file of each of its
// threads (a child is listed under the thread that started it).
func (p Proc) children(pid int) ([]int, error) {
	files, err := filepath.Glob(filepath.Join(string(p), strconv.Itoa(pid), "task", "*", "children"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("peerproc: process %d: no children files", pid)
	}
	var out []int
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, field := range strings.Fields(string(raw)) {
			if c, err := strconv.Atoi(field); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// childrenByParent maps each process to its children, from every
// process's parent, for a kernel without children files.
func (p Proc) childrenByParent() (map[int][]int, error) {
	entries, err := os.ReadDir(string(p))
	if err != nil {
		return nil, fmt.Errorf("peerproc: %w", err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a process
		}
		ppid, err := p.parent(pid)
		if err != nil {
			continue // ended meanwhile
		}
		children[ppid] = append(children[ppid], pid)
	}
	return children, nil
}

// parent is pid's parent pid, the fourth field of /proc/<pid>/stat (after
// the command's name in parentheses, which may hold spaces and
// parentheses itself).
func (p Proc) parent(pid int) (int, error) {
	raw, err := os.ReadFile(filepath.Join(string(p), strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	s := string(raw)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("peerproc: stat of %d: %q", pid, s)
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 2 {
		return 0, fmt.Errorf("peerproc: stat of %d: %q", pid, s)
	}
	return strconv.Atoi(fields[1])
}

// Listener accepts only the connections whose other end the process tree
// of Root holds: Accept closes every other connection, tells Refused, and
// waits for the next. Root is asked at each connection (a restarted
// process has a new pid); 0 refuses all.
type Listener struct {
	net.Listener
	// Proc is where the tables are read; empty: DefaultProc.
	Proc Proc
	// Root is the pid of the process the port is for.
	Root func() int
	// Refused, if set, is told of each connection refused and why.
	Refused func(remote net.Addr, err error)
}

// Accept returns the next connection of the process tree.
func (l *Listener) Accept() (net.Conn, error) {
	proc := l.Proc
	if proc == "" {
		proc = DefaultProc
	}
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if _, err := proc.FromTree(c, l.Root()); err != nil {
			_ = c.Close() // refused: nothing was read or written on it
			if l.Refused != nil {
				l.Refused(c.RemoteAddr(), err)
			}
			continue
		}
		return c, nil
	}
}
