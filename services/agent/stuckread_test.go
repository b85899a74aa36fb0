package agent_test

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	kit "github.com/tetherhq/tether/services/testkit/stack"
)

// stuckHistory is the event store with History reads that hang, once
// armed, until released or their context ends: a read through a
// connection that has just gone dead, which waits out its timeout.
type stuckHistory struct {
	*natsjs.Store
	armed   atomic.Bool
	once    sync.Once
	stuck   chan struct{} // closed when the first armed read hangs
	release chan struct{}
}

func (s *stuckHistory) History(ctx context.Context, subject string, from uint64) ([]events.Envelope, error) {
	if s.armed.Load() {
		s.once.Do(func() { close(s.stuck) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.History(ctx, subject, from)
}

// A process's exit is recorded while the agent's periodic re-read of the
// server's history hangs: the re-read holds the server's lock only to
// fold what it read. It held it throughout, so an exit during a read on a
// connection that had just been cut waited out the read's timeout
// (TestOutboxDropsEventsForAServerEndedWhileTheHostWasCut timed out so in
// CI).
func TestAProcessExitDoesNotWaitBehindAHangingHistoryRead(t *testing.T) {
	k := kit.New(t, kit.WithCommands())
	store := &stuckHistory{Store: k.Store, stuck: make(chan struct{}), release: make(chan struct{})}
	h := &harness{t: t, ctx: k.Ctx, js: k.JS, store: k.Store, bus: k.Commands}
	t.Cleanup(func() { close(store.release) }) // after the agent's own cleanup has stopped it
	h.startAgent(func(o *agent.Options) { o.Store = store })

	name := "fleets/arena/gameServers/gs-stuck-read"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	pid := int(h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())

	store.armed.Store(true)
	select {
	case <-store.stuck: // the agent's sync (every 100 ms here) is reading the history
	case <-time.After(10 * time.Second):
		t.Fatal("no history read within 10s")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(name, "ProcessExited")
}
