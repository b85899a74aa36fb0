package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// Fuzz targets for the API's request validators (docs/fuzzing.md): what
// they accept can always be stored, and what they refuse is refused as
// INVALID_ARGUMENT with the field, never as another error.

// fuzzAt is the time of the events the targets build.
var fuzzAt = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// seedFleet is a realistic fleet, as arenaFleet in the REST tests.
func seedFleet() *tetherv1.Fleet {
	return &tetherv1.Fleet{
		Replicas: 3,
		Template: &tetherv1.GameServerTemplate{
			Command: "/usr/local/bin/mygame", Args: []string{"--port", "${TETHER_PORT_GAME}"},
			Env:   map[string]string{"MODE": "ranked"},
			Ports: []*tetherv1.PortSpec{{Name: "game", Protocol: tetherv1.PortSpec_UDP}, {Name: "query", Protocol: tetherv1.PortSpec_TCP}},
		},
		Health:                    &tetherv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3},
		SdkDisconnectGraceSeconds: 30,
		PlayerSessions:            &tetherv1.PlayerSessionPolicy{MaxPlayers: 16, ReservationTimeoutSeconds: 60, ReconnectWindowSeconds: 120},
		Scheduling:                tetherv1.Fleet_PACKED,
		Labels:                    map[string]string{"mode": "ranked", "region": "eu-west"},
	}
}

// refusedAsInvalid reports whether err is a refusal of the caller's input:
// INVALID_ARGUMENT with the field at fault.
func refusedAsInvalid(err error) bool {
	var ae *apiError
	var ve *events.ValidationError
	switch {
	case errors.As(err, &ae):
		return ae.code == codes.InvalidArgument && ae.field != ""
	case errors.As(err, &ve):
		return ve.Field != ""
	}
	return false
}

// admitFleet runs a create-fleet request through every check the API makes
// before it writes FleetCreated, and returns the spec it would write, or
// nil when the request is refused (as INVALID_ARGUMENT, or the target fails).
func admitFleet(t *testing.T, req *tetherv1.CreateFleetRequest) *eventsv1.FleetSpec {
	t.Helper()
	err := checkRequest(req)
	if err == nil {
		err = checkTemplate("fleet", req.GetFleet().GetTemplate())
	}
	var spec *eventsv1.FleetSpec
	if err == nil {
		spec = specFromAPI(req.GetFleet())
		events.NormalizeFleetSpec(spec)
		err = events.ValidateFleetSpec(spec)
	}
	if err != nil {
		if !refusedAsInvalid(err) {
			t.Fatalf("refused, but not as INVALID_ARGUMENT with a field: %v", err)
		}
		return nil
	}
	return spec
}

// checkAdmittedFleet asserts what an accepted fleet must be: within every
// limit, free of NUL bytes, with labels PostgreSQL's jsonb takes, and a
// FleetCreated event that the event store takes and gives back unchanged.
func checkAdmittedFleet(t *testing.T, req *tetherv1.CreateFleetRequest, spec *eventsv1.FleetSpec) {
	t.Helper()
	if err := noNUL(req.ProtoReflect(), ""); err != nil {
		t.Fatalf("accepted with %v", err)
	}
	if len(req.GetRequestId()) > MaxRequestIDBytes {
		t.Fatalf("accepted a request id of %d bytes", len(req.GetRequestId()))
	}
	tmpl := spec.GetTemplate()
	switch {
	case len(spec.GetLabels()) > MaxLabels:
		t.Fatalf("accepted %d labels", len(spec.GetLabels()))
	case len(tmpl.GetEnv()) > MaxEnv:
		t.Fatalf("accepted %d environment variables", len(tmpl.GetEnv()))
	case len(tmpl.GetArgs()) > MaxArgs:
		t.Fatalf("accepted %d arguments", len(tmpl.GetArgs()))
	case len(tmpl.GetCommand()) > MaxCommandBytes:
		t.Fatalf("accepted a command of %d bytes", len(tmpl.GetCommand()))
	}
	for k, v := range tmpl.GetEnv() {
		if len(k) > MaxEnvNameBytes || len(v) > MaxEnvValueBytes {
			t.Fatalf("accepted the variable %q of %d bytes", k[:min(len(k), 20)], len(v))
		}
	}
	// The defaults add a few bytes to what was checked.
	if n := proto.Size(spec); n > MaxFleetSpecBytes+256 {
		t.Fatalf("accepted a spec of %d bytes", n)
	}
	labels, err := json.Marshal(spec.GetLabels()) // as the projector writes them
	if err != nil || bytes.Contains(labels, []byte(`\u0000`)) {
		t.Fatalf("accepted labels jsonb cannot hold: %s (%v)", labels, err)
	}
	e := events.New("fleets/f", fuzzAt, &eventsv1.FleetCreated{Spec: spec})
	e.RequestID, e.CorrelationID = req.GetRequestId(), req.GetRequestId()
	b, err := e.Marshal()
	if err != nil {
		t.Fatalf("accepted a spec whose event does not encode: %v", err)
	}
	if len(b) > maxEventBytes {
		t.Fatalf("accepted a spec whose event takes %d bytes; the store takes %d", len(b), maxEventBytes)
	}
	back, err := events.Unmarshal(b)
	if err != nil || !proto.Equal(back.Data, e.Data) || back.RequestID != e.RequestID {
		t.Fatalf("the accepted spec's event does not decode to itself: %v", err)
	}
}

