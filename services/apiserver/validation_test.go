package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/platform/apikeys"
)

// withField returns a copy of arenaFleet(1) with one change made by set.
func withField(set func(f map[string]any)) map[string]any {
	f := arenaFleet(1)
	set(f)
	return f
}

// template returns the template map of a fleet body from arenaFleet.
func template(f map[string]any) map[string]any { return f["template"].(map[string]any) }

// Over REST, input the API cannot map onto its messages is refused with
// INVALID_ARGUMENT and a field violation, and nothing is stored: unknown
// fields (the typo "replica" made a fleet of 0 replicas), unknown enum
// names ("BOGUS" became PACKED, "SCTP" became UDP), undeclared enum
// numbers (scheduling 99, protocol 42), unknown query parameters, and
// selector fields the allocator does not support (matchExpressions).
func TestRESTRefusesInputItCannotMap(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 1, 1, map[string]string{"mode": "ranked"})

	tests := []struct {
		name, method, path string
		body               any
		field              string
		absent             string // a fleet that must not exist afterwards
	}{
		{"typo replica", "POST", "/v1/fleets?fleetId=f1", withField(func(f map[string]any) { delete(f, "replicas"); f["replica"] = 3 }),
			"fleet.replica", "f1"},
		{"unknown nested field", "POST", "/v1/fleets?fleetId=f2", withField(func(f map[string]any) { template(f)["comand"] = "/bin/x" }),
			"fleet.template.comand", "f2"},
		{"unknown scheduling name", "POST", "/v1/fleets?fleetId=f3", withField(func(f map[string]any) { f["scheduling"] = "BOGUS" }),
			"fleet.scheduling", "f3"},
		{"unknown protocol name", "POST", "/v1/fleets?fleetId=f4", withField(func(f map[string]any) {
			template(f)["ports"] = []any{map[string]any{"name": "game", "protocol": "SCTP"}}
		}), "fleet.template.ports[0].protocol", "f4"},
		{"undeclared scheduling number", "POST", "/v1/fleets?fleetId=f5", withField(func(f map[string]any) { f["scheduling"] = 99 }),
			"fleet.scheduling", "f5"},
		{"undeclared protocol number", "POST", "/v1/fleets?fleetId=f6", withField(func(f map[string]any) {
			template(f)["ports"] = []any{map[string]any{"name": "game", "protocol": 42}}
		}), "fleet.template.ports[0].protocol", "f6"},
		{"replicas not a number", "POST", "/v1/fleets?fleetId=f8", withField(func(f map[string]any) { f["replicas"] = "three" }),
			"fleet.replicas", "f8"},
		{"replicas over int32", "POST", "/v1/fleets?fleetId=f9", withField(func(f map[string]any) { f["replicas"] = 3_000_000_000 }),
			"fleet.replicas", "f9"},
		{"args not a list", "POST", "/v1/fleets?fleetId=f10", withField(func(f map[string]any) { template(f)["args"] = "--port" }),
			"fleet.template.args", "f10"},
		{"replicas with an exponent", "POST", "/v1/fleets?fleetId=f12", withField(func(f map[string]any) { f["replicas"] = "1e3" }),
			"fleet.replicas", "f12"},
		{"replicas as a number with an exponent", "POST", "/v1/fleets?fleetId=f13", withField(func(f map[string]any) { f["replicas"] = json.Number("1e1") }),
			"fleet.replicas", "f13"},
		{"replicas with a fraction", "POST", "/v1/fleets?fleetId=f14", withField(func(f map[string]any) { f["replicas"] = json.Number("2.0") }),
			"fleet.replicas", "f14"},
		{"a nested integer with an exponent", "POST", "/v1/fleets?fleetId=f15", withField(func(f map[string]any) {
			f["health"] = map[string]any{"periodSeconds": "5e0"}
		}), "fleet.health.period_seconds", "f15"},
		{"a patch's integer with an exponent", "PATCH", "/v1/fleets/arena?updateMask=replicas", map[string]any{"replicas": "2E0"}, "fleet.replicas", ""},
		{"unknown query parameter", "POST", "/v1/fleets?fleetID=f7", arenaFleet(1), "fleetID", ""},
		{"query parameter the body carries", "POST", "/v1/fleets?fleetId=f11&fleet.replicas=5", arenaFleet(1), "fleet.replicas", "f11"},
		{"query parameter with a body of everything", "POST", "/v1/fleets/arena/gameServers:allocate?requestId=r1", map[string]any{}, "requestId", ""},
		{"query parameter of the wrong type", "GET", "/v1/fleets?pageSize=ten", nil, "pageSize", ""},
		{"negative min_sequence", "GET", "/v1/fleets/arena?minSequence=-1", nil, "min_sequence", ""},
		{"negative min_sequence of a player session", "GET", "/v1/gameSessions/g/playerSessions/p?minSequence=-5", nil, "min_sequence", ""},
		{"unknown field in a patch", "PATCH", "/v1/fleets/arena", map[string]any{"replica": 2}, "fleet.replica", ""},
		{"undeclared enum in a patch", "PATCH", "/v1/fleets/arena?updateMask=scheduling", map[string]any{"scheduling": 7}, "fleet.scheduling", ""},
		{"matchExpressions", "POST", "/v1/fleets/arena/gameServers:allocate", map[string]any{"selector": map[string]any{
			"matchExpressions": []any{map[string]any{"key": "mode", "operator": "In", "values": []string{"casual"}}}}},
			"selector.matchExpressions", ""},
		{"unknown allocation field", "POST", "/v1/fleets/arena/gameServers:allocate", map[string]any{"player": []any{}}, "player", ""},
		{"undeclared enum in a player session", "POST", "/v1/gameSessions/gsess-x/playerSessions", map[string]any{"playerId": "p", "state": 99},
			"player_session.state", ""},
		{"unknown field of a shutdown", "POST", "/v1/fleets/arena/gameServers/gs-000:shutdown", map[string]any{"graceSecond": 5},
			"graceSecond", ""},
		{"standalone server with an unknown field", "POST", "/v1/fleets/standalone/gameServers?gameServerId=s1",
			withField(func(f map[string]any) { f["replica"] = 1 }), "spec.replica", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, tt.path, tt.body)
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tt.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %v", r.status, r.reason(), r.fieldViolation(), tt.field, r.body)
			}
			if tt.absent != "" {
				if g := s.do("GET", "/v1/fleets/"+tt.absent, nil); g.status != http.StatusNotFound {
					t.Fatalf("a refused create stored fleets/%s: %d %v", tt.absent, g.status, g.body)
				}
			}
		})
	}
	// Anything after the body's JSON value: protojson's decoder read the
	// first value and ignored the rest.
	body, err := json.Marshal(arenaFleet(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		body       []byte
		after      string
		field      string
	}{
		{"garbage after a fleet", "/v1/fleets?fleetId=t1", body, "x", "fleet"},
		{"a second object", "/v1/fleets?fleetId=t2", body, ` {"replicas":5}`, "fleet"},
		{"a number after an allocation", "/v1/fleets/arena/gameServers:allocate", []byte(`{"requestId":"trailing"}`), "\n5", "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.doRaw(s.base, "", "POST", tc.path, append(slices.Clone(tc.body), tc.after...))
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tc.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %v", r.status, r.reason(), r.fieldViolation(), tc.field, r.body)
			}
		})
	}
	if g := s.do("GET", "/v1/fleets/t1", nil); g.status != http.StatusNotFound {
		t.Fatalf("a body with garbage after it stored fleets/t1: %d %v", g.status, g.body)
	}
	// White space after the body is no more than white space.
	if r := s.doRaw(s.base, "", "POST", "/v1/fleets?fleetId=t3", append(slices.Clone(body), " \r\n\t"...)); r.status != http.StatusOK {
		t.Fatalf("white space after the body: %d %v", r.status, r.body)
	}
	// The server offered is still READY: the refused allocations took nothing.
	if n := len(s.allocations("arena")); n != 0 {
		t.Fatalf("refused allocations allocated %d servers", n)
	}
}

