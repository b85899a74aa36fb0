package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/oidcauth"
)

// Error reasons of refused callers.
const (
	ReasonUnauthenticated  = "UNAUTHENTICATED"
	ReasonPermissionDenied = "PERMISSION_DENIED"
)

// action is a kind of call; roles are granted actions, and every RPC is
// one action (rpcActions).
type action string

// The actions.
const (
	readFleets         action = "fleets.read"
	writeFleets        action = "fleets.write"
	readGameServers    action = "gameservers.read"
	writeGameServers   action = "gameservers.write"
	writeCounters      action = "gameservers.counters"
	readLogs           action = "gameservers.logs"
	readHosts          action = "hosts.read"
	writeHosts         action = "hosts.write"
	allocate           action = "allocate"
	readSessions       action = "sessions.read"
	writeSessions      action = "sessions.write"
	readHistory        action = "history.read"
	watchEvents        action = "events.watch"
	readProjections    action = "projections.read"
	operateProjections action = "projections.write"
	readArchive        action = "archive.read"
	verifyArchive      action = "archive.verify"
)

// rpcActions is the action of every RPC, by its full method name. An RPC
// that is not listed is refused to every role but admin: deny by default
// (TestEveryRPCHasAnAction fails the build of a new RPC without a rule).
var rpcActions = map[string]action{
	"/tether.v1.FleetService/CreateFleet":   writeFleets,
	"/tether.v1.FleetService/GetFleet":      readFleets,
	"/tether.v1.FleetService/ListFleets":    readFleets,
	"/tether.v1.FleetService/UpdateFleet":   writeFleets,
	"/tether.v1.FleetService/DeleteFleet":   writeFleets,
	"/tether.v1.FleetService/PauseRollout":  writeFleets,
	"/tether.v1.FleetService/ResumeRollout": writeFleets,
	"/tether.v1.FleetService/UndoRollout":   writeFleets,

	"/tether.v1.GameServerService/ListGameServers":    readGameServers,
	"/tether.v1.GameServerService/GetGameServer":      readGameServers,
	"/tether.v1.GameServerService/CreateGameServer":   writeGameServers,
	"/tether.v1.GameServerService/ShutdownGameServer": writeGameServers,
	"/tether.v1.GameServerService/DeleteGameServer":   writeGameServers,
	// Logs hold whatever a game prints (player ids and addresses, its own
	// secrets): for those who run the fleet, not for dashboards.
	"/tether.v1.GameServerService/StreamGameServerLogs": readLogs,
	// A game server's counters and lists are what a matchmaker changes
	// besides allocating: it frees a room when a match ends.
	"/tether.v1.GameServerService/UpdateGameServerCounter": writeCounters,
	"/tether.v1.GameServerService/UpdateGameServerList":    writeCounters,

	"/tether.v1.HostService/ListHosts":    readHosts,
	"/tether.v1.HostService/GetHost":      readHosts,
	"/tether.v1.HostService/CordonHost":   writeHosts,
	"/tether.v1.HostService/UncordonHost": writeHosts,
	"/tether.v1.HostService/DrainHost":    writeHosts,

	"/tether.v1.AllocationService/AllocateGameServer": allocate,
	"/allocation.AllocationService/Allocate":          allocate, // Agones' allocation API

	"/tether.v1.GameSessionService/GetGameSession":         readSessions,
	"/tether.v1.GameSessionService/ListGameSessions":       readSessions,
	"/tether.v1.GameSessionService/GetPlayerSession":       readSessions,
	"/tether.v1.GameSessionService/ListPlayerSessions":     readSessions,
	"/tether.v1.GameSessionService/CreatePlayerSession":    writeSessions,
	"/tether.v1.GameSessionService/ReconnectPlayerSession": writeSessions,

	"/tether.v1.HistoryService/ListEvents":  readHistory,
	"/tether.v1.HistoryService/GetStateAt":  readHistory,
	"/tether.v1.HistoryService/Explain":     readHistory,
	"/tether.v1.HistoryService/WatchEvents": watchEvents,

	"/tether.v1.ProjectionService/GetProjectionStatus": readProjections,
	"/tether.v1.ProjectionService/ListDeadLetters":     readProjections,
	"/tether.v1.ProjectionService/CheckProjections":    operateProjections,
	"/tether.v1.ProjectionService/RebuildProjections":  operateProjections,
	"/tether.v1.ProjectionService/RetryDeadLetter":     operateProjections,

	"/tether.v1.ArchiveService/GetArchiveStatus": readArchive,
	// Verification reads every byte of the archive: for those who answer
	// for it, not for dashboards.
	"/tether.v1.ArchiveService/VerifyArchive": verifyArchive,
}

