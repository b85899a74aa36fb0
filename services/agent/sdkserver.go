package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/platform/httpinput"
)

// sdkServer serves Tether's local SDK (tether.sdk.v1) to game server
// processes: gRPC, and REST through grpc-gateway. A call is authenticated
// by the process token it carries, whatever connection it arrives on. It
// reaches the agent only through ops (sdkOps), as every SDK protocol does.
type sdkServer struct {
	sdkv1.UnimplementedSDKServiceServer
	ops sdkOps
	log *slog.Logger
	// streamKeepalive is Options.StreamKeepalive (keepalive).
	streamKeepalive time.Duration
	grpcLis         *watchedListener
	httpLis         net.Listener
}

// newSDKServer binds the SDK's gRPC and REST listeners.
func newSDKServer(ops sdkOps, log *slog.Logger, streamKeepalive time.Duration, grpcAddr, httpAddr string) (*sdkServer, error) {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return nil, fmt.Errorf("agent: listen SDK gRPC on %s: %w", grpcAddr, err)
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		_ = gl.Close() // Releasing a port on the error path.
		return nil, fmt.Errorf("agent: listen SDK REST on %s: %w", httpAddr, err)
	}
	return &sdkServer{ops: ops, log: log, streamKeepalive: streamKeepalive, grpcLis: newWatchedListener(gl), httpLis: hl}, nil
}

// grpcAddr is the address of the gRPC listener ("": none).
func (s *sdkServer) grpcAddr() string {
	if s.grpcLis == nil {
		return "" // in-process only
	}
	return s.grpcLis.Addr().String()
}

// httpAddr is the address of the REST listener ("": none).
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
	ka := s.streamKeepalive
	return max(ka, minKeepaliveTime), ka
}

// callerKey carries the authenticated game server (an sdkCaller) in a
// call's context.
type callerKey struct{}

// run serves the SDK until ctx ends.
func (s *sdkServer) run(ctx context.Context) error {
	if s.grpcLis == nil {
		return nil // in-process only (LocalSDK): nothing to serve
	}
	kaTime, kaTimeout := s.keepalive()
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxSDKMessage),
		grpc.ChainUnaryInterceptor(s.authUnary),
		grpc.ChainStreamInterceptor(s.authStream),
		// Keepalive pings find a peer that vanished without closing (a
		// half-open connection) within Time+Timeout (docs/host-liveness.md).
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: kaTime, Timeout: kaTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	)
	sdkv1.RegisterSDKServiceServer(srv, s)
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
		if err := srv.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
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
		s.ops.Stopping()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		err := hs.Shutdown(sctx)
		srv.Stop() // streams (Watch, HealthStream) never end on their own
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("agent: SDK REST shutdown: %w", err)
		}
		return nil
	})
	return g.Wait()
}

// maxSDKMessage bounds an SDK request, REST body or gRPC message: the
// SDK's calls carry a few labels or a player token, never more.
const maxSDKMessage = 64 << 10

// guardREST refuses an SDK REST call without a known game server token
// before its body is read (a process with no token cannot make the agent
// read anything), and bounds the body to maxSDKMessage.
func (s *sdkServer) guardREST(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, known := s.ops.ByToken(token); token == "" || !known {
			s.log.Warn("SDK call rejected: missing or unknown token", "path", r.URL.Path, "remote", r.RemoteAddr, "token_present", token != "")
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

// authenticate finds the game server whose token the call carries.
func (s *sdkServer) authenticate(ctx context.Context, method string) (sdkCaller, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	if v := md.Get("authorization"); len(v) > 0 {
		token, _ = strings.CutPrefix(v[0], "Bearer ")
	}
	if c, ok := s.ops.ByToken(token); token != "" && ok {
		return c, nil
	}
	remote := ""
	if p, ok := peer.FromContext(ctx); ok {
		remote = p.Addr.String()
	}
	s.log.Warn("SDK call rejected: missing or unknown token", "method", method, "remote", remote, "token_present", token != "")
	return sdkCaller{}, status.Error(codes.Unauthenticated, "missing or unknown game server token: send authorization: Bearer <the token read from the descriptor $TETHER_GAMESERVER_TOKEN_FD>")
}

// authUnary authenticates a unary call and notes it (sdkOps: a Ready
// first, every call but a health ping).
func (s *sdkServer) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c, err := s.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if info.FullMethod == sdkv1.SDKService_Ready_FullMethodName {
		defer s.ops.ReadyCall(c)() // before the lock: a Ready that came in time is not timed out while it waits
	}
	if info.FullMethod != sdkv1.SDKService_Health_FullMethodName {
		s.ops.NoteCall(ctx, c, transportOf(ctx)) // a health ping notes itself, without waiting (sdkOps.HealthPing)
	}
	return handler(context.WithValue(ctx, callerKey{}, c), req)
}

// authedStream carries the authenticated server to stream handlers.
type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context is the stream's context, with the authenticated server.
func (s *authedStream) Context() context.Context { return s.ctx }

// authStream authenticates a stream and counts it open while it runs: a
// gRPC stream is a held SDK connection, and how it ended is the
// disconnect's kind.
func (s *sdkServer) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c, err := s.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	ctx := context.WithValue(ss.Context(), callerKey{}, c)
	if transportOf(ctx) == "rest" {
		// A REST watch is a request, not a held SDK connection.
		s.ops.NoteCall(ctx, c, "rest")
		return handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
	}
	// The connection is looked up while the stream is open (it is then
	// too); how it ended tells a keepalive timeout from a reset.
	conn := s.grpcLis.lookup(remoteOf(ctx))
	s.ops.StreamOpened(ctx, c)
	err = handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
	kaTime, kaTimeout := s.keepalive()
	kind, detail := disconnectKind(err, ss.Context().Err(), conn, kaTime, kaTimeout)
	s.ops.StreamClosed(c, kind, detail)
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

// callerOf is the game server a call authenticated as (authUnary,
// authStream, LocalSDK).
func callerOf(ctx context.Context) sdkCaller { return ctx.Value(callerKey{}).(sdkCaller) }