// grpcClient dials the stack's first replica.
func (s *stack) grpcClient() *grpc.ClientConn {
	s.t.Helper()
	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return conn
}

// wantViolation checks a gRPC error: INVALID_ARGUMENT, the reason, and a
// BadRequest violation of field.
func wantViolation(t *testing.T, err error, reason, field string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		t.Fatalf("got %v, want INVALID_ARGUMENT", err)
	}
	var gotReason, gotField string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			gotReason = d.GetReason()
		case *errdetails.BadRequest:
			if len(d.GetFieldViolations()) > 0 {
				gotField = d.GetFieldViolations()[0].GetField()
			}
		}
	}
	if gotReason != reason || gotField != field {
		t.Fatalf("reason %q field %q, want %q %q: %v", gotReason, gotField, reason, field, err)
	}
}

// Over gRPC, undeclared enum numbers and fields this server does not know
// (a client built from a newer API, e.g. a selector with match
// expressions) are refused, not dropped.
func TestGRPCRefusesUnknownFieldsAndEnumNumbers(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 1, 1, nil)
	conn := s.grpcClient()
	fleets, alloc := tetherv1.NewFleetServiceClient(conn), tetherv1.NewAllocationServiceClient(conn)
	ctx, cancel := context.WithTimeout(s.Ctx, 30*time.Second)
	defer cancel()
	spec := func() *tetherv1.Fleet {
		return &tetherv1.Fleet{Replicas: 1, Template: &tetherv1.GameServerTemplate{Command: "/bin/true",
			Ports: []*tetherv1.PortSpec{{Name: "game", Protocol: tetherv1.PortSpec_UDP}}}}
	}

	bad := spec()
	bad.Scheduling = 99
	_, err := fleets.CreateFleet(ctx, &tetherv1.CreateFleetRequest{FleetId: "g1", Fleet: bad})
	wantViolation(t, err, "INVALID_ARGUMENT", "fleet.scheduling")

	bad = spec()
	bad.Template.Ports[0].Protocol = 42
	_, err = fleets.CreateFleet(ctx, &tetherv1.CreateFleetRequest{FleetId: "g2", Fleet: bad})
	wantViolation(t, err, "INVALID_ARGUMENT", "fleet.template.ports[0].protocol")

	// A LabelSelector field this server does not know, as a newer client
	// would send match expressions.
	sel := &tetherv1.LabelSelector{}
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	sel.ProtoReflect().SetUnknown(protowire.AppendBytes(unknown, []byte("mode In (casual)")))
	_, err = alloc.AllocateGameServer(ctx, &tetherv1.AllocateGameServerRequest{Parent: "fleets/arena", Selector: sel})
	wantViolation(t, err, "INVALID_ARGUMENT", "selector")

	for _, id := range []string{"g1", "g2"} {
		if _, err := fleets.GetFleet(ctx, &tetherv1.GetFleetRequest{Name: "fleets/" + id}); status.Code(err) != codes.NotFound {
			t.Fatalf("a refused create stored fleets/%s: %v", id, err)
		}
	}
	if n := len(s.allocations("arena")); n != 0 {
		t.Fatalf("a refused allocation allocated %d servers", n)
	}
}

