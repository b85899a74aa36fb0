package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
)

// An allocation takes a READY server out of an autoscaled fleet's buffer:
// the buffer is refilled at once rather than at the next pass. While
// autoscaled fleets exist, the leader follows their game servers' events
// (headers only: the type is in a header; other fleets' events are not
// delivered) and a GameServerAllocated or GameServerReserved wakes the
// pass loop, no sooner than minWakeGap after the last pass began.

// minWakeGap bounds how often allocations may run a pass early.
const minWakeGap = 100 * time.Millisecond

// allocationWatch follows allocations for the pass loop.
type allocationWatch struct {
	js jetstream.JetStream

	mu       sync.Mutex
	cancel   context.CancelFunc // stops the watch; nil while none runs
	done     chan struct{}
	subjects []string      // the watched subjects, sorted
	wake     chan struct{} // a token when an allocation was seen
}

func newAllocationWatch(js jetstream.JetStream) *allocationWatch {
	return &allocationWatch{js: js, wake: make(chan struct{}, 1)}
}

// wakes is the channel that receives a token after an allocation.
func (w *allocationWatch) wakes() <-chan struct{} { return w.wake }

// want follows the game servers of fleets (ids; the autoscaled ones) in
// ctx, the leadership's: it starts the watch, restarts it when the fleets
// changed or it ended, and stops it when there are none. An error to
// start it is returned; the next pass tries again.
func (w *allocationWatch) want(ctx context.Context, fleets []string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	subjects := make([]string, 0, len(fleets))
	for _, f := range fleets {
		subjects = append(subjects, events.FleetGameServersSubject(f))
	}
	slices.Sort(subjects)
	if w.cancel != nil {
		select {
		case <-w.done:
			w.stopLocked() // it ended (its consumer failed): start another
		default:
			if slices.Equal(subjects, w.subjects) {
				return nil
			}
			w.stopLocked()
		}
	}
	if len(subjects) == 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	cons, err := w.js.OrderedConsumer(wctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects,
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
	w.cancel, w.done, w.subjects = cancel, done, subjects
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
	w.cancel, w.done, w.subjects = nil, nil, nil
}
