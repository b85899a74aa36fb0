package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
	agonessdkalpha "github.com/tetherhq/tether/proto/agones/dev/sdk/alpha"
	agonessdkbeta "github.com/tetherhq/tether/proto/agones/dev/sdk/beta"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// agonesServer serves Agones' SDK protocol (agones.dev.sdk.SDK, issue 41)
// to game servers built for Agones. It reaches the agent only through ops
// (sdkOps), as Tether's own SDK server does, so a call leaves the same
// events whichever SDK the game links.
//
// Agones' calls carry no credential: the caller is the game server the
// connection's listener belongs to (each process gets a loopback port pair
// of its own, whose listener accepts only that process's tree, proved from
// the socket's owner by peerproc). identify finds it from a call's
// context; a call it cannot place is refused UNAUTHENTICATED.
//
// It serves every call of the stable service; the counters and lists
// are agonesCounters', the player tracking agonesPlayers'.
type agonesServer struct {
	agonessdk.UnimplementedSDKServer
	ops      sdkOps
	identify func(ctx context.Context) (sdkCaller, bool)
}

// agonesLabelPrefix is the prefix Agones' SDK server puts before the key
// of a label a game server sets.
const agonesLabelPrefix = "agones.dev/sdk-"

// agonesFleetLabel is the label naming a game server's fleet in Agones.
const agonesFleetLabel = "agones.dev/fleet"

// agonesLastAllocated is the annotation that tells an Agones game server
// when it was last allocated (RFC 3339, UTC): a change of it is how a
// server learns of an allocation it did not make itself.
const agonesLastAllocated = "agones.dev/last-allocated"

// agonesNamespace is the namespace every game server is shown in: Tether
// has no namespaces.
const agonesNamespace = "default"

// agonesCallerKey carries the identified caller in a call's context.
type agonesCallerKey struct{}

// caller identifies the game server a call comes from.
func (s *agonesServer) caller(ctx context.Context) (sdkCaller, error) {
	if c, ok := ctx.Value(agonesCallerKey{}).(sdkCaller); ok {
		return c, nil
	}
	if c, ok := s.identify(ctx); ok {
		return c, nil
	}
	return sdkCaller{}, status.Error(codes.Unauthenticated, "this connection belongs to no game server of this agent")
}

// unary identifies the caller of a unary call and notes the call (sdkOps:
// a Ready first; every call notes the connection, none is a health ping).
func (s *agonesServer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if info.FullMethod == agonessdk.SDK_Ready_FullMethodName {
		defer s.ops.ReadyCall(c)()
	}
	s.ops.NoteCall(ctx, c, transportOf(ctx))
	return handler(context.WithValue(ctx, agonesCallerKey{}, c), req)
}

// agonesStream carries the identified caller to a stream's handler.
type agonesStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context is the stream's context, with the caller.
func (s *agonesStream) Context() context.Context { return s.ctx }

// stream identifies the caller of a stream and counts it open while it
// runs: a held SDK connection, whose end is a disconnect with its grace
// window (sdkOps.StreamClosed), as with Tether's SDK.
func (s *agonesServer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c, err := s.caller(ss.Context())
	if err != nil {
		return err
	}
	ctx := context.WithValue(ss.Context(), agonesCallerKey{}, c)
	s.ops.StreamOpened(ctx, c)
	err = handler(srv, &agonesStream{ServerStream: ss, ctx: ctx})
	kind, detail := disconnectKind(err, ss.Context().Err(), nil, 0, 0)
	s.ops.StreamClosed(c, kind, detail)
	return err
}

// callerIn is the caller unary or stream identified.
func callerIn(ctx context.Context) sdkCaller { return ctx.Value(agonesCallerKey{}).(sdkCaller) }

// Ready marks the server READY: from STARTING, and from RESERVED or
// ALLOCATED (a server that finished its match takes the next).
func (s *agonesServer) Ready(ctx context.Context, _ *agonessdk.Empty) (*agonessdk.Empty, error) {
	if err := s.ops.Ready(ctx, callerIn(ctx)); err != nil {
		return nil, sdkError(err)
	}
	return &agonessdk.Empty{}, nil
}

// Allocate: the server allocates itself, to a game session of its own.
func (s *agonesServer) Allocate(ctx context.Context, _ *agonessdk.Empty) (*agonessdk.Empty, error) {
	if _, err := s.ops.Allocate(ctx, callerIn(ctx), nil); err != nil {
		return nil, sdkError(err)
	}
	return &agonessdk.Empty{}, nil
}

