package agent

import "time"

// processPidWait bounds how long an Agones SDK connection that arrives
// while no process is known waits for the one being started.
const processPidWait = 5 * time.Second

// setPid records the running process's id (0: none runs).
func (gs *gameServer) setPid(pid int) {
	gs.pidMu.Lock()
	defer gs.pidMu.Unlock()
	gs.pid.Store(int64(pid))
	select {
	case <-gs.pidKnown:
		if pid == 0 {
			gs.pidKnown = make(chan struct{})
		}
	default:
		if pid != 0 {
			close(gs.pidKnown)
		}
	}
}

// processPid returns the running process's id: the root of the process
// tree whose connections the server's Agones SDK ports take. While none
// is known it waits, at most wait, for the one being started: its id is
// known only once the exec has returned, and the process may connect
// before that (a script's first curl did, under load, and was refused as
// not the server's process). 0 when none came.
func (gs *gameServer) processPid(wait time.Duration) int {
	if pid := gs.pid.Load(); pid != 0 {
		return int(pid)
	}
	gs.pidMu.Lock()
	known := gs.pidKnown
	gs.pidMu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-known:
	case <-t.C:
	case <-gs.done:
	}
	return int(gs.pid.Load())
}