// rawCodec sends and receives messages as the bytes they are, to send a
// server what no proto library would encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// A gRPC request that does not decode is the caller's error, refused with
// INVALID_ARGUMENT naming the request's message (grpc answered INTERNAL:
// issue 39, item 5), after the caller's permission: a role that may not
// call the method gets PERMISSION_DENIED whatever it sent.
func TestGRPCRefusesMessagesThatDoNotDecode(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys, key: key[apikeys.Admin]})
	conn := s.grpcClient()
	as := func(role apikeys.Role) context.Context {
		ctx, cancel := context.WithTimeout(s.Ctx, 10*time.Second)
		t.Cleanup(cancel)
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key[role])
	}
	fleetID := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "g1") // CreateFleetRequest.fleet_id
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"a length past the end", append(protowire.AppendTag(nil, 1, protowire.BytesType), 50, 'g')},
		{"a wire type no field has", append(slices.Clone(fleetID), protowire.AppendTag(nil, 2, 7)...)},
		{"a string that is not UTF-8", protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "g\xff\xfe")},
		{"a varint that never ends", append(protowire.AppendTag(nil, 3, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out []byte
			err := conn.Invoke(as(apikeys.Admin), "/tether.v1.FleetService/CreateFleet", tc.body, &out, grpc.ForceCodecV2(rawCodec{}))
			wantViolation(t, err, "INVALID_ARGUMENT", "tether.v1.CreateFleetRequest")
			err = conn.Invoke(as(apikeys.Viewer), "/tether.v1.FleetService/CreateFleet", tc.body, &out, grpc.ForceCodecV2(rawCodec{}))
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("a viewer's: %v, want PERMISSION_DENIED", err)
			}
		})
	}
	// A stream's request too.
	desc := &grpc.StreamDesc{ServerStreams: true}
	stream, err := conn.NewStream(as(apikeys.Admin), desc, "/tether.v1.HistoryService/WatchEvents", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(append(protowire.AppendTag(nil, 1, protowire.BytesType), 9)); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var out []byte
	wantViolation(t, stream.RecvMsg(&out), "INVALID_ARGUMENT", "tether.v1.WatchEventsRequest")
	fleets := tetherv1.NewFleetServiceClient(conn)
	if _, err := fleets.GetFleet(as(apikeys.Admin), &tetherv1.GetFleetRequest{Name: "fleets/g1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused create stored fleets/g1: %v", err)
	}
}