// reads is what every role that reads may read.
var reads = []action{readFleets, readGameServers, readHosts, readSessions, readProjections, readArchive, watchEvents}

// roleActions is the permission matrix: what each role may do (admin:
// everything, listed or not). docs/security.md shows it.
var roleActions = map[apikeys.Role][]action{
	apikeys.Operator:   append([]action{writeFleets, writeGameServers, writeCounters, readLogs, writeHosts, operateProjections, readHistory, verifyArchive}, reads...),
	apikeys.Matchmaker: {allocate, readSessions, writeSessions, readGameServers, writeCounters},
	apikeys.Viewer:     reads,
	apikeys.Auditor:    append([]action{readHistory, verifyArchive}, reads...),
}

// permits reports whether role may call method.
func permits(role apikeys.Role, method string) bool {
	if role == apikeys.Admin || isReflection(method) {
		return true
	}
	a, ok := rpcActions[method]
	if !ok {
		return false
	}
	for _, granted := range roleActions[role] {
		if granted == a {
			return true
		}
	}
	return false
}

// authenticator checks every call's credentials against the keys and the
// permission matrix. It covers gRPC and the REST gateway alike: the
// gateway forwards the Authorization header as the call's metadata.
type authenticator struct {
	keys *apikeys.Keys      // nil without API keys
	oidc *oidcauth.Verifier // nil without OIDC
	now  func() time.Time
	log  *slog.Logger
	// recheck is how often an open stream's key is checked again.
	recheck time.Duration
	// gateway is the REST gateway listener's address (clientCertNames).
	gateway string
}

// authenticate returns the principal of a call: its API key's, else its
// verified client certificate's (mutual TLS, a cert: line of the keys
// file).
func (a *authenticator) authenticate(ctx context.Context) (apikeys.Principal, error) {
	return a.principal(ctx, bearer(ctx), clientCertNames(ctx, a.gateway))
}

// principal authenticates a bearer token (an API key, or an OIDC token),
// else the names of a verified client certificate.
func (a *authenticator) principal(ctx context.Context, token string, certNames []string) (apikeys.Principal, error) {
	switch {
	case token != "" && a.oidc != nil && !strings.HasPrefix(token, apikeys.KeyPrefix) && strings.Count(token, ".") == 2:
		return a.oidc.Authenticate(ctx, token)
	case token != "" && a.keys != nil:
		return a.keys.Authenticate(token, a.now())
	case token != "":
		return apikeys.Principal{}, apikeys.ErrUnknownKey
	case len(certNames) > 0 && a.keys != nil:
		return a.keys.AuthenticateCert(certNames, a.now())
	}
	return apikeys.Principal{}, apikeys.ErrNoKey
}

// restCheck authenticates a REST request before its body is read: its
// bearer token, else its verified client certificate. A refusal is
// answered (401) and logged, without the token; it returns whether the
// request may go on.
func (a *authenticator) restCheck(w http.ResponseWriter, r *http.Request) bool {
	_, err := a.principal(r.Context(), bearerOf(r.Header.Get("Authorization")), restCertNames(r))
	if err == nil {
		return true
	}
	if !errors.Is(err, apikeys.ErrNoKey) {
		a.log.Warn("call refused: bad credentials", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err)
	}
	refuseHTTP(w, http.StatusUnauthorized, codes.Unauthenticated, ReasonUnauthenticated, err.Error())
	return false
}

// keyed serves h to authenticated callers (any role) when need is set and
// the API authenticates; else to everyone.
func (a *authenticator) keyed(need bool, h http.Handler) http.Handler {
	if !need || a == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.restCheck(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// bearer returns the key a call's authorization metadata carries.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if token := bearerOf(v); token != "" {
			return token
		}
	}
	return ""
}

