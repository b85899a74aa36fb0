package events_test

import (
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

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
