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

// Ids derived from a request are stable across versions: a retry that
// reaches a replica of another version during a rolling upgrade must write
// the id the first call wrote, or the stream keeps both. The digests are
// those of the formulas as first released (sha256 of the NUL-joined
// parts, first 16 bytes).
func TestDerivedIDsKeepTheirFormula(t *testing.T) {
	req := events.Stamp{Producer: "apiservers/r1", RequestID: "r1"}.Envelopes("fleets/a", []proto.Message{&eventsv1.FleetDeleted{}})
	if got, want := req[0].ID, "b5320d374a15d808517aaa9f16eea440"; got != want {
		t.Errorf("event 0 of request r1 on fleets/a: id %s, want %s", got, want)
	}
	if got, want := events.DerivedID("allocate", "r1"), "b0c55d1bb070fcfe5a60c1d2cb481699"; got != want {
		t.Errorf("DerivedID(allocate, r1) = %s, want %s", got, want)
	}
}

// A stamp's EventID names the first event whatever its aggregate, and the
// others derive from it; After stamps events that follow from another
// with its actor, time, request, trace and correlation, and it as their
// cause.
func TestStampOfAFollowUp(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	msgs := []proto.Message{&eventsv1.ShutdownRequested{}, &eventsv1.GameServerTerminated{}}
	fixed := events.Stamp{Producer: "apiservers/r1", Time: at, RequestID: "req-1", EventID: "e1"}
	a, b := fixed.Envelopes("fleets/a/gameServers/gs-1", msgs), fixed.Envelopes("fleets/a/gameServers/gs-2", msgs)
	if a[0].ID != "e1" || b[0].ID != "e1" || a[1].ID != b[1].ID || a[1].ID == "e1" {
		t.Errorf("ids with EventID e1: %s %s on one server, %s %s on another", a[0].ID, a[1].ID, b[0].ID, b[1].ID)
	}
	if a[0].RequestID != "req-1" || a[0].CorrelationID != "req-1" {
		t.Errorf("request %q correlation %q, want req-1 for both", a[0].RequestID, a[0].CorrelationID)
	}

	for _, cause := range []events.Envelope{a[0], events.Stamp{Producer: "apiservers/r1", Actor: "bob", Time: at, TraceParent: "00-abc-def-01"}.Envelopes("fleets/a", msgs[:1])[0]} {
		st := events.After(cause, "apiservers/r2")
		st.EventID = "s1"
		got := st.Envelopes("gameSessions/g1", []proto.Message{&eventsv1.GameSessionEnded{}})[0]
		if got.ID != "s1" || got.Producer != "apiservers/r2" || got.Actor != cause.Actor || !got.Time.Equal(cause.Time) ||
			got.RequestID != cause.RequestID || got.CorrelationID != cause.CorrelationID || got.CausationID != cause.ID ||
			got.TraceParent != cause.TraceParent {
			t.Errorf("after %+v:\n got %+v", cause, got)
		}
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
