package agent

import "time"

// WatchedAt returns when, on the agent's clock, its run watch last ran
// (zero: not yet): a test that moves a fake clock its watch runs on waits
// for the watch to have seen each move, so that the moves are time the
// agent ran, not a pause.
func (a *Agent) WatchedAt() time.Time {
	a.watch.mu.Lock()
	defer a.watch.mu.Unlock()
	return a.watch.lastAt
}
