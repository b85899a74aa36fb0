package controller

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
)

// An allocation takes a READY server out of an autoscaled fleet's buffer:
// the buffer is refilled at once rather than at the next pass. While an
// autoscaled fleet exists, the leader follows the game servers' events
// (headers only: the type is in a header) and a GameServerAllocated or
// GameServerReserved wakes the pass loop, no sooner than minWakeGap after
// the last pass began.

// minWakeGap bounds how often allocations may run a pass early.
const minWakeGap = 100 * time.Millisecond

// allocationWatch follows allocations for the pass loop.
type allocationWatch struct {
	js jetstream.JetStream

	mu     sync.Mutex
	cancel context.CancelFunc // stops the watch; nil while none runs
	done   chan struct{}
	wake   chan struct{} // a token when an allocation was seen
}

func newAllocationWatch(js jetstream.JetStream) *allocationWatch {
	return &allocationWatch{js: js, wake: make(chan struct{}, 1)}
}

// wakes is the channel that receives a token after an allocation.
func (w *allocationWatch) wakes() <-chan struct{} { return w.wake }

// want starts the watch (in ctx, the leadership's) when on and none runs,
// and stops it when off. An error to start it is returned; the next pass
// tries again.
func (w *allocationWatch) want(ctx context.Context, on bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !on {
		w.stopLocked()
		return nil
	}
	if w.cancel != nil {
		select {
		case <-w.done:
			w.cancel, w.done = nil, nil // it ended (its consumer failed): start another
		default:
			return nil
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	cons, err := w.js.OrderedConsumer(wctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SubjectPrefix + "." + events.KindGameServer + ".>"},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		cancel()
		return err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		switch m.Headers().Get(natsjs.HeaderType) {
		case "GameServerAllocated", "GameServerReserved":
			select {
			case w.wake <- struct{}{}:
			default: // a wake is pending already
			}
		}
	})
	if err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-wctx.Done():
		case <-cc.Closed():
		}
		cc.Stop()
	}()
	w.cancel, w.done = cancel, done
	return nil
}

// stop ends the watch, if one runs.
func (w *allocationWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
}

func (w *allocationWatch) stopLocked() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
	w.cancel, w.done = nil, nil
}
