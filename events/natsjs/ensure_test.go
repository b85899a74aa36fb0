package natsjs_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
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
