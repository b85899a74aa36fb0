//go:build !linux

package peerproc

import (
	"errors"
	"net/netip"
)

// socketInode needs Linux's sock_diag: elsewhere no peer is ever known.
func socketInode(src, dst netip.AddrPort) (uint64, error) {
	return 0, errors.New("peerproc: finding a connection's process needs Linux")
}