// A request id reused with another content is refused with
// REQUEST_ID_REUSED; the same content is still answered as a retry, and an
// event stored before fingerprints existed still counts as the same
// request.
func TestRequestIDReusedWithAnotherContent(t *testing.T) {
	s := newStack(t, stackOptions{})
	first := s.do("POST", "/v1/fleets?fleetId=arena&requestId=req-1", arenaFleet(2))
	if first.status != http.StatusOK {
		t.Fatalf("create: %d %v", first.status, first.body)
	}
	if r := s.do("POST", "/v1/fleets?fleetId=arena&requestId=req-1", arenaFleet(2)); r.status != http.StatusOK || r.str("sequence") != first.str("sequence") {
		t.Fatalf("exact retry: %d %v", r.status, r.body)
	}
	for _, tc := range []struct {
		name, method, path string
		body               any
	}{
		{"create with another body", "POST", "/v1/fleets?fleetId=arena&requestId=req-1", arenaFleet(5)},
		{"create with another label", "POST", "/v1/fleets?fleetId=arena&requestId=req-1", withField(func(f map[string]any) {
			f["replicas"] = 2
			f["labels"] = map[string]string{"mode": "casual"}
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(tc.method, tc.path, tc.body)
			if r.status != http.StatusBadRequest || r.reason() != "REQUEST_ID_REUSED" || r.fieldViolation() != "request_id" {
				t.Fatalf("got %d %q field %q, want 400 REQUEST_ID_REUSED on request_id: %v", r.status, r.reason(), r.fieldViolation(), r.body)
			}
		})
	}

	// Updates: the same id with another replica count.
	up := s.do("PATCH", "/v1/fleets/arena?updateMask=replicas&requestId=up-1", map[string]any{"replicas": 3})
	if up.status != http.StatusOK {
		t.Fatalf("update: %d %v", up.status, up.body)
	}
	if r := s.do("PATCH", "/v1/fleets/arena?updateMask=replicas&requestId=up-1", map[string]any{"replicas": 4}); r.reason() != "REQUEST_ID_REUSED" {
		t.Fatalf("update reusing its request id: %d %v", r.status, r.body)
	}
	if r := s.do("GET", "/v1/fleets/arena?minSequence="+up.str("sequence"), nil); r.num("replicas") != 3 {
		t.Fatalf("replicas = %v after a refused update, want 3", r.body["replicas"])
	}

	// A fleet created before fingerprints: its request id still replays.
	env := events.New("fleets/old", time.Now(), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{
		Template: &eventsv1.GameServerTemplate{Command: "/bin/true"}, Health: &eventsv1.HealthPolicy{PeriodSeconds: 5},
	}})
	env.RequestID = "old-1"
	seq, err := s.Store.Append(s.Ctx, events.MustSubject("fleets/old"), 0, env)
	if err != nil {
		t.Fatal(err)
	}
	s.waitApplied(seq)
	if r := s.do("POST", "/v1/fleets?fleetId=old&requestId=old-1", arenaFleet(7)); r.status != http.StatusOK || r.str("name") != "fleets/old" {
		t.Fatalf("retry of a request stored without a fingerprint: %d %v", r.status, r.body)
	}
}