// noNUL returns an error naming the first string of m holding a NUL byte.
func noNUL(m protoreflect.Message, path string) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := joinPath(path, string(fd.Name()))
		check := func(v protoreflect.Value, kind protoreflect.Kind) {
			switch kind {
			case protoreflect.StringKind:
				if strings.IndexByte(v.String(), 0) >= 0 {
					err = fmt.Errorf("a NUL byte in %s", p)
				}
			case protoreflect.MessageKind:
				if e := noNUL(v.Message(), p); e != nil {
					err = e
				}
			}
		}
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				check(v.List().Get(i), fd.Kind())
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				check(k.Value(), fd.MapKey().Kind())
				check(mv, fd.MapValue().Kind())
				return err == nil
			})
		default:
			check(v, fd.Kind())
		}
		return err == nil
	})
	return err
}

// Any create-fleet request (as gRPC decodes it) is accepted or refused with
// INVALID_ARGUMENT and a field, never a panic or another error; one that is
// accepted is within every limit and makes an event the store takes.
func FuzzCreateFleetRequest(f *testing.F) {
	for _, req := range []*tetherv1.CreateFleetRequest{
		{FleetId: "arena", Fleet: seedFleet(), RequestId: "2b9c1d0e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"},
		{FleetId: "tiny", Fleet: &tetherv1.Fleet{Template: &tetherv1.GameServerTemplate{Command: "/bin/true"}}},
		{FleetId: "nul", Fleet: &tetherv1.Fleet{Template: &tetherv1.GameServerTemplate{Command: "/bin/x"}, Labels: map[string]string{"a": "b\x00"}}},
		{FleetId: "env", Fleet: &tetherv1.Fleet{Template: &tetherv1.GameServerTemplate{Command: "/bin/x", Env: map[string]string{"BIG": strings.Repeat("x", MaxEnvValueBytes+1)}}}},
		{FleetId: "args", Fleet: &tetherv1.Fleet{Template: &tetherv1.GameServerTemplate{Command: "/bin/x", Args: make([]string, MaxArgs+1)}}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req tetherv1.CreateFleetRequest
		if proto.Unmarshal(b, &req) != nil {
			return // gRPC refuses it before any handler
		}
		if spec := admitFleet(t, &req); spec != nil {
			checkAdmittedFleet(t, &req, spec)
		}
	})
}

// Any fleet body sent over REST (decoded as the gateway decodes it) is
// accepted or refused with INVALID_ARGUMENT and a field, and one that is
// accepted makes an event the store takes.
func FuzzFleetJSON(f *testing.F) {
	arena, err := protojson.Marshal(seedFleet())
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(arena),
		`{"template":{"command":"/bin/game","env":{"A":"\u0000"}},"labels":{"mode":"ranked"}}`,
		`{"replicas":2,"template":{"command":"/bin/game","ports":[{"name":"game","protocol":"TCP"}]},"labels":{"k":"v\u001b"}}`,
		`{"template":{"command":"/bin/game","args":["a","b"]},"scheduling":"DISTRIBUTED"}`,
		`{"replica":3}`,
	} {
		f.Add([]byte(s), "req-1")
	}
	// As the gateway decodes bodies (gateway.go).
	decode := protojson.UnmarshalOptions{DiscardUnknown: false}
	f.Fuzz(func(t *testing.T, body []byte, requestID string) {
		var fleet tetherv1.Fleet
		if decode.Unmarshal(body, &fleet) != nil {
			return // the gateway refuses it (INVALID_ARGUMENT)
		}
		req := &tetherv1.CreateFleetRequest{FleetId: "f", Fleet: &fleet, RequestId: requestID}
		if !validUTF8(req) {
			return // not a request the gateway can forward over gRPC
		}
		if spec := admitFleet(t, req); spec != nil {
			checkAdmittedFleet(t, req, spec)
		}
	})
}

