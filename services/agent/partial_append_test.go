package agent_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// exitStoredHalfway stores the first event of the first append that
// records a process exit (its ProcessExited) and fails the rest of it, as
// an append does whose second answer is lost in a NATS election.
type exitStoredHalfway struct {
	*natsjs.Store
	done atomic.Bool
}

func (s *exitStoredHalfway) Append(ctx context.Context, subject string, expected uint64, evs ...events.Envelope) (uint64, error) {
	if len(evs) < 2 || evs[0].Type != "ProcessExited" || !s.done.CompareAndSwap(false, true) {
		return s.Store.Append(ctx, subject, expected, evs...)
	}
	if _, err := s.Store.Append(ctx, subject, expected, evs[0]); err != nil {
		return 0, err
	}
	return 0, &events.PartialAppendError{Stored: 1, Err: fmt.Errorf("%w: no answer from the stream", events.ErrUnavailable)}
}

// An exit whose append stored its ProcessExited and then failed leaves only
// the termination to the outbox: each event is in the stream once, and the
// agent's published counter equals what the stream holds of the host's
// events. Queued whole, the stored ProcessExited went out again, was
// acknowledged as a duplicate and counted twice (the cluster test's audit
// saw one more published than stored).
func TestAPartialAppendQueuesOnlyWhatWasNotStored(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	var store *exitStoredHalfway
	h := newHarnessOpts(t, func(o *agent.Options) {
		store = &exitStoredHalfway{Store: o.Store.(*natsjs.Store)}
		o.Store = store
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	name := "fleets/arena/gameServers/gs-halfway"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	pid := int(h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	h.ready(pid)
	h.waitEvent(name, "GameServerReady")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", h.logs.String())
		}
	})
	h.waitEvent(name, "GameServerTerminated")
	if !store.done.Load() {
		t.Fatal("the exit was not appended through the failing store")
	}
	var types []string
	for _, e := range h.history(name) {
		types = append(types, e.Type)
	}
	want := fmt.Sprint([]string{"GameServerScheduled", "ProcessStarted", "SdkConnected", "GameServerReady", "ProcessExited", "GameServerTerminated"})
	if fmt.Sprint(types) != want {
		t.Fatalf("history %v, want %s (each event once)", types, want)
	}
	wait.Until(t, 10*time.Second, "the published counter to equal the host's events in the stream", func() error {
		stored, err := producedBy(h.ctx, h.js, "hosts/h1")
		if err != nil {
			return err
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(h.ctx, &rm); err != nil {
			return err
		}
		published := int64(-1)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "tether_agent_events_published" {
					published = 0
					for _, dp := range sum.DataPoints {
						published += dp.Value
					}
				}
			}
		}
		if published != int64(stored) {
			return fmt.Errorf("published %d, the stream holds %d of the host's events", published, stored)
		}
		return nil
	})
}

// producedBy counts the events of the whole stream that producer wrote.
func producedBy(ctx context.Context, js jetstream.JetStream, producer string) (int, error) {
	s, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	n := 0
	for seq := uint64(0); seq < info.State.LastSeq; {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return 0, err
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return 0, err
			}
			seq = meta.Sequence.Stream
			env, err := events.Unmarshal(m.Data())
			if err != nil {
				return 0, err
			}
			if env.Producer == producer {
				n++
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return 0, err
		}
	}
	return n, nil
}