// Shutdown: the game asks to stop.
func (s *agonesServer) Shutdown(ctx context.Context, _ *agonessdk.Empty) (*agonessdk.Empty, error) {
	if err := s.ops.Shutdown(ctx, callerIn(ctx)); err != nil {
		return nil, sdkError(err)
	}
	return &agonessdk.Empty{}, nil
}

// Health notes a health ping per message until the client closes; the
// open stream noted the connection.
func (s *agonesServer) Health(stream grpc.ClientStreamingServer[agonessdk.Empty, agonessdk.Empty]) error {
	c := callerIn(stream.Context())
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&agonessdk.Empty{})
			}
			return err
		}
		s.ops.HealthPing(stream.Context(), c, "")
	}
}

// GetGameServer returns the server as Agones shows it.
func (s *agonesServer) GetGameServer(ctx context.Context, _ *agonessdk.Empty) (*agonessdk.GameServer, error) {
	return agonesGameServer(s.ops.GameServer(callerIn(ctx))), nil
}

// WatchGameServer sends the server at once and on every change.
func (s *agonesServer) WatchGameServer(_ *agonessdk.Empty, stream grpc.ServerStreamingServer[agonessdk.GameServer]) error {
	ctx := stream.Context()
	return s.ops.WatchGameServer(ctx, callerIn(ctx), func(gs *sdkv1.GameServer) error {
		return stream.Send(agonesGameServer(gs))
	})
}

// SetLabel sets the label agones.dev/sdk-<key>.
func (s *agonesServer) SetLabel(ctx context.Context, kv *agonessdk.KeyValue) (*agonessdk.Empty, error) {
	if err := s.ops.SetLabel(ctx, callerIn(ctx), agonesLabelPrefix+kv.GetKey(), kv.GetValue()); err != nil {
		return nil, sdkError(err)
	}
	return &agonessdk.Empty{}, nil
}

// SetAnnotation sets the annotation agones.dev/sdk-<key>.
func (s *agonesServer) SetAnnotation(ctx context.Context, kv *agonessdk.KeyValue) (*agonessdk.Empty, error) {
	if err := s.ops.SetAnnotation(ctx, callerIn(ctx), agonesLabelPrefix+kv.GetKey(), kv.GetValue()); err != nil {
		return nil, sdkError(err)
	}
	return &agonessdk.Empty{}, nil
}

// Reserve holds the server back from allocation for 1 to
// maxReserveSeconds seconds, then it is READY again; for 0 seconds, as
// Agones has it, until the server calls Ready, Allocate or Shutdown, or an
// allocation through the API takes it.
func (s *agonesServer) Reserve(ctx context.Context, d *agonessdk.Duration) (*agonessdk.Empty, error) {
	n := d.GetSeconds()
	if n < 0 || n > maxReserveSeconds {
		return nil, status.Errorf(codes.InvalidArgument, "seconds must be 0 (until the server says otherwise) to %d, not %d", maxReserveSeconds, n)
	}
	if err := s.ops.Reserve(ctx, callerIn(ctx), time.Duration(n)*time.Second); err != nil {
		return nil, sdkError(err)
	}
	return &agonessdk.Empty{}, nil
}

// agonesStates maps Tether's lifecycle (events.LifecycleName) to Agones'
// GameServer states. STARTING is Scheduled: Agones' RequestReady lasts
// only until its controller sees a Ready, and Tether records the Ready
// as READY at once. A server ending (SHUTTING_DOWN) or ended is Shutdown.
var agonesStates = map[string]string{
	"SCHEDULED":     "Scheduled",
	"STARTING":      "Scheduled",
	"READY":         "Ready",
	"RESERVED":      "Reserved",
	"ALLOCATED":     "Allocated",
	"UNHEALTHY":     "Unhealthy",
	"SHUTTING_DOWN": "Shutdown",
	"TERMINATED":    "Shutdown",
}

// agonesState is Tether's lifecycle name in Agones' words; "Unknown" for
// one Agones has no word for.
func agonesState(lifecycle string) string {
	if s, ok := agonesStates[lifecycle]; ok {
		return s
	}
	return "Unknown"
}