// validUTF8 reports whether a request encodes: gRPC refuses strings that
// are not UTF-8.
func validUTF8(m proto.Message) bool {
	_, err := proto.Marshal(m)
	return err == nil
}

// Any allocation request is accepted or refused with INVALID_ARGUMENT and a
// field; one that is accepted makes a GameServerAllocated and a
// GameSessionCreated that the store takes, and selectors PostgreSQL can
// query with.
func FuzzAllocateRequest(f *testing.F) {
	for _, req := range []*tetherv1.AllocateGameServerRequest{
		{Parent: "fleets/arena", RequestId: "match-1", Selector: &tetherv1.LabelSelector{MatchLabels: map[string]string{"mode": "ranked"}},
			GameSession: &tetherv1.GameSessionRequest{Properties: map[string]string{"map": "dust", "mode": "ranked"}, MaxPlayers: 10},
			Players:     []*tetherv1.PlayerRequest{{PlayerId: "alice", PlayerData: `{"elo":1500}`}, {PlayerId: "bob"}}},
		{Parent: "fleets/-", Selectors: []*tetherv1.LabelSelector{{MatchLabels: map[string]string{"region": "eu"}}, {}}, Scheduling: "DISTRIBUTED"},
		{Parent: "fleets/arena", Selector: &tetherv1.LabelSelector{MatchLabels: map[string]string{"mode": "\x00"}}},
		{Parent: "fleets/arena", Players: []*tetherv1.PlayerRequest{{PlayerId: "p", PlayerData: strings.Repeat("d", MaxPlayerDataBytes+1)}}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req tetherv1.AllocateGameServerRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		if err := checkRequest(&req); err != nil {
			if !refusedAsInvalid(err) {
				t.Fatalf("refused, but not as INVALID_ARGUMENT with a field: %v", err)
			}
			return
		}
		if len(req.GetPlayers()) > maxAllocPlayers {
			return // refused by the handler (allocate.go)
		}
		if err := noNUL(req.ProtoReflect(), ""); err != nil {
			t.Fatalf("accepted with %v", err)
		}
		sels := append([]*tetherv1.LabelSelector{req.GetSelector()}, req.GetSelectors()...)
		if len(req.GetSelectors()) > MaxSelectors {
			t.Fatalf("accepted %d selectors", len(req.GetSelectors()))
		}
		for _, sel := range sels {
			if len(sel.GetMatchLabels()) > MaxLabels {
				t.Fatalf("accepted a selector of %d labels", len(sel.GetMatchLabels()))
			}
			if q, err := json.Marshal(sel.GetMatchLabels()); err != nil || bytes.Contains(q, []byte(`\u0000`)) {
				t.Fatalf("accepted a selector jsonb cannot hold: %s", q)
			}
		}
		// The events an allocation writes (allocate.go's try).
		alloc := &eventsv1.GameServerAllocated{GameSession: events.GameSessionName(events.NewID("gsess")),
			Properties: req.GetGameSession().GetProperties(), MaxPlayers: req.GetGameSession().GetMaxPlayers()}
		for i, p := range req.GetPlayers() {
			if len(p.GetPlayerId()) > MaxPlayerIDBytes || len(p.GetPlayerData()) > MaxPlayerDataBytes {
				t.Fatalf("accepted player %d of %d + %d bytes", i, len(p.GetPlayerId()), len(p.GetPlayerData()))
			}
			alloc.Players = append(alloc.Players, &eventsv1.PlayerReservation{
				PlayerSession: events.NewID("ps"), PlayerId: p.GetPlayerId(), PlayerData: p.GetPlayerData(), Slot: int32(i)})
		}
		gs := events.GameServerName("arena", "gs-1")
		created := events.SessionCreated(gs, "hosts/h1", alloc, &eventsv1.PlayerSessionPolicy{ReservationTimeoutSeconds: 60}, fuzzAt, req.GetRequestId())
		for _, data := range []proto.Message{alloc, created} {
			e := events.New(gs, fuzzAt, data)
			e.RequestID, e.CorrelationID = req.GetRequestId(), req.GetRequestId()
			b, err := e.Marshal()
			if err != nil || len(b) > maxEventBytes {
				t.Fatalf("an accepted allocation's %s takes %d bytes (%v); the store takes %d", e.Type, len(b), err, maxEventBytes)
			}
		}
	})
}
