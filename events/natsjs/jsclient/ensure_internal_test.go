package jsclient

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/testkit/natstest"
)

// TestEnsuredStreamReadsAsWanted: a stream EnsureStream created reads back,
// with the server's defaults filled in, as already wanted, so the next
// process's EnsureStream does not write its configuration again (which
// races consumer creation inside nats-server). The events stream's
// configuration is checked so in events/natsjs
// (TestSetupAgainWritesNothing).
func TestEnsuredStreamReadsAsWanted(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, want := range map[string]jetstream.StreamConfig{
		"limited, as the commands stream": {
			Name: "LIMITED", Subjects: []string{"limited.*"}, Retention: jetstream.LimitsPolicy,
			Duplicates: 10 * time.Minute, MaxAge: time.Hour, MaxConsumers: 100_000,
		},
		"server defaults": {Name: "DEFAULTS", Subjects: []string{"defaults.>"}},
	} {
		if _, err := EnsureStream(ctx, js, want); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s, err := js.Stream(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if have := s.CachedInfo().Config; !managedEqual(have, want) {
			t.Errorf("%s: created as %+v, which does not read as wanted %+v", name, have, want)
		}
		if _, err := EnsureStream(ctx, js, want); err != nil {
			t.Fatalf("%s again: %v", name, err)
		}
	}
}

// lateLookup is a JetStream whose first stream lookup misses, as when
// another process creates the stream between this one's lookup and create.
type lateLookup struct {
	jetstream.JetStream
	missed bool
}

func (l *lateLookup) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if !l.missed {
		l.missed = true
		return nil, jetstream.ErrStreamNotFound
	}
	return l.JetStream.Stream(ctx, name)
}

// TestEnsureStreamCreatedMeanwhileOtherwise: a stream another process
// created, otherwise than wanted, between the lookup and the create is
// looked up again and updated.
func TestEnsureStreamCreatedMeanwhileOtherwise(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := jetstream.StreamConfig{Name: "RACED", Subjects: []string{"raced.>"}, Duplicates: time.Minute, Description: "wanted"}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RACED", Subjects: []string{"raced.>"}}); err != nil {
		t.Fatal(err)
	}
	s, err := EnsureStream(ctx, &lateLookup{JetStream: js}, want)
	if err != nil {
		t.Fatal(err)
	}
	if have := s.CachedInfo().Config; !managedEqual(have, want) {
		t.Fatalf("the stream is %+v, want %+v", have, want)
	}
}
