package agent

import (
	"context"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// agentSDK is the agent's side of sdkOps: each operation carried out on
// the game server the caller is. The player operations are in players.go.
type agentSDK struct{ a *Agent }

var _ sdkOps = agentSDK{}

// ByToken finds the game server a process token belongs to.
func (o agentSDK) ByToken(token string) (sdkCaller, bool) {
	gs := o.a.byToken(token)
	return sdkCaller{gs: gs}, gs != nil
}

// NoteCall notes a call: it proves the SDK connected (gameServer.noteCall).
func (agentSDK) NoteCall(ctx context.Context, c sdkCaller, transport string) {
	c.gs.noteCall(ctx, transport)
}

// ReadyCall notes a Ready call under way (gameServer.readyCall).
func (agentSDK) ReadyCall(c sdkCaller) (done func()) { return c.gs.readyCall() }

// StreamOpened counts a stream opened (gameServer.streamOpened).
func (agentSDK) StreamOpened(ctx context.Context, c sdkCaller) { c.gs.streamOpened(ctx) }

// StreamClosed counts a stream ended, and records a disconnect when it was
// the last (gameServer.streamClosed).
func (agentSDK) StreamClosed(c sdkCaller, kind eventsv1.DisconnectKind, detail string) {
	c.gs.streamClosed(kind, detail)
}

// Stopping marks the agent stopping (Agent.stopping).
func (o agentSDK) Stopping() { o.a.stopping.Store(true) }

// Ready marks the server ready. Calling it again while READY is a no-op,
// decided on the agent's copy of the server, which is what the game was
// shown: an allocation the copy does not show yet is one the game has not
// heard of (it hears through the copy, and a player's call folds it into
// the copy first), so a Ready then cannot mean its match is over.
func (agentSDK) Ready(ctx context.Context, c sdkCaller) error {
	ctx = c.acting(ctx)
	gs := c.gs
	if gs.lifecycle() == eventsv1.Lifecycle_LIFECYCLE_READY {
		return nil
	}
	if err := gs.record(ctx, events.MarkReady{}); err != nil {
		return err
	}
	gs.log.Info("game server ready")
	return nil
}

// HealthPing notes one health ping (gameServer.healthPing).
func (agentSDK) HealthPing(ctx context.Context, c sdkCaller, transport string) {
	c.gs.healthPing(ctx, transport)
}

// Shutdown: the game asks to stop.
func (o agentSDK) Shutdown(ctx context.Context, c sdkCaller) error {
	ctx = c.acting(ctx)
	gs := c.gs
	deadline := o.a.opts.Clock.Now().Add(shutdownGrace)
	if err := gs.record(ctx, events.RequestShutdown{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, Deadline: deadline,
		Evidence: &eventsv1.Evidence{RequestedBy: gs.name}}); err != nil {
		return err
	}
	gs.stop(eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, deadline)
	return nil
}

// GameServer returns the server as the agent knows it.
func (agentSDK) GameServer(c sdkCaller) *sdkv1.GameServer { return c.gs.view() }

// WatchGameServer sends the server as it is, then as each change left it,
// in order, until the client leaves or the server is finished. A client
// that reads slowly gets every state it has not read yet (Reserved, then
// Allocated), not only the latest, as Agones' watch sends every update;
// one more than watchBacklog changes behind skips the oldest of them.
func (agentSDK) WatchGameServer(ctx context.Context, c sdkCaller, send func(*sdkv1.GameServer) error) error {
	gs := c.gs
	gs.mu.Lock()
	pending, seen := []*sdkv1.GameServer{gs.viewLocked()}, gs.watch.open()
	gs.mu.Unlock()
	defer func() {
		gs.mu.Lock()
		gs.watch.close()
		gs.mu.Unlock()
	}()
	for {
		gs.mu.Lock()
		changed, done, allocation := gs.changed, gs.done, gs.notifyTrace
		gs.notifyTrace = trace.SpanContext{}
		var more []*sdkv1.GameServer
		more, seen = gs.watch.since(seen)
		pending = append(pending, more...)
		gs.mu.Unlock()
		for i, v := range pending {
			trace := trace.SpanContext{}
			if i == len(pending)-1 {
				trace = allocation // the allocation's span joins the send of the state it left
			}
			if err := gs.sendTraced(send, v, trace); err != nil {
				return err
			}
		}
		pending = pending[:0]
		select {
		case <-changed:
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SetLabel sets one label.
func (agentSDK) SetLabel(ctx context.Context, c sdkCaller, key, value string) error {
	ctx = c.acting(ctx)
	return c.gs.record(ctx, events.SetLabels{Set: map[string]string{key: value}})
}

// SetAnnotation sets one annotation.
func (agentSDK) SetAnnotation(ctx context.Context, c sdkCaller, key, value string) error {
	ctx = c.acting(ctx)
	return c.gs.record(ctx, events.SetAnnotations{Set: map[string]string{key: value}})
}

// TrackPlayer records a player connected (connected true) or gone, and
// says whether that changed anything: false for a player connected
// already, or gone already. A player whom the server's game session holds
// a seat for takes it, or keeps it for the reconnect window when gone
// (events.TrackSeat): the seat follows the game's reports, as it follows
// Tether's AcceptPlayer and DisconnectPlayer.
func (o agentSDK) TrackPlayer(ctx context.Context, c sdkCaller, playerID string, connected bool) (bool, error) {
	ctx = c.acting(ctx)
	gs := c.gs
	var cmd events.GameServerCommand = events.TrackPlayerDisconnect{PlayerID: playerID}
	if connected {
		cmd = events.TrackPlayerConnect{PlayerID: playerID}
	}
	gs.mu.Lock()
	before := slices.Contains(gs.state.GetPlayers(), playerID)
	err := gs.recordLocked(ctx, cmd) // its guarded append brings the copy up to the leader's: the allocation too
	changed := before != slices.Contains(gs.state.GetPlayers(), playerID)
	gsess := gs.state.GetGameSession()
	gs.mu.Unlock()
	if err != nil || gsess == "" {
		return changed, err
	}
	seat := events.TrackSeat{PlayerID: playerID, Connected: connected, Now: o.a.opts.Clock.Now()}
	_, msgs, err := o.a.decideSession(ctx, gsess, seat, gs.sessionFromAllocation(gsess))
	if err != nil {
		gs.log.Warn("tracked player's seat not recorded", "player", playerID, "game_session", gsess, "err", err)
		return changed, err // its code as it is (UNAVAILABLE: the game may call again)
	}
	if len(msgs) > 0 {
		gs.log.Info("tracked player's seat", "player", playerID, "game_session", gsess, "event", events.TypeOf(msgs[0]))
	}
	return changed, nil
}

// SetPlayerCapacity sets the players the server takes.
func (agentSDK) SetPlayerCapacity(ctx context.Context, c sdkCaller, capacity int64) error {
	ctx = c.acting(ctx)
	return c.gs.record(ctx, events.SetPlayerCapacity{Capacity: capacity})
}

// UpdateCounter changes one counter and returns it as the change left it.
func (agentSDK) UpdateCounter(ctx context.Context, c sdkCaller, u events.UpdateCounter) (*eventsv1.Counter, error) {
	return recordRead(c.acting(ctx), c.gs, u, func(s *eventsv1.GameServerState) *eventsv1.Counter {
		return proto.CloneOf(s.GetCounters()[u.Name])
	})
}

// UpdateList changes one list and returns it as the change left it.
func (agentSDK) UpdateList(ctx context.Context, c sdkCaller, u events.UpdateList) (*eventsv1.List, error) {
	return recordRead(c.acting(ctx), c.gs, u, func(s *eventsv1.GameServerState) *eventsv1.List {
		return proto.CloneOf(s.GetLists()[u.Name])
	})
}

// recordRead records cmd on gs and reads the state it left, in one hold
// of the server's lock: the answer is what this change left, not what a
// later one did.
func recordRead[T any](ctx context.Context, gs *gameServer, cmd events.GameServerCommand, read func(*eventsv1.GameServerState) T) (T, error) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if err := gs.recordLocked(ctx, cmd); err != nil {
		var none T
		return none, err
	}
	return read(gs.state), nil
}

// Reserve holds the server back from allocation for d; for 0, until the
// server says otherwise.
func (o agentSDK) Reserve(ctx context.Context, c sdkCaller, d time.Duration) error {
	ctx = c.acting(ctx)
	var until time.Time
	if d > 0 {
		until = o.a.opts.Clock.Now().Add(d)
	}
	return c.gs.record(ctx, events.Reserve{Until: until})
}

// Allocate allocates the server to a game session of its own making.
func (o agentSDK) Allocate(ctx context.Context, c sdkCaller, properties map[string]string) (string, error) {
	ctx = c.acting(ctx)
	gs := c.gs
	gs.mu.Lock()
	policy := proto.CloneOf(gs.state.GetPlayerSessionPolicy())
	gs.mu.Unlock()
	name := events.GameSessionName(events.NewID("gsess"))
	alloc := &eventsv1.GameServerAllocated{GameSession: name, Properties: properties, MaxPlayers: policy.GetMaxPlayers(), SelfAllocated: true}
	if err := gs.record(ctx, events.Allocate{Allocated: alloc}); err != nil {
		return "", err
	}
	created := events.SessionCreated(gs.name, o.a.host, alloc, policy, o.a.opts.Clock.Now(), "")
	if _, _, err := o.a.decideSession(ctx, name, events.CreateGameSession{Created: created}, nil); err != nil {
		// The allocation stands; the controller creates the session from it.
		gs.log.Warn("self-allocation: game session not created yet; the controller will", "game_session", name, "err", err)
	}
	gs.log.Info("game server allocated itself", "game_session", name)
	return name, nil
}

// readyCall notes a Ready call from the process before it waits for the
// lock, and returns what notes its end: a Ready that came before the ready
// timeout ended is not timed out while it waits behind an append.
func (gs *gameServer) readyCall() (done func()) {
	gs.readyCalls.Add(1)
	return func() { gs.readyCalls.Add(-1) }
}

// view is the server as the SDK shows it.
func (gs *gameServer) view() *sdkv1.GameServer {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.viewLocked()
}

// viewLocked is view, with gs.mu held.
func (gs *gameServer) viewLocked() *sdkv1.GameServer {
	v := &sdkv1.GameServer{
		Name: gs.name, State: events.LifecycleName(gs.state.GetLifecycle()), Address: gs.state.GetAddress(),
		Labels: gs.state.GetLabels(), Shutdown: gs.notice, GameSession: gs.state.GetGameSession(),
		Allocation: allocationView(gs.state.GetAllocation()),
	}
	for _, p := range gs.state.GetPorts() {
		v.Ports = append(v.Ports, &sdkv1.Port{Name: p.GetName(), Port: p.GetPort()})
	}
	if len(gs.state.GetCounters()) > 0 {
		v.Counters = make(map[string]*sdkv1.Counter, len(gs.state.GetCounters()))
		for name, c := range gs.state.GetCounters() {
			v.Counters[name] = &sdkv1.Counter{Count: c.GetCount(), Capacity: c.GetCapacity()}
		}
	}
	if len(gs.state.GetLists()) > 0 {
		v.Lists = make(map[string]*sdkv1.CounterList, len(gs.state.GetLists()))
		for name, l := range gs.state.GetLists() {
			v.Lists[name] = &sdkv1.CounterList{Capacity: l.GetCapacity(), Values: slices.Clone(l.GetValues())}
		}
	}
	if t := gs.state.GetCreateTime(); t != nil {
		v.CreateTime = proto.CloneOf(t)
	}
	v.Players = slices.Clone(gs.state.GetPlayers())
	v.PlayerCapacity = events.PlayerCapacity(gs.state)
	if len(gs.state.GetAnnotations()) > 0 {
		v.Annotations = maps.Clone(gs.state.GetAnnotations())
	}
	if t := gs.state.GetLastAllocatedTime(); t != nil {
		v.LastAllocatedTime = proto.CloneOf(t)
	}
	if h := gs.state.GetHealthPolicy(); h != nil {
		v.Health = &sdkv1.HealthContract{
			Disabled: h.GetDisabled(), PeriodSeconds: h.GetPeriodSeconds(),
			FailureThreshold: h.GetFailureThreshold(), InitialDelaySeconds: h.GetInitialDelaySeconds(),
		}
	}
	return v
}

// allocationView is the allocation as the SDK shows it.
func allocationView(a *eventsv1.GameServerAllocated) *sdkv1.GameSession {
	if a == nil {
		return nil
	}
	v := &sdkv1.GameSession{Name: a.GetGameSession(), Properties: a.GetProperties(), MaxPlayers: a.GetMaxPlayers()}
	for _, p := range a.GetPlayers() {
		v.Players = append(v.Players, &sdkv1.Player{PlayerSession: p.GetPlayerSession(), PlayerId: p.GetPlayerId(), Slot: p.GetSlot()})
	}
	return v
}
