package agent_test

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// blackholeProxy forwards TCP to a target until told to swallow everything:
// then both sockets stay open but no byte crosses, as when a peer vanishes
// or a middlebox drops a flow without telling either side (half-open).
type blackholeProxy struct {
	l        net.Listener
	target   string
	swallow  atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
	finished sync.WaitGroup
}

func newBlackholeProxy(t *testing.T, target string) *blackholeProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackholeProxy{l: l, target: target}
	p.finished.Add(1)
	go func() {
		defer p.finished.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.finished.Add(2)
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.finished.Wait()
	})
	return p
}

func (p *blackholeProxy) pipe(from, to net.Conn) {
	defer p.finished.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		if p.swallow.Load() {
			continue // read and drop: nothing reaches the other side, nothing closes
		}
		if _, err := to.Write(buf[:n]); err != nil {
			return
		}
	}
}

// reset closes every proxied connection abruptly: SO_LINGER 0 makes each
// close send a TCP RST, as when a middlebox or a dying peer kills a flow.
func (p *blackholeProxy) reset(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if err := c.(*net.TCPConn).SetLinger(0); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}

// openHealthStream starts a server, opens its heartbeat stream through a
// fresh proxy and waits until the agent records the connection.
func openHealthStream(t *testing.T, h *harness, name string) (*blackholeProxy, grpc.ClientStreamingClient[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse], int32) {
	t.Helper()
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)
	token := h.agent.ProcessToken(int(started.GetPid()))

	proxy := newBlackholeProxy(t, h.agent.SDKAddr())
	// The client sends no keepalives of its own: in the half-open case it
	// plays a peer that is gone.
	conn, err := grpc.NewClient(proxy.l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := metadata.AppendToOutgoingContext(h.ctx, "authorization", "Bearer "+token)
	stream, err := sdkv1.NewSDKServiceClient(conn).HealthStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&sdkv1.HealthStreamRequest{}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "SdkConnected")
	return proxy, stream, started.GetPid()
}

// How an SDK stream ends is recorded: a half-open connection given up by
// the keepalive, a connection reset, and a stream the client closed are
// three different kinds; none of them touches the lifecycle.
func TestSDKDisconnectKinds(t *testing.T) {
	const keepalive = 200 * time.Millisecond
	h := newHarnessWith(t, keepalive)
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, p *blackholeProxy, s grpc.ClientStreamingClient[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse])
		want eventsv1.DisconnectKind
	}{
		{"half-open", func(_ *testing.T, p *blackholeProxy, _ grpc.ClientStreamingClient[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse]) {
			// No FIN, no RST ever arrives: only the agent's keepalive can notice.
			p.swallow.Store(true)
		}, eventsv1.DisconnectKind_DISCONNECT_KIND_KEEPALIVE_TIMEOUT},
		{"reset", func(t *testing.T, p *blackholeProxy, _ grpc.ClientStreamingClient[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse]) {
			p.reset(t)
		}, eventsv1.DisconnectKind_DISCONNECT_KIND_RESET},
		{"clean-close", func(t *testing.T, _ *blackholeProxy, s grpc.ClientStreamingClient[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse]) {
			if _, err := s.CloseAndRecv(); err != nil {
				t.Fatal(err)
			}
		}, eventsv1.DisconnectKind_DISCONNECT_KIND_CLEAN_CLOSE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "fleets/arena/gameServers/gs-" + tc.name
			proxy, stream, pid := openHealthStream(t, h, name)
			ended := time.Now()
			tc.end(t, proxy, stream)

			e := h.waitEvent(name, "SdkDisconnected")
			disc := e.Data.(*eventsv1.SdkDisconnected)
			if disc.GetKind() != tc.want {
				t.Fatalf("disconnect recorded as %s, want %s: %v", disc.GetKind(), tc.want, disc)
			}
			if disc.GetGraceDeadline() == nil {
				t.Fatal("no grace deadline on the disconnect")
			}
			if tc.want == eventsv1.DisconnectKind_DISCONNECT_KIND_KEEPALIVE_TIMEOUT {
				// Detected within keepalive time (grpc-go's floor: 1 s) +
				// timeout, plus scheduling slack.
				if lag := e.Time.Sub(ended); lag > max(keepalive, time.Second)+keepalive+2*time.Second {
					t.Fatalf("half-open stream noticed after %s, keepalive %s", lag, keepalive)
				}
				t.Logf("half-open stream noticed after %s: %s", e.Time.Sub(ended).Round(time.Millisecond), disc.GetDetail())
			}
			// The process is fine: nothing but the connection changed.
			if _, err := os.Stat("/proc/" + strconv.Itoa(int(pid))); err != nil {
				t.Fatalf("process gone after a connection loss: %v", err)
			}
			for _, e := range h.history(name) {
				if strings.HasPrefix(e.Type, "GameServerUnhealthy") || e.Type == "GameServerTerminated" {
					t.Fatalf("a connection loss changed the lifecycle: %s", e.Type)
				}
			}
		})
	}
}