// An allocation's request id reused with other players or selectors is
// refused, on the replica that stored it and on another one; the exact
// retry still gets the first result.
func TestAllocationRequestIDReused(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 2})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 3, 1, map[string]string{"mode": "ranked"})
	const path = "/v1/fleets/arena/gameServers:allocate"
	body := map[string]any{"requestId": "match-1", "players": []any{map[string]any{"playerId": "p1"}}}
	first := s.doAt(s.bases[0], http.MethodPost, path, body)
	if first.status != http.StatusOK {
		t.Fatalf("allocate: %d %v", first.status, first.body)
	}
	for i, base := range s.bases {
		if r := s.doAt(base, http.MethodPost, path, body); r.status != http.StatusOK {
			t.Fatalf("exact retry on replica %d: %d %v", i, r.status, r.body)
		}
		other := map[string]any{"requestId": "match-1", "players": []any{map[string]any{"playerId": "p2"}}}
		if r := s.doAt(base, http.MethodPost, path, other); r.status != http.StatusBadRequest || r.reason() != "REQUEST_ID_REUSED" {
			t.Fatalf("other players on replica %d: %d %v", i, r.status, r.body)
		}
		sel := map[string]any{"requestId": "match-1", "players": body["players"],
			"selector": map[string]any{"matchLabels": map[string]string{"mode": "casual"}}}
		if r := s.doAt(base, http.MethodPost, path, sel); r.status != http.StatusBadRequest || r.reason() != "REQUEST_ID_REUSED" {
			t.Fatalf("another selector on replica %d: %d %v", i, r.status, r.body)
		}
	}
	if n := len(s.allocations("arena")); n != 1 {
		t.Fatalf("%d servers allocated, want 1", n)
	}

	// :reconnect ids are scoped to the game session: the id of one seat's
	// reconnect, reused for another seat, was answered with the first
	// seat's endpoint and token.
	two := s.do(http.MethodPost, path, map[string]any{"players": []any{map[string]any{"playerId": "a"}, map[string]any{"playerId": "b"}}})
	if two.status != http.StatusOK {
		t.Fatalf("allocate two seats: %d %v", two.status, two.body)
	}
	seats := two.body["playerSessions"].([]any)
	seatA, seatB := seats[0].(map[string]any)["name"].(string), seats[1].(map[string]any)["name"].(string)
	if r := s.do(http.MethodPost, "/v1/"+seatA+":reconnect", map[string]any{"requestId": "rc-1"}); r.status != http.StatusOK {
		t.Fatalf("reconnect %s: %d %v", seatA, r.status, r.body)
	}
	if r := s.do(http.MethodPost, "/v1/"+seatA+":reconnect", map[string]any{"requestId": "rc-1"}); r.status != http.StatusOK {
		t.Fatalf("retried reconnect %s: %d %v", seatA, r.status, r.body)
	}
	if r := s.do(http.MethodPost, "/v1/"+seatB+":reconnect", map[string]any{"requestId": "rc-1"}); r.status != http.StatusBadRequest || r.reason() != "REQUEST_ID_REUSED" {
		t.Fatalf("reconnect %s with the id of %s's: %d %v", seatB, seatA, r.status, r.body)
	}
}

