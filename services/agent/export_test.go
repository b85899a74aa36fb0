package agent

import "time"

// ProcessToken returns the token of the game server whose process has pid,
// as that process is handed it, or "" if none: tests call the SDK as the
// process would, whose token is no longer in its environment.
func (a *Agent) ProcessToken(pid int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, gs := range a.servers {
		if int(gs.pid.Load()) == pid {
			return gs.token
		}
	}
	return ""
}

// ReadyCallsUnderWay returns how many Ready calls of a server's process are
// under way (noted, not yet answered).
func (a *Agent) ReadyCallsUnderWay(name string) int {
	a.mu.Lock()
	gs := a.servers[name]
	a.mu.Unlock()
	if gs == nil {
		return 0
	}
	return int(gs.readyCalls.Load())
}

// LastHealthPing returns when a server's process last sent a health ping,
// as the agent noted its arrival (zero: none).
func (a *Agent) LastHealthPing(name string) time.Time {
	a.mu.Lock()
	gs := a.servers[name]
	a.mu.Unlock()
	if gs == nil {
		return time.Time{}
	}
	return gs.lastPingAt()
}
