package events_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Fuzz targets for what Tether decodes from outside: stored envelopes,
// resource names and fleet specs. `make fuzz` runs each for a bounded
// time (docs/fuzzing.md); without -fuzz, `go test` runs the seeds and the
// corpus in testdata/fuzz as regression tests.

// seedEnvelopes are valid stored events of every aggregate.
func seedEnvelopes(f *testing.F) {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, e := range []events.Envelope{
		events.New("fleets/arena/gameServers/gs-1", at, &eventsv1.GameServerScheduled{Host: "hosts/h1"}),
		events.New("fleets/arena/gameServers/gs-1", at, &eventsv1.GameServerReady{}),
		events.New("fleets/arena/gameServers/gs-1", at, &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_EXITED}),
		events.New("fleets/arena", at, &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 2}}),
		events.New("hosts/h1", at, &eventsv1.HostRegistered{Capacity: 4}),
		events.New("gameSessions/m1", at, &eventsv1.GameSessionCreated{GameServer: "fleets/arena/gameServers/gs-1"}),
	} {
		b, err := e.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
}

// Any bytes decode to an envelope or to ErrUndecodable, never a panic; a
// decoded envelope encodes again to bytes that decode to the same event.
func FuzzUnmarshal(f *testing.F) {
	seedEnvelopes(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.Unmarshal(b)
		if err != nil {
			return
		}
		again, err := e.Marshal()
		if err != nil {
			return // e.g. a type that does not match its payload: refused on write too
		}
		e2, err := events.Unmarshal(again)
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		if e2.ID != e.ID || e2.Type != e.Type || e2.Aggregate != e.Aggregate || !proto.Equal(e2.Data, e.Data) {
			t.Fatalf("round trip changed the event: %+v → %+v", e, e2)
		}
	})
}

// Apply folds any decodable event into any aggregate without a panic, and
// never changes the state it is given.
func FuzzApply(f *testing.F) {
	seedEnvelopes(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.Unmarshal(b)
		if err != nil {
			return
		}
		gs := &eventsv1.GameServerState{Name: "fleets/arena/gameServers/gs-1", Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY}
		before := proto.CloneOf(gs)
		_, _ = events.ApplyGameServer(nil, e)
		_, _ = events.ApplyGameServer(gs, e)
		if !proto.Equal(gs, before) {
			t.Fatalf("ApplyGameServer changed its input: %v → %v", before, gs)
		}
		_, _ = events.ApplyFleet(nil, e)
		_, _ = events.ApplyHost(nil, e)
		_, _ = events.ApplyGameSession(nil, e)
	})
}

// A game server name parses or is refused; one that parses is rebuilt
// from its parts exactly.
func FuzzParseGameServerName(f *testing.F) {
	for _, s := range []string{"fleets/arena/gameServers/gs-1", "fleets//gameServers/x", "fleets/a/gameServers/b/c", "", "hosts/h1", "fleets/ä/gameServers/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		fleet, id, err := events.ParseGameServerName(name)
		if err != nil {
			return
		}
		if got := events.GameServerName(fleet, id); got != name {
			t.Fatalf("%q parsed to (%q, %q), which name %q", name, fleet, id, got)
		}
		if _, err := events.Subject(name); err != nil {
			t.Fatalf("%q parses but has no subject: %v", name, err)
		}
	})
}

// A fleet spec is valid or refused with an error, never a panic; a valid
// one normalised stays valid, and normalising it again changes nothing.
func FuzzValidateFleetSpec(f *testing.F) {
	for _, s := range []*eventsv1.FleetSpec{
		{Replicas: 3, Template: &eventsv1.GameServerTemplate{Command: "/bin/game", Ports: []*eventsv1.PortSpec{{Name: "game", Protocol: eventsv1.Protocol_PROTOCOL_UDP}}}},
		{Replicas: -1},
		{Replicas: 1, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}, Labels: map[string]string{"mode": "ranked"}},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s eventsv1.FleetSpec
		if proto.Unmarshal(b, &s) != nil {
			return
		}
		events.NormalizeFleetSpec(&s)
		if events.ValidateFleetSpec(&s) != nil {
			return
		}
		once := proto.CloneOf(&s)
		events.NormalizeFleetSpec(&s)
		if !proto.Equal(once, &s) {
			t.Fatalf("normalising twice changed the spec: %v → %v", once, &s)
		}
		if err := events.ValidateFleetSpec(&s); err != nil {
			t.Fatalf("a valid spec became invalid: %v", err)
		}
	})
}