// A template that can never start is refused when the fleet (or a
// standalone server) is created or its template updated, instead of
// looping on failed starts.
func TestTemplateThatCanNeverRunIsRefused(t *testing.T) {
	// Templates this large reach the API over gRPC (4 MiB messages); the
	// REST body limit is raised here so the same validation is tested
	// through REST.
	s := newStack(t, stackOptions{maxBody: 8 << 20})
	s.createFleet("arena", fleetWithoutReplicas())
	big := strings.Repeat("x", 128<<10) // one byte over MAX_ARG_STRLEN with its NUL
	chunk := strings.Repeat("y", 100<<10)
	manyArgs := make([]string, 21) // 2.1 MB of arguments
	manyEnv := map[string]string{}
	for i := range manyArgs {
		manyArgs[i] = chunk
		manyEnv["V"+strings.Repeat("A", i+1)] = chunk
	}
	storeEnv := map[string]string{}
	for i := range 10 { // 1.2 MB: under ARG_MAX, over what one event can hold
		storeEnv["V"+strings.Repeat("A", i+1)] = strings.Repeat("z", 120<<10)
	}
	ports := make([]any, 65536)
	for i := range ports {
		ports[i] = map[string]any{"name": "p"}
	}
	tests := []struct {
		name, method, path string
		body               any
		field              string
	}{
		{"argument over MAX_ARG_STRLEN", "POST", "/v1/fleets?fleetId=t1",
			withField(func(f map[string]any) { template(f)["args"] = []string{"--map", big} }), "fleet.template.args[1]"},
		{"environment string over MAX_ARG_STRLEN", "POST", "/v1/fleets?fleetId=t2",
			withField(func(f map[string]any) { template(f)["env"] = map[string]string{"BIG": big} }), "fleet.template.env[BIG]"},
		{"arguments over ARG_MAX", "POST", "/v1/fleets?fleetId=t3",
			withField(func(f map[string]any) { template(f)["args"] = manyArgs }), "fleet.template.args"},
		{"environment over ARG_MAX", "POST", "/v1/fleets?fleetId=t4",
			withField(func(f map[string]any) { template(f)["env"] = manyEnv }), "fleet.template.env"},
		{"environment over the event store's limit", "POST", "/v1/fleets?fleetId=t8",
			withField(func(f map[string]any) { template(f)["env"] = storeEnv }), "fleet.template.env"},
		{"player data over the event store's limit", "POST", "/v1/fleets/arena/gameServers:allocate",
			map[string]any{"players": []any{map[string]any{"playerId": "p1", "playerData": strings.Repeat("d", 1<<20)}}}, "players"},
		{"NUL in the command", "POST", "/v1/fleets?fleetId=t5",
			withField(func(f map[string]any) { template(f)["command"] = "/bin/game\x00--x" }), "fleet.template.command"},
		{"more ports than a host can have", "POST", "/v1/fleets?fleetId=t6",
			withField(func(f map[string]any) { template(f)["ports"] = ports }), "fleet.template.ports"},
		{"update to an environment over ARG_MAX", "PATCH", "/v1/fleets/arena?updateMask=template",
			map[string]any{"template": map[string]any{"command": "/bin/game", "env": manyEnv}}, "fleet.template.env"},
		{"standalone server", "POST", "/v1/fleets/standalone/gameServers?gameServerId=s1",
			withField(func(f map[string]any) { template(f)["args"] = []string{big} }), "spec.template.args[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, tt.path, tt.body)
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tt.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %.300v", r.status, r.reason(), r.fieldViolation(), tt.field, r.body)
			}
		})
	}
	// Just under the limits is accepted.
	ok := withField(func(f map[string]any) { template(f)["args"] = []string{big[1:]} })
	if r := s.do("POST", "/v1/fleets?fleetId=t7", ok); r.status != http.StatusOK {
		t.Fatalf("an argument of MAX_ARG_STRLEN-1 bytes: %d %.300v", r.status, r.body)
	}
}

