package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// watchedListener wraps the SDK gRPC listener so that each connection notes
// when bytes last arrived from its peer and whether the peer ended it.
// grpc-go cancels a stream the same way whether its connection broke or the
// server's keepalive gave up on a silent peer (a half-open connection); these
// two facts tell the cases apart.
type watchedListener struct {
	net.Listener
	base time.Time // monotonic origin of the read times

	mu    sync.Mutex
	conns map[string]*watchedConn // open connections by remote address
}

func newWatchedListener(l net.Listener) *watchedListener {
	return &watchedListener{Listener: l, base: time.Now(), conns: map[string]*watchedConn{}}
}

// Accept wraps each accepted connection.
func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	wc := &watchedConn{Conn: c, l: l}
	wc.lastRead.Store(int64(time.Since(l.base)))
	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = wc
	l.mu.Unlock()
	return wc, nil
}

// lookup returns the open connection from a remote address, or nil.
func (l *watchedListener) lookup(remote string) *watchedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns[remote]
}

func (l *watchedListener) forget(c *watchedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns[c.RemoteAddr().String()] == c {
		delete(l.conns, c.RemoteAddr().String())
	}
}

// watchedConn is one SDK connection with its read facts.
type watchedConn struct {
	net.Conn
	l         *watchedListener
	lastRead  atomic.Int64 // since l.base, when bytes last arrived
	closed    atomic.Bool  // closed by this side
	peerEnded atomic.Bool  // a read failed before this side closed: EOF or reset from the peer
}

// Read notes when bytes arrive and whether the peer ended the connection.
func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(int64(time.Since(c.l.base)))
	}
	if err != nil && !c.closed.Load() && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.peerEnded.Store(true)
	}
	return n, err
}

// Close notes that this side closed the connection.
func (c *watchedConn) Close() error {
	c.closed.Store(true)
	c.l.forget(c)
	return c.Conn.Close()
}

// silence is how long no byte has arrived from the peer.
func (c *watchedConn) silence() time.Duration {
	return time.Since(c.l.base) - time.Duration(c.lastRead.Load())
}

// disconnectKind tells how an SDK stream ended. A stream the client closed
// is a clean close. A cancelled stream whose connection this side closed
// after the peer had been silent for longer than a keepalive ping and half
// its timeout was given up by the keepalive (a peer that answers pings is
// never silent for more than keepaliveTime plus a round trip); anything else
// (the peer's EOF or reset, a cancelled call, the agent stopping) is a reset.
func disconnectKind(handlerErr, ctxErr error, conn *watchedConn, keepaliveTime, keepaliveTimeout time.Duration) (eventsv1.DisconnectKind, string) {
	if handlerErr == nil && ctxErr == nil {
		return eventsv1.DisconnectKind_DISCONNECT_KIND_CLEAN_CLOSE, ""
	}
	detail := fmt.Sprint(errors.Join(handlerErr, ctxErr))
	if conn == nil || conn.peerEnded.Load() || !conn.closed.Load() {
		return eventsv1.DisconnectKind_DISCONNECT_KIND_RESET, detail
	}
	if silent := conn.silence(); silent >= keepaliveTime+keepaliveTimeout/2 {
		return eventsv1.DisconnectKind_DISCONNECT_KIND_KEEPALIVE_TIMEOUT, fmt.Sprintf(
			"no byte from the peer for %s: keepalive ping (every %s) not acknowledged within %s",
			silent.Round(time.Millisecond), keepaliveTime, keepaliveTimeout)
	}
	return eventsv1.DisconnectKind_DISCONNECT_KIND_RESET, detail
}
