package agent

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
