//go:build unix

// Package freeport gives tests blocks of consecutive loopback ports that
// are free when handed out and that no other test process is handed while
// the test runs: each block's chunks are locked (flock) in a directory
// shared by every test process on the machine, and each port is checked by
// binding it, TCP and UDP, on 127.0.0.1.
//
// It replaces port ranges derived from the process id, which two test
// binaries (go test runs packages in parallel) could share.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// The range blocks are taken from: above the well-known and registered
// ports most services use, below Linux's default ephemeral range
// (32768–60999), so the kernel does not hand them to outgoing connections.
const (
	Low  = 20000
	High = 32000
	// chunk is the unit a block is locked in.
	chunk = 10
)

// lockDir holds one lock file per chunk.
var lockDir = filepath.Join(os.TempDir(), "tether-freeport")

// Block returns the first of n consecutive free ports on 127.0.0.1,
// reserved for t until it ends. It fails t if no block is free.
func Block(t testing.TB, n int) int {
	t.Helper()
	base, release, err := take(n)
	if err != nil {
		t.Fatalf("freeport: %v", err)
	}
	t.Cleanup(release)
	return base
}

// take finds and locks a free block of n ports, trying each aligned block
// of the range once, from a random one.
func take(n int) (base int, release func(), err error) {
	if n < 1 || n > High-Low {
		return 0, nil, fmt.Errorf("a block of %d ports", n)
	}
	if err := os.MkdirAll(lockDir, 0o777); err != nil {
		return 0, nil, err
	}
	chunks := (n + chunk - 1) / chunk
	blocks := (High - Low) / (chunks * chunk)
	first := rand.IntN(blocks)
	for i := range blocks {
		base := Low + (first+i)%blocks*chunks*chunk
		release, ok, err := lock(base, chunks)
		if err != nil {
			return 0, nil, err
		}
		if !ok {
			continue
		}
		if free(base, n) {
			return base, release, nil
		}
		release()
	}
	return 0, nil, fmt.Errorf("no block of %d free ports in %d–%d", n, Low, High)
}

// lock takes the chunks from base without waiting; ok is false if another
// process holds one of them.
func lock(base, chunks int) (release func(), ok bool, err error) {
	var held []*os.File
	release = func() {
		for _, f := range held {
			_ = f.Close() // closing the file releases its lock
		}
	}
	for c := range chunks {
		f, err := os.OpenFile(filepath.Join(lockDir, strconv.Itoa(base+c*chunk)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			release()
			return nil, false, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			release()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, false, nil
			}
			return nil, false, err
		}
		held = append(held, f)
	}
	return release, true, nil
}

// free reports whether ports base to base+n-1 can be bound on 127.0.0.1,
// TCP and UDP.
func free(base, n int) bool {
	for p := base; p < base+n; p++ {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		_ = l.Close()
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		_ = u.Close()
	}
	return true
}
