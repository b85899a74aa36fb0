package sdk_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// fakeAgent is a local SDK server, as an agent serves it, that records the
// calls it gets. It accepts only its token.
type fakeAgent struct {
	sdkv1.UnimplementedSDKServiceServer
	addr  string
	token string

	mu sync.Mutex
	// calls holds every unary call and every stream opened, in order.
	calls []call
	// heartbeats counts heartbeats received on health streams.
	heartbeats int
	// healthStreams counts health streams that reached the handler;
	// cleanCloses those the client closed cleanly.
	healthStreams, cleanCloses int
	// openHealth counts health streams running now.
	openHealth int
	// closeHealthAfter ends each health stream, with an error, after that
	// many heartbeats on it (0: never).
	closeHealthAfter int
	gs               *sdkv1.GameServer
	changed          chan struct{} // closed and replaced when gs changes
	kick             chan struct{} // closed and replaced to end the watches
}

// call is one call as the server saw it.
type call struct {
	method string // short name, e.g. "Ready"
	auth   string // the authorization header
	peer   string // the client's address: one per connection
	at     time.Time
}

const testToken = "tok-7f3k2"

// startFakeAgent serves a fakeAgent on 127.0.0.1:0 for the test.
func startFakeAgent(t *testing.T) *fakeAgent {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fa := &fakeAgent{
		addr: lis.Addr().String(), token: testToken,
		gs:      &sdkv1.GameServer{Name: "fleets/arena/gameServers/gs-test", State: "STARTING", Address: "127.0.0.1"},
		changed: make(chan struct{}), kick: make(chan struct{}),
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(fa.authUnary), grpc.ChainStreamInterceptor(fa.authStream))
	sdkv1.RegisterSDKServiceServer(srv, fa)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(lis); err != nil {
			t.Errorf("fake agent: %v", err)
		}
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return fa
}

// record notes a call and checks its token.
func (fa *fakeAgent) record(ctx context.Context, fullMethod string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	c := call{method: fullMethod[len("/tether.sdk.v1.SDKService/"):], at: time.Now()}
	if v := md.Get("authorization"); len(v) > 0 {
		c.auth = v[0]
	}
	if p, ok := peer.FromContext(ctx); ok {
		c.peer = p.Addr.String()
	}
	fa.mu.Lock()
	fa.calls = append(fa.calls, c)
	fa.mu.Unlock()
	if c.auth != "Bearer "+fa.token {
		return status.Error(codes.Unauthenticated, "wrong token")
	}
	return nil
}

func (fa *fakeAgent) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := fa.record(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (fa *fakeAgent) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := fa.record(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// update changes the server and wakes the watches.
func (fa *fakeAgent) update(change func(*sdkv1.GameServer)) {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	change(fa.gs)
	close(fa.changed)
	fa.changed = make(chan struct{})
}

// endWatches ends the watch streams open now, as an agent does when it is
// done with a server.
func (fa *fakeAgent) endWatches() {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	close(fa.kick)
	fa.kick = make(chan struct{})
}

// snapshot returns the recorded calls and heartbeat counters.
func (fa *fakeAgent) snapshot() (calls []call, heartbeats, healthStreams, cleanCloses, openHealth int) {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	return append([]call(nil), fa.calls...), fa.heartbeats, fa.healthStreams, fa.cleanCloses, fa.openHealth
}

// callsTo returns the recorded calls of one method.
func (fa *fakeAgent) callsTo(method string) []call {
	calls, _, _, _, _ := fa.snapshot()
	var out []call
	for _, c := range calls {
		if c.method == method {
			out = append(out, c)
		}
	}
	return out
}

func (fa *fakeAgent) heartbeatCount() int {
	_, n, _, _, _ := fa.snapshot()
	return n
}

func (fa *fakeAgent) Ready(context.Context, *sdkv1.ReadyRequest) (*sdkv1.ReadyResponse, error) {
	fa.update(func(gs *sdkv1.GameServer) { gs.State = "READY" })
	return &sdkv1.ReadyResponse{}, nil
}

func (fa *fakeAgent) Health(context.Context, *sdkv1.HealthRequest) (*sdkv1.HealthResponse, error) {
	return &sdkv1.HealthResponse{}, nil
}

func (fa *fakeAgent) HealthStream(stream grpc.ClientStreamingServer[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse]) error {
	fa.mu.Lock()
	fa.healthStreams++
	fa.openHealth++
	closeAfter := fa.closeHealthAfter
	fa.mu.Unlock()
	defer func() {
		fa.mu.Lock()
		fa.openHealth--
		fa.mu.Unlock()
	}()
	for n := 0; ; {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			fa.mu.Lock()
			fa.cleanCloses++
			fa.mu.Unlock()
			return stream.SendAndClose(&sdkv1.HealthStreamResponse{})
		}
		if err != nil {
			return err
		}
		n++
		fa.mu.Lock()
		fa.heartbeats++
		fa.mu.Unlock()
		if closeAfter > 0 && n >= closeAfter {
			return status.Error(codes.Unavailable, "the fake agent ends this heartbeat stream")
		}
	}
}

func (fa *fakeAgent) Shutdown(context.Context, *sdkv1.ShutdownRequest) (*sdkv1.ShutdownResponse, error) {
	fa.update(func(gs *sdkv1.GameServer) {
		gs.State = "SHUTTING_DOWN"
		gs.Shutdown = shutdownNotice(30*time.Second, "SHUTDOWN_REQUESTED_BY_GAME")
	})
	return &sdkv1.ShutdownResponse{}, nil
}

func (fa *fakeAgent) GetGameServer(context.Context, *sdkv1.GetGameServerRequest) (*sdkv1.GameServer, error) {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	return proto.CloneOf(fa.gs), nil
}

func (fa *fakeAgent) WatchGameServer(_ *sdkv1.WatchGameServerRequest, stream grpc.ServerStreamingServer[sdkv1.GameServer]) error {
	fa.mu.Lock()
	kick := fa.kick
	fa.mu.Unlock()
	for {
		fa.mu.Lock()
		gs, changed := proto.CloneOf(fa.gs), fa.changed
		fa.mu.Unlock()
		if err := stream.Send(gs); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-kick:
			return nil
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func (fa *fakeAgent) SetLabel(_ context.Context, req *sdkv1.SetLabelRequest) (*sdkv1.SetLabelResponse, error) {
	fa.update(func(gs *sdkv1.GameServer) {
		if gs.Labels == nil {
			gs.Labels = map[string]string{}
		}
		gs.Labels[req.GetKey()] = req.GetValue()
	})
	return &sdkv1.SetLabelResponse{}, nil
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// holds checks that cond stays true for d: the way to see that something
// does not happen.
func holds(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if !cond() {
			return false
		}
		<-tick.C
	}
	return cond()
}
