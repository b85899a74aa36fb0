package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// TestSetupKeepsTheOperatorsStreamSettings: `tether migrate` run over an
// existing stream leaves what it does not manage as the operator set it,
// and changes only what it manages and what differs.
func TestSetupKeepsTheOperatorsStreamSettings(t *testing.T) {
	e := newEnv(t)
	stream, err := e.js.Stream(e.ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	tuned := stream.CachedInfo().Config
	tuned.Compression = jetstream.S2Compression
	tuned.MaxBytes = 1 << 30
	if _, err := e.js.UpdateStream(e.ctx, tuned); err != nil {
		t.Fatal(err)
	}
	config := func() jetstream.StreamConfig {
		t.Helper()
		s, err := e.js.Stream(e.ctx, events.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config
	}

	if err := natsjs.Setup(e.ctx, e.js, natsjs.Options{}); err != nil {
		t.Fatal(err)
	}
	if c := config(); c.Compression != jetstream.S2Compression || c.MaxBytes != 1<<30 {
		t.Fatalf("a restart over the stream reset the operator's settings: compression %v, max bytes %d", c.Compression, c.MaxBytes)
	}

	if err := natsjs.Setup(e.ctx, e.js, natsjs.Options{DuplicateWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c := config()
	if c.Duplicates != time.Minute {
		t.Fatalf("duplicate window %s after Setup asked for 1m", c.Duplicates)
	}
	if c.Compression != jetstream.S2Compression || c.MaxBytes != 1<<30 || !c.DenyDelete || c.DenyPurge || !c.AllowDirect {
		t.Fatalf("the update changed more than the duplicate window: %+v", c)
	}
}

// updateCounter is a JetStream that counts the stream updates sent through it.
type updateCounter struct {
	jetstream.JetStream
	updates int
}

func (u *updateCounter) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	u.updates++
	return u.JetStream.UpdateStream(ctx, cfg)
}

// TestSetupAgainWritesNothing: the events stream Setup created reads back,
// with the server's defaults filled in, as already wanted, so the next
// process's Setup does not write its configuration again (which races
// consumer creation inside nats-server; jsclient.EnsureStream).
func TestSetupAgainWritesNothing(t *testing.T) {
	for name, opts := range map[string]natsjs.Options{
		"events":           {Replicas: 1, DuplicateWindow: natsjs.DefaultDuplicateWindow},
		"events in memory": {Replicas: 1, DuplicateWindow: time.Minute, Storage: jetstream.MemoryStorage},
	} {
		t.Run(name, func(t *testing.T) {
			ns := natstest.Start(t)
			_, js := natstest.Connect(t, ns)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			counted := &updateCounter{JetStream: js}
			if err := natsjs.Setup(ctx, counted, opts); err != nil {
				t.Fatal(err)
			}
			if err := natsjs.Setup(ctx, counted, opts); err != nil {
				t.Fatalf("again: %v", err)
			}
			if counted.updates != 0 {
				t.Errorf("Setup over the stream it created updated it %d times, want none", counted.updates)
			}
		})
	}
}
