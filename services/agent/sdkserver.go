package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/platform/httpinput"
)

// shutdownGrace is the deadline a game server's own Shutdown call gets.
const shutdownGrace = 30 * time.Second

// sdkServer serves the local SDK to game server processes: gRPC, and REST
// through grpc-gateway. A call is authenticated by the process token it
// carries, whatever connection it arrives on.
type sdkServer struct {
	sdkv1.UnimplementedSDKServiceServer
	a       *Agent
	grpcLis *watchedListener
	httpLis net.Listener
}

func newSDKServer(a *Agent, grpcAddr, httpAddr string) (*sdkServer, error) {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return nil, fmt.Errorf("agent: listen SDK gRPC on %s: %w", grpcAddr, err)
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		_ = gl.Close() // Releasing a port on the error path.
		return nil, fmt.Errorf("agent: listen SDK REST on %s: %w", httpAddr, err)
	}
	return &sdkServer{a: a, grpcLis: newWatchedListener(gl), httpLis: hl}, nil
}

func (s *sdkServer) grpcAddr() string {
	if s.grpcLis == nil {
		return "" // in-process only
	}
	return s.grpcLis.Addr().String()
}

func (s *sdkServer) httpAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// minKeepaliveTime is grpc-go's floor for a server's keepalive ping interval.
const minKeepaliveTime = time.Second

// keepalive returns the SDK connections' keepalive ping interval and ack
// timeout: StreamKeepalive each, the interval no shorter than grpc-go allows.
func (s *sdkServer) keepalive() (time.Duration, time.Duration) {
	ka := s.a.opts.StreamKeepalive
	return max(ka, minKeepaliveTime), ka
}

// tokenKey carries the authenticated game server in a call's context.
type tokenKey struct{}

func (s *sdkServer) run(ctx context.Context) error {
	if s.grpcLis == nil {
		return nil // in-process only (LocalSDK): nothing to serve
	}
	kaTime, kaTimeout := s.keepalive()
	gs := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxSDKMessage),
		grpc.ChainUnaryInterceptor(s.authUnary),
		grpc.ChainStreamInterceptor(s.authStream),
		// Keepalive pings find a peer that vanished without closing (a
		// half-open connection) within Time+Timeout (docs/host-liveness.md).
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: kaTime, Timeout: kaTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	)
	sdkv1.RegisterSDKServiceServer(gs, s)
	conn, err := grpc.NewClient(s.grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("agent: SDK gateway client: %w", err)
	}
	defer conn.Close()
	gw := runtime.NewServeMux()
	if err := sdkv1.RegisterSDKServiceHandler(ctx, gw, conn); err != nil {
		return fmt.Errorf("agent: SDK gateway: %w", err)
	}
	hs := &http.Server{Handler: s.guardREST(gw), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := gs.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("agent: SDK gRPC: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := hs.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("agent: SDK REST: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		s.a.stopping.Store(true)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		err := hs.Shutdown(sctx)
		gs.Stop() // streams (Watch, HealthStream) never end on their own
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("agent: SDK REST shutdown: %w", err)
		}
		return nil
	})
	return g.Wait()
}

// authenticate finds the game server whose token the call carries.
// maxSDKMessage bounds an SDK request, REST body or gRPC message: the
// SDK's calls carry a few labels or a player token, never more.
const maxSDKMessage = 64 << 10

// guardREST refuses an SDK REST call without a known game server token
// before its body is read (a process with no token cannot make the agent
// read anything), and bounds the body to maxSDKMessage.
func (s *sdkServer) guardREST(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token == "" || s.a.byToken(token) == nil {
			s.a.log.Warn("SDK call rejected: missing or unknown token", "path", r.URL.Path, "remote", r.RemoteAddr, "token_present", token != "")
			sdkRefusal(w, http.StatusUnauthorized, `{"code":16,"message":"missing or unknown game server token: send Authorization: Bearer <the token read from the descriptor $TETHER_GAMESERVER_TOKEN_FD>"}`)
			return
		}
		if part := httpinput.InvalidUTF8(r); part != "" {
			sdkRefusal(w, http.StatusBadRequest, `{"code":3,"message":"`+part+` is not valid UTF-8"}`)
			return
		}
		if r.ContentLength > maxSDKMessage {
			sdkRefusal(w, http.StatusRequestEntityTooLarge, `{"code":3,"message":"the request body is larger than the SDK takes"}`)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxSDKMessage)
		next.ServeHTTP(w, r)
	})
}

// sdkRefusal answers an SDK REST call with a JSON error.
func sdkRefusal(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body) // the process may be gone; nothing more to do
}

