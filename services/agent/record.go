package agent

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
)

// maxRecordAttempts bounds re-reads after append conflicts.
const maxRecordAttempts = 8

// record decides a command on the server's state and appends the result,
// guarded by the last known sequence; on a conflict it folds the newer
// events and decides again.
func (gs *gameServer) record(ctx context.Context, cmd events.GameServerCommand) error {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.recordLocked(ctx, cmd)
}

func (gs *gameServer) recordLocked(ctx context.Context, cmd events.GameServerCommand) error {
	out := &outboxFallback{gs: gs}
	reread := false
	res, err := write.Do(ctx, out, write.Op{
		Name:    gs.name,
		Subject: gs.subject,
		Read: func(ctx context.Context) (uint64, error) {
			if reread { // after a conflict: fold the newer events
				if err := gs.refreshLocked(ctx); err != nil {
					return 0, errQueue
				}
			}
			reread = true
			return gs.seq, nil
		},
		Decide: func(context.Context) ([]proto.Message, error) { return events.DecideGameServer(gs.name, gs.state, cmd) },
		Stamp:  func(ctx context.Context) events.Stamp { return gs.a.stampFor(ctx) },
	}, write.Policy{Attempts: maxRecordAttempts})
	switch {
	case errors.Is(err, errQueue):
		return gs.enqueueLocked(out.decided, out.stored)
	case err != nil:
		return err
	case len(res.Events) == 0:
		return nil
	}
	if err := gs.foldLocked(res.Events); err != nil {
		return err
	}
	gs.seq = res.Sequence
	return nil
}

// errQueue says the events decided last go to the outbox instead of the
// stream.
var errQueue = errors.New("queue the events in the outbox")

// outboxFallback is a server's write path to the stream with the outbox
// behind it: while NATS is away or events wait in the outbox, and when the
// store fails (not on a conflict), the append answers errQueue, and the
// events it was given wait in decided for the outbox, in order. An append
// that failed after the stream took its first events (an
// events.PartialAppendError) leaves only the rest to the outbox: sent
// again, the stored ones would be acknowledged as duplicates and counted
// as published twice.
type outboxFallback struct {
	gs      *gameServer
	decided []events.Envelope
	stored  int // of decided, how many the stream took before the append failed
}

// Append appends to the stream unless the outbox must take the events.
func (o *outboxFallback) Append(ctx context.Context, subject string, expected uint64, envs ...events.Envelope) (uint64, error) {
	o.decided, o.stored = envs, 0
	if o.gs.a.outbox.len() > 0 || !o.gs.a.natsUp() {
		return 0, errQueue // NATS is away, or events wait in the outbox: queue behind them
	}
	seq, err := o.gs.a.opts.Store.Append(ctx, subject, expected, envs...)
	if err != nil && !errors.Is(err, events.ErrConflict) {
		if partial, ok := errors.AsType[*events.PartialAppendError](err); ok {
			o.stored = partial.Stored
		}
		o.gs.log.Warn("event store unreachable; keeping events in the outbox", "err", err, "stored", o.stored)
		return 0, errQueue
	}
	return seq, err
}

// foldLocked applies the server's own events to its state.
func (gs *gameServer) foldLocked(envs []events.Envelope) error {
	for _, e := range envs {
		next, err := events.ApplyGameServer(gs.state, e)
		if err != nil {
			return fmt.Errorf("fold own event: %w", err)
		}
		gs.state = next
	}
	gs.notifyLocked()
	return nil
}

// enqueueLocked keeps events in the on-disk outbox for the publisher and
// folds them locally, so supervision and health evaluation go on while NATS
// is away. The first stored of them are in the stream already: they are
// folded, not queued. The server's state is rebuilt from the stream once
// the queued ones are out.
func (gs *gameServer) enqueueLocked(envs []events.Envelope, stored int) error {
	entries := make([]outboxEntry, len(envs)-stored)
	for i, e := range envs[stored:] {
		data, err := e.Marshal()
		if err != nil {
			return err
		}
		entries[i] = outboxEntry{subject: gs.subject, data: data}
	}
	if err := gs.a.outbox.push(entries...); err != nil {
		gs.a.outboxFull.Add(context.Background(), 1)
		return err
	}
	gs.resync = true
	return gs.foldLocked(envs)
}

// recordDetached records an event with its own deadline, so it lands even
// while the agent stops (its run context is then cancelled).
func (gs *gameServer) recordDetached(cmd events.GameServerCommand) {
	ctx, cancel := context.WithTimeout(context.Background(), finalEventTimeout)
	defer cancel()
	if err := gs.record(ctx, cmd); err != nil {
		gs.log.Error("record final event", "command", fmt.Sprintf("%T", cmd), "err", err)
	}
}