// agonesGameServer is the server as Agones' SDK shows it, built from
// what the agent knows: name the game server's id (the last segment of
// fleets/F/gameServers/ID), namespace "default", uid derived from the
// full name, creation_timestamp its placement in Unix seconds, the labels
// with agones.dev/fleet naming the fleet; spec.health the fleet's health
// contract; status its counters and lists with the rest.
func agonesGameServer(v *sdkv1.GameServer) *agonessdk.GameServer {
	fleet, id := splitGameServerName(v.GetName())
	labels := make(map[string]string, len(v.GetLabels())+1)
	for k, val := range v.GetLabels() {
		labels[k] = val
	}
	if fleet != "" {
		labels[agonesFleetLabel] = fleet
	}
	st := &agonessdk.GameServer_Status{State: agonesState(v.GetState()), Address: v.GetAddress()}
	for _, p := range v.GetPorts() {
		st.Ports = append(st.Ports, &agonessdk.GameServer_Status_Port{Name: p.GetName(), Port: p.GetPort()})
	}
	if v.GetAddress() != "" {
		st.Addresses = []*agonessdk.GameServer_Status_Address{{Type: "InternalIP", Address: v.GetAddress()}}
	}
	st.Players = &agonessdk.GameServer_Status_PlayerStatus{
		Count: int64(len(v.GetPlayers())), Capacity: v.GetPlayerCapacity(), Ids: v.GetPlayers(),
	}
	for name, c := range v.GetCounters() {
		if st.Counters == nil {
			st.Counters = make(map[string]*agonessdk.GameServer_Status_CounterStatus, len(v.GetCounters()))
		}
		st.Counters[name] = &agonessdk.GameServer_Status_CounterStatus{Count: c.GetCount(), Capacity: c.GetCapacity()}
	}
	for name, l := range v.GetLists() {
		if st.Lists == nil {
			st.Lists = make(map[string]*agonessdk.GameServer_Status_ListStatus, len(v.GetLists()))
		}
		st.Lists[name] = &agonessdk.GameServer_Status_ListStatus{Capacity: l.GetCapacity(), Values: l.GetValues()}
	}
	meta := &agonessdk.GameServer_ObjectMeta{
		Name: id, Namespace: agonesNamespace, Uid: agonesUID(v.GetName()), Labels: labels,
		Annotations: maps.Clone(v.GetAnnotations()),
	}
	if t := v.GetLastAllocatedTime(); t != nil {
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		meta.Annotations[agonesLastAllocated] = t.AsTime().UTC().Format(time.RFC3339Nano)
	}
	if t := v.GetCreateTime(); t != nil {
		meta.CreationTimestamp = t.GetSeconds() // Agones gives Unix seconds
	}
	spec := &agonessdk.GameServer_Spec{}
	if h := v.GetHealth(); h != nil {
		spec.Health = &agonessdk.GameServer_Spec_Health{
			Disabled: h.GetDisabled(), PeriodSeconds: h.GetPeriodSeconds(),
			FailureThreshold: h.GetFailureThreshold(), InitialDelaySeconds: h.GetInitialDelaySeconds(),
		}
	}
	return &agonessdk.GameServer{ObjectMeta: meta, Spec: spec, Status: st}
}

// splitGameServerName splits fleets/F/gameServers/ID into F and ID; a
// name of another shape is its own id, with no fleet.
func splitGameServerName(name string) (fleet, id string) {
	parts := strings.Split(name, "/")
	if len(parts) == 4 && parts[0] == "fleets" && parts[2] == "gameServers" {
		return parts[1], parts[3]
	}
	return "", name
}

// agonesUID is a stable id in the form of a UUID, derived from the game
// server's name (a name is never reused: its id is unique).
func agonesUID(name string) string {
	h := sha256.Sum256([]byte("tether/agones-uid/" + name))
	h[6] = h[6]&0x0f | 0x50 // version 5 style: derived from a name
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// agonesJSON is JSON as Agones' SDK server writes and reads it: proto
// field names, every field written out (int64s as strings, as protojson
// does), unknown input fields ignored.
var agonesJSON = &runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
}

// grpcServer is a gRPC server of Agones' SDK services, the stable one
// and the counters and lists (beta), every call identified by s.
func (s *agonesServer) grpcServer() *grpc.Server {
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxSDKMessage),
		grpc.ChainUnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.stream),
	)
	agonessdk.RegisterSDKServer(srv, s)
	agonessdkbeta.RegisterSDKServer(srv, &agonesCounters{ops: s.ops})
	agonessdkalpha.RegisterSDKServer(srv, &agonesPlayers{ops: s.ops})
	return srv
}

