package agent

import (
	"context"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// sdkOps is what a game server can ask of its agent through an SDK, and
// what an SDK's protocol server tells the agent of the calls it serves,
// whichever protocol carries them: Tether's own (tether.sdk.v1: sdkServer
// over gRPC and REST, LocalSDK in the agent's process) and, from issue 41,
// Agones' (agones.dev.sdk.SDK). A protocol server reaches the agent only
// through it (TestSDKProtocolServersCallTheAgentOnlyThroughSDKOps), so a
// game server gets the same answers, and leaves the same events, whichever
// SDK it links. The agent's side is agentSDK.
//
// A protocol server must:
//   - identify the calling game server before it does anything else, and
//     refuse a call it cannot identify (UNAUTHENTICATED), telling nothing
//     of the agent's servers: Tether's SDK by the process token a call
//     carries (ByToken); a protocol whose calls carry no credential
//     (Agones') by the process at the other end of the connection,
//     through a lookup of its own it adds here;
//   - say what each call proves of the SDK connection: every call but a
//     health ping is noted (NoteCall) before it is carried out, and a
//     health ping notes itself (HealthPing) without waiting for the
//     server's lock; a stream is a connection held open from StreamOpened
//     to StreamClosed, and the health pings it carries note no
//     connection of their own (transport "");
//   - note a Ready call as soon as it is identified (ReadyCall), before
//     anything that may wait, so that a Ready that came in time is not
//     timed out while it waits;
//   - call Stopping before it ends its streams as the agent stops, so that
//     their ends are not recorded as the game servers disconnecting;
//   - check its own bounds on a request (a message's size, Reserve's
//     seconds) before it calls, and map the errors to its own codes: an
//     operation fails with the domain's error (events.TransitionError,
//     events.ValidationError, events.RefusedError) or a gRPC status
//     decided already (UNAVAILABLE while NATS is away, NOT_FOUND,
//     PERMISSION_DENIED, INVALID_ARGUMENT), which sdkError and playerError
//     map for a gRPC protocol.
type sdkOps interface {
	// ByToken returns the game server whose process token is token; false
	// if none has it.
	ByToken(token string) (sdkCaller, bool)
	// NoteCall notes a call from c over transport ("grpc", "rest",
	// "local"): any call proves the SDK connected, and ends a disconnect's
	// grace window. It waits for the server's lock.
	NoteCall(ctx context.Context, c sdkCaller, transport string)
	// ReadyCall notes a Ready call of c under way, until done is called:
	// the ready timeout waits for it.
	ReadyCall(c sdkCaller) (done func())
	// StreamOpened notes that c opened a stream, a connection it holds
	// open, without waiting for the server's lock.
	StreamOpened(ctx context.Context, c sdkCaller)
	// StreamClosed notes the end of a stream StreamOpened noted; when no
	// other stream of c is open, its disconnect is recorded, of kind (a
	// clean close, a reset, a keepalive timeout) with detail.
	StreamClosed(c sdkCaller, kind eventsv1.DisconnectKind, detail string)
	// Stopping tells the agent that it stops: the SDK streams that end
	// from now on are not game servers disconnecting.
	Stopping()

	// Ready marks c READY; while the agent's copy of c shows it READY, it
	// does nothing.
	Ready(ctx context.Context, c sdkCaller) error
	// HealthPing notes one health ping of c, over transport ("": on a
	// stream StreamOpened noted). It never waits for an append, and the
	// health contract counts its periods from the ping's arrival.
	HealthPing(ctx context.Context, c sdkCaller, transport string)
	// Shutdown records the game's request to stop c and stops it: a
	// shutdown notice to its watchers, SIGTERM to its process, and SIGKILL
	// shutdownGrace from now.
	Shutdown(ctx context.Context, c sdkCaller) error
	// GameServer returns c as the agent knows it.
	GameServer(c sdkCaller) *sdkv1.GameServer
	// WatchGameServer sends c by send at once and on every change, until
	// send fails (its error), ctx ends (ctx's error) or c is finished
	// (nil).
	WatchGameServer(ctx context.Context, c sdkCaller, send func(*sdkv1.GameServer) error) error
	// SetLabel sets one label of c.
	SetLabel(ctx context.Context, c sdkCaller, key, value string) error
	// SetAnnotation sets one annotation of c.
	SetAnnotation(ctx context.Context, c sdkCaller, key, value string) error
	// Reserve holds c back from allocation for d.
	Reserve(ctx context.Context, c sdkCaller, d time.Duration) error
	// TrackPlayer records a player of c connected (connected true) or
	// gone (Agones' player tracking), and says whether that changed
	// anything (false: connected already, or gone already).
	TrackPlayer(ctx context.Context, c sdkCaller, playerID string, connected bool) (bool, error)
	// SetPlayerCapacity sets the players c takes.
	SetPlayerCapacity(ctx context.Context, c sdkCaller, capacity int64) error
	// UpdateCounter changes one counter of c, and returns the counter as
	// the change left it (a *events.CounterError when it is refused).
	UpdateCounter(ctx context.Context, c sdkCaller, u events.UpdateCounter) (*eventsv1.Counter, error)
	// UpdateList changes one list of c, and returns the list as the
	// change left it (a *events.CounterError when it is refused).
	UpdateList(ctx context.Context, c sdkCaller, u events.UpdateList) (*eventsv1.List, error)
	// Allocate allocates c to a game session of its own making, and
	// returns the session's name.
	Allocate(ctx context.Context, c sdkCaller, properties map[string]string) (gameSession string, err error)
	// AcceptPlayer admits the player who presents token, their player
	// session's, for playerSession (an id, "ps-…", or a full name) of c's
	// game session.
	AcceptPlayer(ctx context.Context, c sdkCaller, playerSession, token string) (acceptedPlayer, error)
	// DisconnectPlayer reports the player's connection lost; their seat
	// waits for the reconnect window. stale: connection no longer holds
	// the seat, and nothing changed.
	DisconnectPlayer(ctx context.Context, c sdkCaller, playerSession string, connection int64) (seat *eventsv1.PlayerSessionState, stale bool, err error)
	// RemovePlayer ends the player's session for good, unless connection
	// no longer holds the seat (stale: nothing changed).
	RemovePlayer(ctx context.Context, c sdkCaller, playerSession string, connection int64) (stale bool, err error)
}

// sdkCaller is the game server an SDK call comes from, as its protocol
// server identified it: what every sdkOps operation takes. Only the agent's
// side (agentSDK) looks inside.
type sdkCaller struct{ gs *gameServer }

// acting is ctx with the game server as the actor of the events written
// in it: what its SDK calls ask for is recorded as the game server's own
// doing (history and explain show it), the agent as producer.
func (c sdkCaller) acting(ctx context.Context) context.Context {
	return events.WithActor(ctx, c.gs.name)
}

// acceptedPlayer is a player AcceptPlayer admitted.
type acceptedPlayer struct {
	// seat is the player's session as the accept left it.
	seat *eventsv1.PlayerSessionState
	// reconnected: the seat was the player's before (a reconnect within
	// its window, or a take-over).
	reconnected bool
	// takenOver: a reissued token took the seat over from an ACTIVE
	// connection.
	takenOver bool
}