// A template may not set the agent's variables, nor name the SDK token in
// its arguments (issue 39, item 4): its TETHER_GAMESERVER_TOKEN replaced the
// token the agent hands over, and ${TETHER_GAMESERVER_TOKEN} in an argument
// put the token in ps. Each write of a template refuses it, naming the
// field, and stores nothing; the example game server's own settings
// (TETHER_EXAMPLE_*) still pass.
func TestTemplateCannotSetTheAgentsVariables(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	env := func(k string) func(f map[string]any) {
		return func(f map[string]any) { template(f)["env"] = map[string]string{"MODE": "ranked", k: "x"} }
	}
	args := func(a ...string) func(f map[string]any) {
		return func(f map[string]any) { template(f)["args"] = a }
	}
	tests := []struct {
		name, method, path string
		body               any
		field              string
	}{
		{"the token", "POST", "/v1/fleets?fleetId=v1", withField(env("TETHER_GAMESERVER_TOKEN")), "fleet.template.env[TETHER_GAMESERVER_TOKEN]"},
		{"the token's descriptor", "POST", "/v1/fleets?fleetId=v2", withField(env("TETHER_GAMESERVER_TOKEN_FD")), "fleet.template.env[TETHER_GAMESERVER_TOKEN_FD]"},
		{"the server's name", "POST", "/v1/fleets?fleetId=v3", withField(env("TETHER_GAMESERVER")), "fleet.template.env[TETHER_GAMESERVER]"},
		{"the SDK's address", "POST", "/v1/fleets?fleetId=v4", withField(env("TETHER_SDK_ADDR")), "fleet.template.env[TETHER_SDK_ADDR]"},
		{"a port", "POST", "/v1/fleets?fleetId=v5", withField(env("TETHER_PORT_GAME")), "fleet.template.env[TETHER_PORT_GAME]"},
		{"Agones' SDK port", "POST", "/v1/fleets?fleetId=v9", withField(env("AGONES_SDK_GRPC_PORT")), "fleet.template.env[AGONES_SDK_GRPC_PORT]"},
		{"an argument with the token", "POST", "/v1/fleets?fleetId=v6", withField(args("--port", "${TETHER_PORT_GAME}", "--token=${TETHER_GAMESERVER_TOKEN}")), "fleet.template.args[2]"},
		{"an argument with the token, no braces", "POST", "/v1/fleets?fleetId=v7", withField(args("$TETHER_GAMESERVER_TOKEN")), "fleet.template.args[0]"},
		{"an update", "PATCH", "/v1/fleets/arena?updateMask=template", map[string]any{"template": map[string]any{"command": "/bin/game", "env": map[string]string{"TETHER_GAMESERVER_TOKEN": "x"}}},
			"fleet.template.env[TETHER_GAMESERVER_TOKEN]"},
		{"an update of the arguments", "PATCH", "/v1/fleets/arena?updateMask=template", withField(args("${TETHER_GAMESERVER_TOKEN}")), "fleet.template.args[0]"},
		{"a standalone server", "POST", "/v1/fleets/standalone/gameServers?gameServerId=s1", withField(env("TETHER_GAMESERVER_TOKEN")), "spec.template.env[TETHER_GAMESERVER_TOKEN]"},
		{"a standalone server's arguments", "POST", "/v1/fleets/standalone/gameServers?gameServerId=s2", withField(args("${TETHER_GAMESERVER_TOKEN}")), "spec.template.args[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, tt.path, tt.body)
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tt.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %v", r.status, r.reason(), r.fieldViolation(), tt.field, r.body)
			}
		})
	}
	for _, id := range []string{"v1", "v6"} {
		if g := s.do("GET", "/v1/fleets/"+id, nil); g.status != http.StatusNotFound {
			t.Fatalf("a refused create stored fleets/%s: %d %v", id, g.status, g.body)
		}
	}
	if r := s.do("GET", "/v1/fleets/arena", nil); r.status != http.StatusOK || strings.Contains(fmt.Sprint(r.body), "TETHER_GAMESERVER_TOKEN") {
		t.Fatalf("a refused update changed the fleet: %d %v", r.status, r.body)
	}
	ok := withField(func(f map[string]any) {
		template(f)["env"] = map[string]string{"TETHER_EXAMPLE_LISTEN_HOST": "127.0.0.1"}
		template(f)["args"] = []string{"--port=${TETHER_PORT_GAME}", "--token-fd=${TETHER_GAMESERVER_TOKEN_FD}"}
	})
	if r := s.do("POST", "/v1/fleets?fleetId=v8", ok); r.status != http.StatusOK {
		t.Fatalf("the example's own variable and the agent's other variables in arguments: %d %v", r.status, r.body)
	}
}

