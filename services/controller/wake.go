package controller

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
)

// Some events want a pass at once rather than at the next one (every
// Options.Interval, a second by default):
//
//   - a game server that ended (GameServerTerminated) or will end
//     (GameServerUnhealthy) leaves its fleet short: its replacement is
//     scheduled at once (a crash to a READY replacement took a second, the
//     pass's wait);
//   - an allocation (GameServerAllocated, GameServerReserved) takes a READY
//     server out of an autoscaled fleet's buffer: the buffer is refilled at
//     once;
//   - an operator's change to a fleet (created, updated, deleted, a
//     rollout paused, resumed or undone) is acted on at once;
//   - a host that registers, is uncordoned or is to be drained changes
//     where servers go.
//
// While it leads, the controller follows the events of every game server,
// fleet and host (headers only: the type is in a header) and such an
// event wakes the pass loop, no sooner than wakeGap after the last pass
// began (and no later than the next tick: waitNextPass); the pass first waits (at most wakeFreshnessWait) for the views to
// include the event, so it decides on what woke it. The controller's own
// events wake nothing: a pass already waits for its writes.

// minWakeGap bounds how often events may run a pass early.
const minWakeGap = 100 * time.Millisecond

// wakeGap is how long after a pass began that took took an event may run
// the next: minWakeGap, or twice the pass, so that woken passes keep the
// controller busy at most half the time. A pass costs O(live servers +
// hosts); at 100,000 servers with matches ending every few milliseconds,
// back-to-back passes would take a core for what one pass a few hundred
// milliseconds later decides as well.
func wakeGap(took time.Duration) time.Duration { return max(minWakeGap, 2*took) }

// wakeFreshnessWait bounds a woken pass's wait for the views to include the
// event that woke it; past it the pass runs on what the views show.
const wakeFreshnessWait = time.Second

// passWake follows game servers' events for the pass loop.
type passWake struct {
	js jetstream.JetStream

	mu         sync.Mutex
	cancel     context.CancelFunc // stops the watch; nil while none runs
	done       chan struct{}
	autoscaled atomic.Pointer[map[string]bool] // fleet ids whose allocations wake
	wake       chan struct{}                   // a token when an event woke the loop
	seq        atomic.Uint64                   // the stream sequence of the last waking event
}

func newPassWake(js jetstream.JetStream) *passWake {
	w := &passWake{js: js, wake: make(chan struct{}, 1)}
	w.autoscaled.Store(&map[string]bool{})
	return w
}

// wakes is the channel that receives a token after a waking event.
func (w *passWake) wakes() <-chan struct{} { return w.wake }

// sequence is the stream sequence of the last waking event: the woken pass
// waits for the views to reach it.
func (w *passWake) sequence() uint64 { return w.seq.Load() }

// want follows game servers' events in ctx, the leadership's, with the
// allocations of autoscaled (fleet ids) waking too: it starts the watch,
// or restarts it when it ended, from stream sequence from on (the first
// event the views the pass read may not include: one appended between
// that read and the watch's start still wakes a pass). An error to start
// it is returned; the next pass tries again.
func (w *passWake) want(ctx context.Context, autoscaled []string, from uint64) error {
	set := make(map[string]bool, len(autoscaled))
	for _, f := range autoscaled {
		set[f] = true
	}
	w.autoscaled.Store(&set)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		select {
		case <-w.done:
			w.stopLocked() // it ended (its consumer failed): start another
		default:
			return nil
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	cons, err := w.js.OrderedConsumer(wctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{
			events.SubjectPrefix + "." + events.KindGameServer + ".>",
			events.SubjectPrefix + "." + events.KindFleet + ".*",
			events.SubjectPrefix + "." + events.KindHost + ".*",
		},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   max(from, 1),
		HeadersOnly:   true,
	})
	if err != nil {
		cancel()
		return err
	}
	cc, err := cons.Consume(w.see)
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

// see judges one event: a waking one leaves a token and its sequence.
func (w *passWake) see(m jetstream.Msg) {
	typ := m.Headers().Get(natsjs.HeaderType)
	switch {
	case wakingTypes[typ]:
	case allocationTypes[typ]:
		if !(*w.autoscaled.Load())[fleetOfSubject(m.Subject())] {
			return
		}
	default:
		return
	}
	if meta, err := m.Metadata(); err == nil {
		w.seq.Store(max(w.seq.Load(), meta.Sequence.Stream))
	}
	select {
	case w.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

// wakingTypes are the event types that wake the pass loop; allocationTypes
// wake it for autoscaled fleets only.
var (
	wakingTypes = typeSet(&eventsv1.GameServerTerminated{}, &eventsv1.GameServerUnhealthy{},
		&eventsv1.FleetCreated{}, &eventsv1.FleetUpdated{}, &eventsv1.FleetDeleted{},
		&eventsv1.FleetRolloutPaused{}, &eventsv1.FleetRolloutResumed{}, &eventsv1.FleetRolledBack{},
		&eventsv1.HostRegistered{}, &eventsv1.HostUncordoned{}, &eventsv1.HostDrainRequested{})
	allocationTypes = typeSet(&eventsv1.GameServerAllocated{}, &eventsv1.GameServerReserved{})
)

// typeSet is the set of the event types of msgs.
func typeSet(msgs ...proto.Message) map[string]bool {
	out := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		out[events.TypeOf(m)] = true
	}
	return out
}

// fleetOfSubject is the fleet id of a game server's subject
// (tether.ev.gs.<fleet>.<id>, or on a host subject tether.ev.gs.<fleet>.<id>.<host>), or "".
func fleetOfSubject(subject string) string {
	rest, ok := strings.CutPrefix(subject, events.SubjectPrefix+"."+events.KindGameServer+".")
	if !ok {
		return ""
	}
	fleet, _, _ := strings.Cut(rest, ".")
	return fleet
}

// stop ends the watch, if one runs.
func (w *passWake) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
}

func (w *passWake) stopLocked() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
	w.cancel, w.done = nil, nil
}
