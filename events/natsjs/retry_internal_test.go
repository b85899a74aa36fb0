package natsjs

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// The stream's position is asked again after an attempt that got no
// answer, within the caller's deadline, instead of waiting out the whole
// deadline on the first request (a controller pass lost 5 s so while a
// NATS node restarted).
func TestStreamLastSequenceAsksAgainAfterNoAnswer(t *testing.T) {
	ctx, s := newTestStore(t)
	name := events.GameServerName("arena", "gs-a")
	seq, err := s.Append(ctx, events.MustSubject(name), events.AnySequence, events.New(name, time.Now(), &eventsv1.HealthDegraded{}))
	if err != nil {
		t.Fatal(err)
	}
	u := &natstest.UnansweredOnce{Stream: s.stream}
	s.stream = u
	t.Cleanup(func() { s.stream = u.Stream })
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // an unanswered attempt of 2 s (jsclient), and the next
	defer cancel()
	got, err := s.StreamLastSequence(cctx)
	if err != nil {
		t.Fatalf("after an unanswered request: %v", err)
	}
	if got != seq || u.InfoCalls() != 2 {
		t.Fatalf("last sequence %d in %d requests, want %d in 2", got, u.InfoCalls(), seq)
	}
}
