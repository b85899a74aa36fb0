package events_test

import (
	"errors"
	"regexp"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestNew(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	when := time.Date(2025, 3, 1, 13, 0, 0, 5, paris)
	data := &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 2}}

	e := events.New("fleets/arena", when, data)

	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(e.ID) {
		t.Errorf("ID = %q, want 32 hex digits", e.ID)
	}
	if e.Type != "FleetCreated" {
		t.Errorf("Type = %q, want FleetCreated", e.Type)
	}
	if e.Aggregate != "fleets/arena" {
		t.Errorf("Aggregate = %q", e.Aggregate)
	}
	if !e.Time.Equal(when) || e.Time.Location() != time.UTC {
		t.Errorf("Time = %v, want %v in UTC", e.Time, when)
	}
	if e.SchemaVersion != events.SchemaVersion {
		t.Errorf("SchemaVersion = %d, want %d", e.SchemaVersion, events.SchemaVersion)
	}
	if e.Data != data {
		t.Errorf("Data = %v, want the payload passed in", e.Data)
	}
	if e.Sequence != 0 {
		t.Errorf("Sequence = %d, want 0 before storing", e.Sequence)
	}
	if other := events.New("fleets/arena", when, data); other.ID == e.ID {
		t.Errorf("two envelopes share the id %q", e.ID)
	}
}

func TestTypeOf(t *testing.T) {
	tests := []struct {
		name string
		data proto.Message
		want string
	}{
		{name: "fleet event", data: &eventsv1.FleetCreated{}, want: "FleetCreated"},
		{name: "host event", data: &eventsv1.HostLost{}, want: "HostLost"},
		{name: "game server event", data: &eventsv1.SdkDisconnected{}, want: "SdkDisconnected"},
		{name: "typed nil payload", data: (*eventsv1.GameServerReady)(nil), want: "GameServerReady"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.TypeOf(tt.data); got != tt.want {
				t.Errorf("TypeOf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNewEventID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := events.NewEventID()
		if len(id) != 32 {
			t.Fatalf("NewEventID() = %q, want 32 hex digits", id)
		}
		if seen[id] {
			t.Fatalf("NewEventID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		env  events.Envelope
	}{
		{
			name: "every field set",
			env: events.Envelope{
				ID:                 "0123456789abcdef0123456789abcdef",
				Type:               "GameServerTerminated",
				Aggregate:          "fleets/arena/gameServers/gs-1",
				Time:               time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC),
				Producer:           "hosts/h1",
				RequestID:          "req-1",
				RequestFingerprint: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				CorrelationID:      "corr-1",
				CausationID:        "cause-1",
				TraceParent:        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
				TraceState:         "vendor=value",
				SchemaVersion:      7,
				Data: &eventsv1.GameServerTerminated{
					Reason: eventsv1.Reason_REASON_PROCESS_EXITED,
					Evidence: &eventsv1.Evidence{
						ExitCode:          proto.Int32(0),
						Signal:            "killed",
						LastHeartbeatTime: timestamppb.New(t0),
						ConnectionHistory: []*eventsv1.ConnectionChange{{Time: timestamppb.New(t0), Connected: true}},
					},
				},
			},
		},
		{
			name: "only the required fields",
			env:  events.Envelope{ID: "e1", Type: "FleetDeleted", Aggregate: "fleets/a", Time: t0, Data: &eventsv1.FleetDeleted{}},
		},
		{
			name: "zero time",
			env:  events.Envelope{ID: "e2", Type: "HostDeregistered", Aggregate: "hosts/h1", Data: &eventsv1.HostDeregistered{}},
		},
		{
			name: "built by New",
			env:  events.New("hosts/h1", t0, &eventsv1.HostRegistered{Capacity: 8, Labels: map[string]string{"region": "eu"}}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.env.Marshal()
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			got, err := events.Unmarshal(b)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			want := tt.env
			if !got.Time.Equal(want.Time) {
				t.Errorf("Time = %v, want %v", got.Time, want.Time)
			}
			if !proto.Equal(got.Data, want.Data) {
				t.Errorf("Data = %v, want %v", got.Data, want.Data)
			}
			if got.Sequence != 0 {
				t.Errorf("Sequence = %d, want 0: the store sets it, it is not in the bytes", got.Sequence)
			}
			got.Time, want.Time = time.Time{}, time.Time{}
			got.Data, want.Data = nil, nil
			if got != want {
				t.Errorf("Unmarshal(Marshal(e)) =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestEnvelopeMarshalErrors(t *testing.T) {
	tests := []struct {
		name string
		env  events.Envelope
	}{
		{name: "no payload", env: events.Envelope{ID: "e1", Type: "FleetDeleted", Aggregate: "fleets/a"}},
		{name: "type disagrees with payload", env: events.Envelope{ID: "e1", Type: "FleetCreated", Aggregate: "fleets/a", Data: &eventsv1.FleetDeleted{}}},
		{name: "type missing", env: events.Envelope{ID: "e1", Aggregate: "fleets/a", Data: &eventsv1.FleetDeleted{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := tt.env.Marshal(); err == nil {
				_, uerr := events.Unmarshal(b)
				t.Errorf("Marshal succeeded with bytes that Unmarshal refuses (%v); want an error", uerr)
			}
		})
	}
}

func TestUnmarshalUndecodable(t *testing.T) {
	mustMarshal := func(t *testing.T, m proto.Message) []byte {
		t.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	deleted, err := anypb.New(&eventsv1.FleetDeleted{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		bytes func(t *testing.T) []byte
	}{
		{name: "garbage bytes", bytes: func(*testing.T) []byte { return []byte("garbage") }},
		{name: "truncated varint", bytes: func(*testing.T) []byte { return []byte{0x0a, 0xff} }},
		{name: "empty input has no payload", bytes: func(*testing.T) []byte { return nil }},
		{name: "envelope with no payload", bytes: func(t *testing.T) []byte {
			return mustMarshal(t, &eventsv1.Envelope{Id: "e1", Type: "FleetDeleted", Aggregate: "fleets/a"})
		}},
		{name: "unknown Any type url", bytes: func(t *testing.T) []byte {
			return mustMarshal(t, &eventsv1.Envelope{Id: "e1", Type: "FleetRenamed", Data: &anypb.Any{
				TypeUrl: "type.googleapis.com/tether.events.v1.FleetRenamed",
			}})
		}},
		{name: "empty Any type url", bytes: func(t *testing.T) []byte {
			return mustMarshal(t, &eventsv1.Envelope{Id: "e1", Type: "FleetDeleted", Data: &anypb.Any{}})
		}},
		{name: "corrupt payload bytes", bytes: func(t *testing.T) []byte {
			return mustMarshal(t, &eventsv1.Envelope{Id: "e1", Type: "FleetCreated", Data: &anypb.Any{
				TypeUrl: "type.googleapis.com/tether.events.v1.FleetCreated",
				Value:   []byte{0x0a, 0x05, 0x01},
			}})
		}},
		{name: "type disagrees with payload", bytes: func(t *testing.T) []byte {
			return mustMarshal(t, &eventsv1.Envelope{Id: "e1", Type: "FleetCreated", Aggregate: "fleets/a", Data: deleted})
		}},
		{name: "type missing", bytes: func(t *testing.T) []byte {
			return mustMarshal(t, &eventsv1.Envelope{Id: "e1", Aggregate: "fleets/a", Data: deleted})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := events.Unmarshal(tt.bytes(t))
			if !errors.Is(err, events.ErrUndecodable) {
				t.Fatalf("Unmarshal err = %v, want ErrUndecodable", err)
			}
		})
	}
}
