package agent

import (
	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

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
	v := &sdkv1.GameServer{
		Name: gs.name, State: events.LifecycleName(gs.state.GetLifecycle()), Address: gs.state.GetAddress(),
		Labels: gs.state.GetLabels(), Shutdown: gs.notice, GameSession: gs.state.GetGameSession(),
		Allocation: allocationView(gs.state.GetAllocation()),
	}
	for _, p := range gs.state.GetPorts() {
		v.Ports = append(v.Ports, &sdkv1.Port{Name: p.GetName(), Port: p.GetPort()})
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
