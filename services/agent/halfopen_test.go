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

func TestHalfOpenSDKStreamIsDetectedByKeepalive(t *testing.T) {
	h := newHarnessWith(t, 200*time.Millisecond)
	name := "fleets/arena/gameServers/gs-halfopen"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)
	token := processEnv(t, started.GetPid())["TETHER_GAMESERVER_TOKEN"]

	proxy := newBlackholeProxy(t, h.agent.SDKAddr())
	// The client sends no keepalives of its own: it plays a peer that is gone.
	conn, err := grpc.NewClient(proxy.l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(h.ctx, "authorization", "Bearer "+token)
	stream, err := sdkv1.NewSDKServiceClient(conn).HealthStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&sdkv1.HealthStreamRequest{}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "SdkConnected")
	proxy.swallow.Store(true)

	// No FIN, no RST ever arrives: only the agent's keepalive can notice.
	disc := h.waitEvent(name, "SdkDisconnected").Data.(*eventsv1.SdkDisconnected)
	if disc.GetKind() == eventsv1.DisconnectKind_DISCONNECT_KIND_CLEAN_CLOSE {
		t.Fatalf("a vanished peer was recorded as a clean close: %v", disc)
	}
	if disc.GetGraceDeadline() == nil {
		t.Fatal("no grace deadline on the disconnect")
	}
	// The process is fine: nothing but the connection changed.
	if _, err := os.Stat("/proc/" + strconv.Itoa(int(started.GetPid()))); err != nil {
		t.Fatalf("process gone after a connection loss: %v", err)
	}
	for _, e := range h.history(name) {
		if strings.HasPrefix(e.Type, "GameServerUnhealthy") || e.Type == "GameServerTerminated" {
			t.Fatalf("a connection loss changed the lifecycle: %s", e.Type)
		}
	}
}
