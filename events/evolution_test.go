package events_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// stored wraps payload bytes, as some version of Tether wrote them, in an
// envelope as it is stored.
func stored(t *testing.T, typ, aggregate string, payload []byte) []byte {
	t.Helper()
	b, err := proto.Marshal(&eventsv1.Envelope{
		Id: "e-" + typ, Type: typ, Aggregate: aggregate, OccurTime: timestamppb.New(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
		SchemaVersion: 1, Data: &anypb.Any{TypeUrl: "type.googleapis.com/tether.events.v1." + typ, Value: payload},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Payloads gain fields compatibly (docs/schema-evolution.md):
// an event written before a field existed still replays, and one written by
// a later version with a field this one does not know replays too.
func TestEventsReplayAcrossSchemaVersions(t *testing.T) {
	const gs = "fleets/arena/gameServers/gs-1"
	// GameServerScheduled as the first release wrote it: host (1) and sdk
	// disconnect grace (4), before player_sessions (6) was added.
	var v1 []byte
	v1 = protowire.AppendTag(v1, 1, protowire.BytesType)
	v1 = protowire.AppendString(v1, "hosts/h1")
	v1 = protowire.AppendTag(v1, 4, protowire.VarintType)
	v1 = protowire.AppendVarint(v1, 30)
	// GameServerReady as the first release wrote it: empty, before
	// reservation_ended (1). And one from a future version with a field 99.
	var future []byte
	future = protowire.AppendTag(future, 99, protowire.BytesType)
	future = protowire.AppendString(future, "something new")

	var state *eventsv1.GameServerState
	for _, raw := range [][]byte{
		stored(t, "GameServerScheduled", gs, v1),
		stored(t, "ProcessStarted", gs, mustMarshal(t, &eventsv1.ProcessStarted{Pid: 7, Attempt: 1})),
		stored(t, "GameServerReady", gs, future),
	} {
		e, err := events.Unmarshal(raw)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if state, err = events.ApplyGameServer(state, e); err != nil {
			t.Fatalf("apply %s: %v", e.Type, err)
		}
	}
	if state.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_READY || state.GetHost() != "hosts/h1" || state.GetSdkDisconnectGraceSeconds() != 30 {
		t.Fatalf("state = %v", state)
	}
	if state.GetPlayerSessionPolicy() != nil || !state.GetEverReady() {
		t.Fatalf("a field the old event lacks must read as unset: policy %v, ever ready %v", state.GetPlayerSessionPolicy(), state.GetEverReady())
	}
}

// A server scheduled before counters and lists existed has none (a change
// of one is COUNTER_NOT_FOUND, not an error of its history), and a
// CounterChanged or ListChanged written by a later version with a field
// this one does not know still folds.
func TestCountersReplayAcrossSchemaVersions(t *testing.T) {
	const gs = "fleets/arena/gameServers/gs-1"
	// GameServerTemplate before counters (6) and lists (7): command only.
	var template []byte
	template = protowire.AppendTag(template, 1, protowire.BytesType)
	template = protowire.AppendString(template, "/bin/game")
	var old []byte
	old = protowire.AppendTag(old, 1, protowire.BytesType)
	old = protowire.AppendString(old, "hosts/h1")
	old = protowire.AppendTag(old, 2, protowire.BytesType)
	old = protowire.AppendBytes(old, template)
	e, err := events.Unmarshal(stored(t, "GameServerScheduled", gs, old))
	if err != nil {
		t.Fatal(err)
	}
	state, err := events.ApplyGameServer(nil, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.GetCounters()) != 0 || len(state.GetLists()) != 0 {
		t.Fatalf("counters %v, lists %v, want none", state.GetCounters(), state.GetLists())
	}
	state.Lifecycle = eventsv1.Lifecycle_LIFECYCLE_READY
	if _, err := events.DecideGameServer(gs, state, events.UpdateCounter{Name: "rooms", CountDiff: 1}); !errors.Is(err, events.ErrMissing) {
		t.Fatalf("a counter of a server from before counters: %v, want COUNTER_NOT_FOUND", err)
	}

	state.Counters = map[string]*eventsv1.Counter{"rooms": {Capacity: 10}}
	state.Lists = map[string]*eventsv1.List{"players": {Capacity: 10}}
	future := func(m proto.Message) []byte {
		b := mustMarshal(t, m)
		b = protowire.AppendTag(b, 99, protowire.BytesType)
		return protowire.AppendString(b, "something new")
	}
	for _, raw := range [][]byte{
		stored(t, "CounterChanged", gs, future(&eventsv1.CounterChanged{Name: "rooms", Count: 2, Capacity: 10, CountDiff: 2})),
		stored(t, "ListChanged", gs, future(&eventsv1.ListChanged{Name: "players", Capacity: 10, Values: []string{"p1"}, Added: []string{"p1"}})),
	} {
		e, err := events.Unmarshal(raw)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if state, err = events.ApplyGameServer(state, e); err != nil {
			t.Fatalf("apply %s: %v", e.Type, err)
		}
	}
	if state.GetCounters()["rooms"].GetCount() != 2 || len(state.GetLists()["players"].GetValues()) != 1 {
		t.Fatalf("counters %v, lists %v", state.GetCounters(), state.GetLists())
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
