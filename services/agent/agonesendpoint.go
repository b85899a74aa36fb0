package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/tetherhq/tether/services/platform/peerproc"
)

// The environment variables an Agones SDK finds its SDK server by.
const (
	EnvAgonesGRPCPort = "AGONES_SDK_GRPC_PORT"
	EnvAgonesHTTPPort = "AGONES_SDK_HTTP_PORT"
	EnvAgonesGRPCHost = "AGONES_SDK_GRPC_HOST"
)

// agonesEndpoint is one game server's Agones SDK server: a pair of
// loopback ports of its own (gRPC, and HTTP for REST), whose listeners
// accept only connections held by the server's process or its
// descendants (peerproc.Listener, Root the running process's pid, asked
// at each connection: a restarted process has a new one).
//
// One gRPC server per game server, not one for all: the server a call
// reaches is then the game server it comes from, with no table from a
// connection's local address to a game server to keep in step with the
// listeners, and closing a game server's endpoint ends its streams and
// nobody else's. A gRPC server costs little next to a game server's
// process.
type agonesEndpoint struct {
	ports    []int
	grpcLis  net.Listener
	httpLis  net.Listener
	grpcSrv  *grpc.Server
	httpSrv  *http.Server
	srv      *agonesServer
	released func()
}

// agonesSupported: only a real process can be proved to hold a
// connection (peerproc reads its descriptors); a simulated one
// (services/sim) gets no Agones endpoint.
func (a *Agent) agonesSupported() bool {
	_, ok := a.opts.Processes.(OSProcesses)
	return ok
}

// openAgones takes a port pair for gs from the Agones port range and
// starts serving Agones' SDK on it; nil, nil where the agent's processes
// are simulated.
func (a *Agent) openAgones(gs *gameServer) (*agonesEndpoint, error) {
	if !a.agonesSupported() {
		return nil, nil
	}
	root := func() int { return gs.processPid(processPidWait) }
	refused := func(remote net.Addr, err error) {
		gs.log.Warn("Agones SDK connection refused: not the game server's process", "remote", remote.String(), "err", err)
	}
	e, err := a.listenAgones(root, refused)
	if err != nil {
		return nil, err
	}
	caller := sdkCaller{gs: gs}
	e.srv = &agonesServer{ops: agentSDK{a: a}, identify: func(context.Context) (sdkCaller, bool) { return caller, true }}
	e.grpcSrv = e.srv.grpcServer()
	rest, err := e.srv.restHandler(context.Background())
	if err != nil {
		e.close()
		return nil, err
	}
	e.httpSrv = &http.Server{Handler: rest, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := e.httpSrv.Serve(e.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			gs.log.Warn("Agones SDK REST server ended", "err", err)
		}
	}()
	go func() {
		if err := e.grpcSrv.Serve(e.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			gs.log.Warn("Agones SDK gRPC server ended", "err", err)
		}
	}()
	return e, nil
}

// listenAgones takes a port pair from the Agones range and listens on it.
// The pool's check that a port is free is only a probe: another agent on
// the machine (tether dev's hosts, tests run side by side) may bind the
// same port between the probe and the listen. Such a pair is given back
// and the next one tried, a bounded number of times, so that a race for
// ports never fails a game server's start.
func (a *Agent) listenAgones(root func() int, refused func(net.Addr, error)) (*agonesEndpoint, error) {
	var last error
	for range agonesListenTries {
		ports, err := a.agonesPorts.take("127.0.0.1", 2)
		if err != nil {
			return nil, err
		}
		e := &agonesEndpoint{ports: ports, released: func() { a.agonesPorts.release(ports) }}
		if e.grpcLis, err = listenPeer(ports[0], root, refused); err == nil {
			e.httpLis, err = listenPeer(ports[1], root, refused)
		}
		if err == nil {
			return e, nil
		}
		e.close()
		last = err
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("agent: no free Agones SDK port pair in %d tries: %w", agonesListenTries, last)
}

// agonesListenTries bounds listenAgones's tries.
const agonesListenTries = 20

// listenPeer listens on a loopback port for the process tree of root only.
func listenPeer(port int, root func() int, refused func(net.Addr, error)) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("agent: listen Agones SDK on 127.0.0.1:%d: %w", port, err)
	}
	return &peerproc.Listener{Listener: l, Root: root, Refused: refused}, nil
}

// env adds the variables an Agones SDK reads to a process's environment.
func (e *agonesEndpoint) env(env map[string]string) {
	if e == nil {
		return
	}
	env[EnvAgonesGRPCHost] = "127.0.0.1"
	env[EnvAgonesGRPCPort] = strconv.Itoa(e.ports[0])
	env[EnvAgonesHTTPPort] = strconv.Itoa(e.ports[1])
}

// close stops serving, ends the endpoint's streams and gives its ports
// back.
func (e *agonesEndpoint) close() {
	if e == nil {
		return
	}
	if e.grpcSrv != nil {
		e.grpcSrv.Stop()
	}
	if e.httpSrv != nil {
		_ = e.httpSrv.Close() // ends the watches; nothing to wait for
	}
	for _, l := range []net.Listener{e.grpcLis, e.httpLis} {
		if l != nil {
			_ = l.Close() // Stop closed it already, or it never served
		}
	}
	e.released()
}