// The health period, the SDK disconnect grace and the reservation timeout
// are at most a day (issue 39, item 5: 1e9 seconds was stored), on every
// write of a spec, named by the request's field.
func TestPeriodsAndTimeoutsOverADayAreRefused(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	const huge, day = 1_000_000_000, 86_400
	period := func(v int) func(f map[string]any) {
		return func(f map[string]any) { f["health"] = map[string]any{"periodSeconds": v} }
	}
	grace := func(v int) func(f map[string]any) {
		return func(f map[string]any) { f["sdkDisconnectGraceSeconds"] = v }
	}
	reservation := func(v int) func(f map[string]any) {
		return func(f map[string]any) { f["playerSessions"] = map[string]any{"reservationTimeoutSeconds": v} }
	}
	tests := []struct {
		name, method, path string
		body               any
		field              string // "" when taken
	}{
		{"a period", "POST", "/v1/fleets?fleetId=p1", withField(period(huge)), "fleet.health.period_seconds"},
		{"a grace", "POST", "/v1/fleets?fleetId=p2", withField(grace(huge)), "fleet.sdk_disconnect_grace_seconds"},
		{"a reservation timeout", "POST", "/v1/fleets?fleetId=p3", withField(reservation(huge)), "fleet.player_sessions.reservation_timeout_seconds"},
		{"an update of the period", "PATCH", "/v1/fleets/arena?updateMask=health.periodSeconds", map[string]any{"health": map[string]any{"periodSeconds": huge}},
			"fleet.health.period_seconds"},
		{"a standalone server's grace", "POST", "/v1/fleets/standalone/gameServers?gameServerId=s1", withField(grace(huge)), "spec.sdk_disconnect_grace_seconds"},
		{"a day of each", "POST", "/v1/fleets?fleetId=p4", withField(func(f map[string]any) {
			period(day)(f)
			grace(day)(f)
			f["playerSessions"] = map[string]any{"maxPlayers": 4, "reservationTimeoutSeconds": day}
		}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, tt.path, tt.body)
			if tt.field == "" {
				if r.status != http.StatusOK {
					t.Fatalf("refused: %d %v", r.status, r.body)
				}
				return
			}
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tt.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %v", r.status, r.reason(), r.fieldViolation(), tt.field, r.body)
			}
		})
	}
}

// A template asking for more game ports than any registered host's agent
// hands out can never start anywhere: it is refused when the fleet (or a
// standalone server) is created or its template updated. Before any host
// has reported its range, nothing is known and such a template passes.
func TestTemplateWithMorePortsThanAnyHostIsRefused(t *testing.T) {
	s := newStack(t, stackOptions{})
	withPorts := func(n int) map[string]any {
		return withField(func(f map[string]any) {
			ports := make([]any, n)
			for i := range ports {
				ports[i] = map[string]any{"name": fmt.Sprintf("p%d", i)}
			}
			template(f)["ports"] = ports
		})
	}
	if r := s.do("POST", "/v1/fleets?fleetId=early", withPorts(5)); r.status != http.StatusOK {
		t.Fatalf("5 ports with no host registered: %d %v", r.status, r.body)
	}

	s.appendAs(events.HostName("small"), "hosts/small", &eventsv1.HostRegistered{Capacity: 10, GamePorts: 2})
	s.waitApplied(s.appendAs(events.HostName("large"), "hosts/large", &eventsv1.HostRegistered{Capacity: 10, GamePorts: 4}))

	for _, tt := range []struct {
		name, method, path string
		body               any
		field              string
	}{
		{"create", "POST", "/v1/fleets?fleetId=wide", withPorts(5), "fleet.template.ports"},
		{"template update", "PATCH", "/v1/fleets/early?updateMask=template", map[string]any{"template": template(withPorts(5))}, "fleet.template.ports"},
		{"standalone server", "POST", "/v1/fleets/standalone/gameServers?gameServerId=wide", withPorts(5), "spec.template.ports"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, tt.path, tt.body)
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tt.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %v", r.status, r.reason(), r.fieldViolation(), tt.field, r.body)
			}
			if !strings.Contains(fmt.Sprint(r.body), "no host hands out more than 4") {
				t.Fatalf("the refusal does not say what the hosts offer: %v", r.body)
			}
		})
	}
	if r := s.do("POST", "/v1/fleets?fleetId=fits", withPorts(4)); r.status != http.StatusOK {
		t.Fatalf("4 ports with a host of 4: %d %v", r.status, r.body)
	}
}
