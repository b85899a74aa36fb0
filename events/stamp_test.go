package events_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestStampEnvelopes(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	msgs := []proto.Message{&eventsv1.ShutdownRequested{}, &eventsv1.GameServerTerminated{}}
	const name = "fleets/arena/gameServers/gs-1"

	plain := events.Stamp{Producer: "controllers/c1", Time: at, TraceParent: "00-abc-def-01"}.Envelopes(name, msgs)
	for i, e := range plain {
		if e.Producer != "controllers/c1" || e.Actor != "controllers/c1" || e.Aggregate != name || !e.Time.Equal(at) ||
			e.TraceParent != "00-abc-def-01" || e.CorrelationID != plain[0].ID || e.RequestID != "" || e.Type != events.TypeOf(msgs[i]) {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	if plain[0].ID == plain[1].ID {
		t.Error("two events of one call share an id")
	}

	req := events.Stamp{Producer: "apiservers/r1", Actor: "alice", Time: at, RequestID: "req-1", RequestFingerprint: "f00"}
	a, b := req.Envelopes(name, msgs), req.Envelopes(name, msgs)
	for i := range a {
		if a[i].ID != b[i].ID {
			t.Errorf("a retried request got event id %s, then %s", a[i].ID, b[i].ID)
		}
		if a[i].Actor != "alice" || a[i].Producer != "apiservers/r1" || a[i].CorrelationID != "req-1" ||
			a[i].RequestID != "req-1" || a[i].RequestFingerprint != "f00" {
			t.Errorf("event %d: %+v", i, a[i])
		}
	}
	if other := req.Envelopes("fleets/arena/gameServers/gs-2", msgs); other[0].ID == a[0].ID {
		t.Error("one request id gave two aggregates the same event id")
	}

	// The actor survives the store's encoding.
	stored, err := a[0].Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := events.Unmarshal(stored)
	if err != nil || back.Actor != "alice" {
		t.Fatalf("decoded actor %q, err %v", back.Actor, err)
	}
}

func TestActorInContext(t *testing.T) {
	ctx := context.Background()
	if got := events.ActorFrom(ctx); got != "" {
		t.Fatalf("actor of a bare context: %q", got)
	}
	if got := events.ActorFrom(events.WithActor(ctx, "matchmaker-eu")); got != "matchmaker-eu" {
		t.Fatalf("actor %q", got)
	}
}