func (s *sdkServer) authenticate(ctx context.Context, method string) (*gameServer, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	if v := md.Get("authorization"); len(v) > 0 {
		token, _ = strings.CutPrefix(v[0], "Bearer ")
	}
	if gs := s.a.byToken(token); token != "" && gs != nil {
		return gs, nil
	}
	remote := ""
	if p, ok := peer.FromContext(ctx); ok {
		remote = p.Addr.String()
	}
	s.a.log.Warn("SDK call rejected: missing or unknown token", "method", method, "remote", remote, "token_present", token != "")
	return nil, status.Error(codes.Unauthenticated, "missing or unknown game server token: send authorization: Bearer <the token read from the descriptor $TETHER_GAMESERVER_TOKEN_FD>")
}

func (s *sdkServer) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	gs, err := s.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if info.FullMethod == sdkv1.SDKService_Ready_FullMethodName {
		defer gs.readyCall()() // before the lock: a Ready that came in time is not timed out while it waits
	}
	if info.FullMethod != sdkv1.SDKService_Health_FullMethodName {
		gs.seen(ctx, transportOf(ctx)) // a heartbeat notes itself, without waiting (gameServer.heartbeat)
	}
	return handler(context.WithValue(ctx, tokenKey{}, gs), req)
}

// authedStream carries the authenticated server to stream handlers.
type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

func (s *sdkServer) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	gs, err := s.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	ctx := context.WithValue(ss.Context(), tokenKey{}, gs)
	if transportOf(ctx) == "rest" {
		// A REST watch is a request, not a held SDK connection.
		gs.seen(ctx, "rest")
		return handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
	}
	// The connection is looked up while the stream is open (it is then
	// too); how it ended tells a keepalive timeout from a reset.
	conn := s.grpcLis.lookup(remoteOf(ctx))
	gs.streamOpened(ctx)
	err = handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
	kaTime, kaTimeout := s.keepalive()
	kind, detail := disconnectKind(err, ss.Context().Err(), conn, kaTime, kaTimeout)
	gs.streamClosed(kind, detail)
	return err
}

// transportOf tells a REST call (through the gateway) from a gRPC one.
func transportOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("x-forwarded-host")) > 0 || len(md.Get("grpcgateway-user-agent")) > 0 {
		return "rest"
	}
	return "grpc"
}

func serverOf(ctx context.Context) *gameServer { return ctx.Value(tokenKey{}).(*gameServer) }

// Ready marks the server ready. Calling it again while READY is a no-op,
// decided on the agent's copy of the server, which is what the game was
// shown: an allocation the copy does not show yet is one the game has not
// heard of (it hears through the copy, and a player's call folds it into
// the copy first), so a Ready then cannot mean its match is over.
func (s *sdkServer) Ready(ctx context.Context, _ *sdkv1.ReadyRequest) (*sdkv1.ReadyResponse, error) {
	gs := serverOf(ctx)
	if gs.lifecycle() == eventsv1.Lifecycle_LIFECYCLE_READY {
		return &sdkv1.ReadyResponse{}, nil
	}
	if err := gs.record(ctx, events.MarkReady{}); err != nil {
		return nil, sdkError(err)
	}
	gs.log.Info("game server ready")
	return &sdkv1.ReadyResponse{}, nil
}

// Health records one heartbeat.
func (s *sdkServer) Health(ctx context.Context, _ *sdkv1.HealthRequest) (*sdkv1.HealthResponse, error) {
	// Over REST too: a unary heartbeat holds no connection open, and counts.
	serverOf(ctx).heartbeat(ctx, transportOf(ctx))
	return &sdkv1.HealthResponse{}, nil
}

// HealthStream records a heartbeat per message until the client closes.
func (s *sdkServer) HealthStream(stream grpc.ClientStreamingServer[sdkv1.HealthStreamRequest, sdkv1.HealthStreamResponse]) error {
	gs := serverOf(stream.Context())
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&sdkv1.HealthStreamResponse{})
			}
			return err
		}
		gs.heartbeat(stream.Context(), "") // the open stream noted the connection
	}
}

// Shutdown: the game asks to stop.
func (s *sdkServer) Shutdown(ctx context.Context, _ *sdkv1.ShutdownRequest) (*sdkv1.ShutdownResponse, error) {
	gs := serverOf(ctx)
	deadline := s.a.opts.Clock.Now().Add(shutdownGrace)
	if err := gs.record(ctx, events.RequestShutdown{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, Deadline: deadline,
		Evidence: &eventsv1.Evidence{RequestedBy: gs.name}}); err != nil {
		return nil, sdkError(err)
	}
	gs.stop(eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, deadline)
	return &sdkv1.ShutdownResponse{}, nil
}