// check authenticates and authorises a call to method, returning the
// context that carries its principal as the actor of the events it writes.
func (a *authenticator) check(ctx context.Context, method string) (context.Context, error) {
	p, err := a.authenticate(ctx)
	if err != nil {
		if !errors.Is(err, apikeys.ErrNoKey) {
			a.log.Warn("call refused: bad credentials", "method", method, "reason", err)
		}
		return ctx, refusal(codes.Unauthenticated, ReasonUnauthenticated, err.Error())
	}
	if err := a.permit(p, method); err != nil {
		return ctx, err
	}
	return events.WithActor(ctx, p.Actor()), nil
}

// permit refuses, and logs, a call to method that p's role may not make.
func (a *authenticator) permit(p apikeys.Principal, method string) error {
	if permits(p.Role, method) {
		return nil
	}
	a.log.Warn("call refused: not permitted", "method", method, "principal", p.Name, "role", p.Role)
	return refusal(codes.PermissionDenied, ReasonPermissionDenied,
		"the "+string(p.Role)+" role ("+p.Name+") may not call "+method)
}

// restPermits authorises a REST request to method that the gateway refused
// before calling it (a body or query it could not decode), so that a role
// that may not call method is told so (403), whatever its body says, rather
// than what was wrong with the body. It returns the refusal, or nil; an API
// without authentication permits everything.
func (a *authenticator) restPermits(r *http.Request, method string) error {
	if a == nil {
		return nil
	}
	p, err := a.principal(r.Context(), bearerOf(r.Header.Get("Authorization")), restCertNames(r))
	if err != nil {
		return refusal(codes.Unauthenticated, ReasonUnauthenticated, err.Error())
	}
	return a.permit(p, method)
}

// requestedBy is who asked for what a call does, for an event's evidence:
// the caller when the API authenticates callers, else the replica.
func requestedBy(ctx context.Context, replica string) string {
	if a := events.ActorFrom(ctx); a != "" {
		return a
	}
	return replica
}

// refusal is a status with its ErrorInfo reason, as an error.
func refusal(code codes.Code, reason, msg string) error { return reasonStatus(code, reason, msg).Err() }

// reasonStatus is a status with its ErrorInfo reason.
func reasonStatus(code codes.Code, reason, msg string) *status.Status {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st
}

func (a *authenticator) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// stream authenticates a stream when it opens, and again every recheck
// while it stays open: a key revoked (removed from the keys file), expired
// or given a role that no longer permits the call ends the stream with
// UNAUTHENTICATED (reason KEY_REVOKED).
func (a *authenticator) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.check(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		go a.watchKey(ctx, cancel, ss.Context(), info.FullMethod)
		err = handler(srv, &principalStream{ServerStream: ss, ctx: ctx})
		var revoked *revokedError
		if errors.As(context.Cause(ctx), &revoked) {
			a.log.Warn("stream ended: its key no longer permits it", "method", info.FullMethod, "actor", events.ActorFrom(ctx), "reason", revoked.why)
			return refusal(codes.Unauthenticated, ReasonKeyRevoked, "the stream's key no longer permits it: "+revoked.why)
		}
		return err
	}
}

// ReasonKeyRevoked ends an open stream whose key was revoked or expired.
const ReasonKeyRevoked = "KEY_REVOKED"

// revokedError is the cause of a stream ended by watchKey.
type revokedError struct{ why string }

func (e *revokedError) Error() string { return "key revoked: " + e.why }

// watchKey authenticates the call of callCtx again every recheck until ctx
// ends, and cancels ctx with a *revokedError once its key (or certificate)
// no longer authenticates or permits method.
func (a *authenticator) watchKey(ctx context.Context, cancel context.CancelCauseFunc, callCtx context.Context, method string) {
	t := time.NewTicker(a.recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := a.authenticate(callCtx)
		switch {
		case err != nil:
			cancel(&revokedError{why: err.Error()})
			return
		case !permits(p.Role, method):
			cancel(&revokedError{why: "the " + string(p.Role) + " role may not call " + method})
			return
		}
	}
}

// principalStream is a server stream whose context carries the caller as actor.
type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }

// isReflection reports whether method is gRPC server reflection's, which
// describes the API (its services and messages, what the protos and
// /openapi.json publish anyway): every role may call it, once
// authenticated.
func isReflection(method string) bool {
	return strings.HasPrefix(method, "/grpc.reflection.v1.ServerReflection/") ||
		strings.HasPrefix(method, "/grpc.reflection.v1alpha.ServerReflection/")
}
