//go:build linux

package peerproc

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The kernel's answers are read for what they are: an inode, "no such
// socket" (ENOENT), another errno, and a short or unknown answer refused
// rather than read past its end.
func TestDiagAnswers(t *testing.T) {
	ne := binary.NativeEndian
	msg := func(typ uint16, body []byte) []byte {
		b := make([]byte, nlmsgHeaderLen+len(body))
		ne.PutUint32(b[0:], uint32(len(b)))
		ne.PutUint16(b[4:], typ)
		copy(b[nlmsgHeaderLen:], body)
		return b
	}
	errno := func(e syscall.Errno) []byte {
		b := make([]byte, 4)
		ne.PutUint32(b, uint32(-int32(e)))
		return b
	}
	diag := make([]byte, diagMsgInode+4)
	ne.PutUint32(diag[diagMsgInode:], 424242)
	if inode, err := parseDiagAnswer(msg(sockDiagByFamily, diag)); err != nil || inode != 424242 {
		t.Errorf("an answer with inode 424242: %d, %v", inode, err)
	}
	if _, err := parseDiagAnswer(msg(unix.NLMSG_ERROR, errno(unix.ENOENT))); !errors.Is(err, errNoSocket) {
		t.Errorf("ENOENT: %v, want errNoSocket", err)
	}
	if _, err := parseDiagAnswer(msg(unix.NLMSG_ERROR, errno(unix.EPERM))); !errors.Is(err, unix.EPERM) {
		t.Errorf("EPERM: %v, want it", err)
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"a short header": make([]byte, 8),
		"a short error":  msg(unix.NLMSG_ERROR, nil),
		"a short answer": msg(sockDiagByFamily, diag[:10]),
		"another type":   msg(3, diag),
	} {
		if _, err := parseDiagAnswer(b); err == nil || !strings.HasPrefix(err.Error(), "sock_diag") {
			t.Errorf("%s: %v, want a sock_diag error", name, err)
		}
	}
}

// The request names the socket as the kernel keys it: ports in network
// order, IPv4 addresses in the first 4 bytes, no cookie to check.
func TestDiagRequestLayout(t *testing.T) {
	src, dst := netip.MustParseAddrPort("127.0.0.2:40000"), netip.MustParseAddrPort("127.0.0.1:8300")
	b := diagRequest(unix.AF_INET, src, dst)
	ne := binary.NativeEndian
	if len(b) != nlmsgHeaderLen+diagReqLen || ne.Uint32(b) != uint32(len(b)) {
		t.Fatalf("length %d, header says %d", len(b), ne.Uint32(b))
	}
	if flags := ne.Uint16(b[6:]); flags&unix.NLM_F_DUMP != 0 || flags&unix.NLM_F_REQUEST == 0 {
		t.Errorf("flags %#x: want a request, not a dump", flags)
	}
	id := b[nlmsgHeaderLen+8:]
	if sp, dp := binary.BigEndian.Uint16(id[0:]), binary.BigEndian.Uint16(id[2:]); sp != 40000 || dp != 8300 {
		t.Errorf("ports %d -> %d", sp, dp)
	}
	if got := netip.AddrFrom4([4]byte(id[4:8])); got != src.Addr() {
		t.Errorf("source %s", got)
	}
	if got := netip.AddrFrom4([4]byte(id[20:24])); got != dst.Addr() {
		t.Errorf("destination %s", got)
	}
	if ne.Uint32(id[40:]) != noCookie || ne.Uint32(id[44:]) != noCookie {
		t.Error("a cookie is set")
	}
}
