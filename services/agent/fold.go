package agent

import (
	"context"
	"errors"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// refresh folds events other writers appended since the last known
// sequence. Like confirm, it holds the server's lock only to fold: a read
// through a connection that has just gone down waits out its timeout, and
// the process's exit, its health and its commands must not wait behind it
// (the periodic sync reads every server, and a test's process exit waited
// so for more than 10 s). While NATS is away it reads nothing: the outbox's
// publisher rebuilds the server's state once its events are out.
func (gs *gameServer) refresh(ctx context.Context) {
	if err := gs.readNewer(ctx, gs.a.opts.Store.History); err != nil && !errors.Is(err, errNATSDown) {
		gs.log.Warn("read game server history", "err", err)
	}
}

// refreshLocked is refresh with the server's lock held throughout, for a
// decision that must see every event before it decides again (an append
// refused on its guard).
func (gs *gameServer) refreshLocked(ctx context.Context) error {
	return gs.foldNewer(ctx, gs.a.opts.Store.History)
}

// confirm folds the events the stream's leader holds after the last known
// sequence (CurrentHistory): for a decision on the agent's copy that
// appends nothing (a refusal), which no append's guard checks.
func (gs *gameServer) confirm(ctx context.Context) error {
	return gs.readNewer(ctx, gs.a.opts.Store.CurrentHistory)
}

// readNewer folds the events read by read after the last known sequence.
// The server's lock is not held while the stream is read (health
// evaluation and commands go on); what was folded meanwhile is skipped.
// While NATS is away it fails at once, with errNATSDown.
func (gs *gameServer) readNewer(ctx context.Context, read func(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)) error {
	if !gs.a.natsUp() {
		return errNATSDown
	}
	gs.mu.Lock()
	from, resync := gs.seq, gs.resync
	gs.mu.Unlock()
	if resync {
		return nil // its queued events are not in the stream yet; rebuild follows the outbox
	}
	hist, err := read(ctx, gs.subject, from+1)
	if err != nil {
		return err
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.resync {
		return nil
	}
	for len(hist) > 0 && hist[0].Sequence <= gs.seq {
		hist = hist[1:] // folded meanwhile
	}
	gs.foldLockedFrom(ctx, hist)
	return nil
}

// errNATSDown is confirm's error while the agent's NATS connection is down.
var errNATSDown = errors.New("NATS is not connected")

// foldNewer folds the events read by read after the last known sequence.
func (gs *gameServer) foldNewer(ctx context.Context, read func(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)) error {
	if gs.resync {
		return nil // its queued events are not in the stream yet; rebuild follows the outbox
	}
	hist, err := read(ctx, gs.subject, gs.seq+1)
	if err != nil {
		return err
	}
	gs.foldLockedFrom(ctx, hist)
	return nil
}

// foldLockedFrom folds events read from the stream, newer than the last
// known sequence, and wakes SDK watchers if there were any.
func (gs *gameServer) foldLockedFrom(ctx context.Context, hist []events.Envelope) {
	for _, e := range hist {
		next, err := events.ApplyGameServer(gs.state, e)
		if err != nil {
			gs.log.Warn("stored event does not fold; skipped", "sequence", e.Sequence, "type", e.Type, "err", err)
		} else {
			gs.state = next
			if _, ok := e.Data.(*eventsv1.GameServerAllocated); ok {
				gs.notifyTrace = allocationTrace(ctx, e)
			}
		}
		gs.seq = e.Sequence
	}
	if len(hist) > 0 {
		gs.notifyLocked()
	}
}

// rebuild refolds the server's state from its whole history, after its
// queued events were published (their sequences were unknown when folded).
// The history is the stream leader's: the events just published are
// there, and a replica behind it might show the server without them, or
// not at all.
func (gs *gameServer) rebuild(ctx context.Context) error {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.a.outbox.len() > 0 {
		return nil // more of ours still queued
	}
	hist, err := gs.a.opts.Store.CurrentHistory(ctx, gs.subject, 0)
	if err != nil {
		return err
	}
	var state *eventsv1.GameServerState
	var seq uint64
	for _, e := range hist {
		if next, err := events.ApplyGameServer(state, e); err == nil {
			state = next
		}
		seq = e.Sequence
	}
	gs.state, gs.seq, gs.resync = state, seq, false
	gs.notifyLocked()
	return nil
}