// restHandler serves Agones' REST paths: the unary calls through the
// generated gateway, in process; POST /health (one health ping a
// request) and GET /watch/gameserver (one {"result": …} line a change),
// which the gateway cannot serve in process, here.
func (s *agonesServer) restHandler(ctx context.Context) (http.Handler, error) {
	gw := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, agonesJSON))
	if err := agonessdk.RegisterSDKHandlerServer(ctx, gw, s); err != nil {
		return nil, fmt.Errorf("agent: Agones SDK gateway: %w", err)
	}
	if err := agonessdkbeta.RegisterSDKHandlerServer(ctx, gw, &agonesCounters{ops: s.ops}); err != nil {
		return nil, fmt.Errorf("agent: Agones SDK gateway, counters and lists: %w", err)
	}
	if err := agonessdkalpha.RegisterSDKHandlerServer(ctx, gw, &agonesPlayers{ops: s.ops}); err != nil {
		return nil, fmt.Errorf("agent: Agones SDK gateway, player tracking: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /health", s.restHealth)
	mux.HandleFunc("GET /watch/gameserver", s.restWatch)
	mux.Handle("/", gw)
	return s.restGuard(mux), nil
}

// restGuard identifies the caller of a REST call and notes the call
// (sdkOps: a Ready first; every call but a health ping), and bounds the
// body to maxSDKMessage.
func (s *agonesServer) restGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.caller(r.Context())
		if err != nil {
			sdkRefusal(w, http.StatusUnauthorized, `{"code":16,"message":"this connection belongs to no game server of this agent"}`)
			return
		}
		if r.ContentLength > maxSDKMessage {
			sdkRefusal(w, http.StatusRequestEntityTooLarge, `{"code":3,"message":"the request body is larger than the SDK takes"}`)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxSDKMessage)
		ctx := context.WithValue(r.Context(), agonesCallerKey{}, c)
		if r.Method == http.MethodPost && r.URL.Path == "/ready" {
			defer s.ops.ReadyCall(c)()
		}
		if r.URL.Path != "/health" {
			s.ops.NoteCall(ctx, c, "rest")
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// restHealth is one health ping. Its body must be a JSON object, `{}`
// at least: an empty body is 400, as in Agones.
func (s *agonesServer) restHealth(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		sdkRefusal(w, http.StatusBadRequest, `{"code":3,"message":"the request body could not be read"}`)
		return
	}
	if err := agonesJSON.Unmarshal(body, &agonessdk.Empty{}); err != nil || len(strings.TrimSpace(string(body))) == 0 {
		sdkRefusal(w, http.StatusBadRequest, `{"code":3,"message":"the body must be a JSON object, {} at least"}`)
		return
	}
	s.ops.HealthPing(r.Context(), callerIn(r.Context()), "rest")
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "{}")
}

// restWatch streams the server as JSON lines, {"result": GameServer},
// at once and on every change, until the client leaves; to a WebSocket
// client (an Upgrade on the same path, as Unreal's Agones plugin asks),
// as one text message each (websocketWatch).
func (s *agonesServer) restWatch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.websocketWatch(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	flusher, _ := w.(http.Flusher)
	_ = s.ops.WatchGameServer(ctx, callerIn(ctx), func(gs *sdkv1.GameServer) error {
		raw, err := agonesJSON.Marshal(agonesGameServer(gs))
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, `{"result":`+string(raw)+"}\n"); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}) // it ends when the client leaves or the server is finished: nothing more to write
}

// websocketWatch is the watch over a WebSocket: each change one text
// message {"result": GameServer}, until the client closes or leaves, or
// the server is finished (then a normal close).
func (s *agonesServer) websocketWatch(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil) // no Origin from a game on loopback; a browser's is checked
	if err != nil {
		return // Accept answered the client
	}
	defer func() { _ = conn.CloseNow() }() // closed already after a normal close
	conn.SetReadLimit(maxSDKMessage)
	ctx := conn.CloseRead(r.Context()) // ends when the client closes
	err = s.ops.WatchGameServer(ctx, callerIn(r.Context()), func(gs *sdkv1.GameServer) error {
		raw, err := agonesJSON.Marshal(agonesGameServer(gs))
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, websocketWriteTimeout)
		defer cancel()
		return conn.Write(wctx, websocket.MessageText, []byte(`{"result":`+string(raw)+"}"))
	})
	if err == nil {
		_ = conn.Close(websocket.StatusNormalClosure, "the game server is finished") // the client may be gone
	}
}

// websocketWriteTimeout bounds one watch message to a WebSocket client:
// one that reads nothing for that long is dropped.
const websocketWriteTimeout = 10 * time.Second