// GetGameServer returns the server as the agent knows it.
func (s *sdkServer) GetGameServer(ctx context.Context, _ *sdkv1.GetGameServerRequest) (*sdkv1.GameServer, error) {
	return serverOf(ctx).view(), nil
}

// WatchGameServer streams the server on every change until the client
// leaves or the server is finished.
func (s *sdkServer) WatchGameServer(_ *sdkv1.WatchGameServerRequest, stream grpc.ServerStreamingServer[sdkv1.GameServer]) error {
	gs := serverOf(stream.Context())
	for {
		gs.mu.Lock()
		changed, done, allocation := gs.changed, gs.done, gs.notifyTrace
		gs.notifyTrace = trace.SpanContext{}
		gs.mu.Unlock()
		if err := gs.sendTraced(stream, allocation); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-done:
			return nil
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// SetLabel sets one label.
func (s *sdkServer) SetLabel(ctx context.Context, req *sdkv1.SetLabelRequest) (*sdkv1.SetLabelResponse, error) {
	if err := serverOf(ctx).record(ctx, events.SetLabels{Set: map[string]string{req.GetKey(): req.GetValue()}}); err != nil {
		return nil, sdkError(err)
	}
	return &sdkv1.SetLabelResponse{}, nil
}

// sdkError maps domain errors to SDK status codes.
func sdkError(err error) error {
	var te *events.TransitionError
	var ve *events.ValidationError
	var re *events.RefusedError
	if _, ok := status.FromError(err); ok {
		return err // decided already, e.g. UNAVAILABLE while NATS is away
	}
	switch {
	case errors.As(err, &re):
		if re.Reason == events.RefusedPlayerSessionUnknown || re.Reason == events.RefusedGameSessionUnknown {
			return status.Error(codes.NotFound, re.Reason+": "+re.Msg)
		}
		return status.Error(codes.FailedPrecondition, re.Reason+": "+re.Msg)
	case errors.As(err, &te):
		return status.Error(codes.FailedPrecondition, te.Error())
	case errors.As(err, &ve):
		return status.Error(codes.InvalidArgument, ve.Error())
	}
	return status.Error(codes.Unavailable, "the agent could not record this: "+err.Error())
}

// heartbeat notes a heartbeat from the process, a call carrying its token
// over transport ("": one the caller noted already, as an open
// HealthStream does).
//
// It never waits for an append. The server's lock is held while its events
// are appended, and an append can take seconds when NATS is busy: a
// heartbeat that waited behind it held up the game's next heartbeat too,
// and the agent counted as missed the periods it was itself too busy to
// take the beats in (at 100,000 simulated servers, healthy servers were
// judged FAILED this way; docs/scaling.md). So the arrival is noted first,
// lock-free (lastHeartbeat), and periods are counted from it. If the lock
// is free and the beat changes nothing to record, it is folded in place.
// Otherwise (the lock is held, or the beat ends a degradation or proves a
// connection the state does not show) a background fold takes the lock and
// folds it, recording HealthRecovered or SdkConnected; the health
// evaluation folds what is pending before it judges, so a verdict never
// waits for the background fold either.
func (gs *gameServer) heartbeat(ctx context.Context, transport string) {
	now := gs.a.opts.Clock.Now()
	gs.lastHeartbeat.Store(now.UnixNano())
	gs.foldSoon(ctx, transport, now, true)
}

// foldSoon folds a call that must not wait for the server's lock: the
// connection it proves over transport ("": none to note) and, if beat, its
// heartbeat at now. In place if the lock is free and nothing is to be
// recorded; otherwise the connection is left pending and a background fold
// takes it (the heartbeat's arrival is in lastHeartbeat already).
func (gs *gameServer) foldSoon(ctx context.Context, transport string, now time.Time, beat bool) {
	if gs.mu.TryLock() {
		inPlace := (transport == "" || gs.state.GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED) &&
			(!beat || (gs.check != nil && gs.check.reported == 0))
		if inPlace && gs.check != nil {
			if transport != "" {
				gs.check.connected()
			}
			if beat {
				gs.check.heartbeat(now)
			}
		}
		gs.mu.Unlock()
		if inPlace {
			return
		}
	}
	if transport != "" {
		gs.pendingConn.Store(&pendingConnect{transport: transport, remote: remoteOf(ctx), at: now})
	}
	gs.foldInBackground(ctx)
}

// lastArrival is when the process's last heartbeat arrived (zero: none
// yet), read without the lock.
func (gs *gameServer) lastArrival() time.Time {
	if ns := gs.lastHeartbeat.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// pendingConnect is a connection a heartbeat proved that is not folded yet.
type pendingConnect struct {
	transport, remote string
	at                time.Time
}

// foldInBackground folds what heartbeats left pending on a goroutine of
// its own, which waits for the server's lock: at most one per server at a
// time, and none once the agent stops (what is pending then is not
// recorded, as no connection change is while the agent stops).
func (gs *gameServer) foldInBackground(ctx context.Context) {
	if !gs.folding.CompareAndSwap(false, true) {
		return // the running fold takes this beat too, or the evaluation does
	}
	base := context.WithoutCancel(ctx) // the call's values (its trace), not its end
	started := gs.a.background.start(func() {
		for {
			gs.mu.Lock()
			if gs.a.stopping.Load() {
				gs.pendingConn.Store(nil) // no connection change is recorded while the agent stops
			} else {
				// The deadline is the appends', not the wait for the lock.
				ctx, cancel := context.WithTimeout(base, finalEventTimeout)
				gs.foldPendingLocked(ctx)
				cancel()
			}
			gs.mu.Unlock()
			gs.folding.Store(false)
			// A connection noted after the fold read it, whose own call
			// found the fold still running: fold again.
			if gs.pendingConn.Load() == nil || !gs.folding.CompareAndSwap(false, true) {
				return
			}
		}
	})
	if !started {
		gs.folding.Store(false)
	}
}

// foldPendingLocked folds what heartbeat calls noted without the lock: the
// connection they proved (unless a disconnect was recorded since), then
// the last beat's arrival.
func (gs *gameServer) foldPendingLocked(ctx context.Context) {
	if c := gs.pendingConn.Swap(nil); c != nil {
		if gs.check == nil || gs.check.disconnectedAt.IsZero() || c.at.After(gs.check.disconnectedAt) {
			gs.connectedFromLocked(ctx, c.transport, c.remote)
		}
	}
	if at := gs.lastArrival(); gs.check != nil && at.After(gs.check.lastBeat) {
		gs.heartbeatLocked(ctx, at)
	}
}

// heartbeatLocked folds a heartbeat that arrived at at into the health
// contract.
func (gs *gameServer) heartbeatLocked(ctx context.Context, at time.Time) {
	if gs.check == nil {
		return
	}
	if gs.check.heartbeat(at) {
		if err := gs.recordLocked(ctx, events.RecordHeartbeatsResumed{At: at}); err != nil {
			gs.log.Warn("record heartbeats resumed", "err", err)
		}
	}
}

// connectedLocked records that a call with the process token arrived: the
// SDK is connected again, whatever the connection, and a grace window closes.
func (gs *gameServer) connectedLocked(ctx context.Context, transport string) {
	gs.connectedFromLocked(ctx, transport, remoteOf(ctx))
}

// connectedFromLocked is connectedLocked for a call from remote.
func (gs *gameServer) connectedFromLocked(ctx context.Context, transport, remote string) {
	if gs.check != nil {
		gs.check.connected()
	}
	if gs.state.GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED {
		return
	}
	if err := gs.recordLocked(ctx, events.RecordSDKConnected{Transport: transport, RemoteAddress: remote}); err != nil {
		gs.log.Warn("record SDK connected", "err", err)
	}
}

// seen handles any call carrying the token: it proves the SDK is
// connected, whatever the connection. Only Health calls are heartbeats.
func (gs *gameServer) seen(ctx context.Context, transport string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.connectedLocked(ctx, transport)
}

// streamOpened counts an SDK stream opened and notes the connection it
// proves without waiting for the server's lock: the stream's heartbeats,
// read only once this returns, are not held behind the server's appends
// (gameServer.heartbeat).
func (gs *gameServer) streamOpened(ctx context.Context) {
	gs.streams.Add(1)
	gs.foldSoon(ctx, "grpc-stream", gs.a.opts.Clock.Now(), false)
}

// streamClosed records a disconnect, of the kind the closing stream ended
// with, when the last open SDK stream ends.
func (gs *gameServer) streamClosed(kind eventsv1.DisconnectKind, detail string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.streams.Add(-1) > 0 || gs.state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
		return
	}
	if gs.a.stopping.Load() {
		// The agent ends the stream as it stops; the game server runs on
		// and its SDK reconnects to the next agent on the host.
		return
	}
	select {
	case <-gs.done:
		return // the process is gone; its exit is the story
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalEventTimeout)
	defer cancel()
	// A heartbeat's connection still pending came before this end: folded
	// first, it cannot undo the disconnect afterwards.
	gs.foldPendingLocked(ctx)
	now := gs.a.opts.Clock.Now()
	if gs.check != nil {
		gs.check.disconnected(now)
	}
	if err := gs.recordLocked(ctx, events.RecordSDKDisconnected{Kind: kind, At: now, Detail: detail}); err != nil {
		gs.log.Warn("record SDK disconnected", "err", err)
	}
}

func remoteOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr.String()
	}
	return ""
}
