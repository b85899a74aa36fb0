package agoneswire

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	gwruntime "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
	agonessdkalpha "github.com/tetherhq/tether/proto/agones/dev/sdk/alpha"
	agonessdkbeta "github.com/tetherhq/tether/proto/agones/dev/sdk/beta"
	agonesallocation "github.com/tetherhq/tether/proto/allocation"
)

// agonesJSON is the JSON of Agones' SDK server and allocator, which both
// build their gateway the same way: proto field names ("object_meta"),
// every field written out, set or not, and unknown input fields ignored.
// protojson writes int64 as strings by itself.
var agonesJSON = &gwruntime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
}

// call is one RPC the gRPC server was given: its full method name and
// request.
type call struct {
	method string
	req    proto.Message
}

// answerer stands in for the SDK server and the allocator, which these
// contracts come before (issues 41 and 42): interceptors in front of the
// generated registrations record each call and give the answer a test
// case set, so that what is tested is the contract and the generated code
// between a REST client and gRPC.
type answerer struct {
	mu     sync.Mutex
	calls  []call
	answer proto.Message           // the next unary call's answer
	err    error                   // or its error
	watch  []*agonessdk.GameServer // what WatchGameServer sends
}

func (a *answerer) record(method string, req proto.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, call{method, req})
}

// expect sets the next answer and forgets the calls so far.
func (a *answerer) expect(answer proto.Message, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls, a.answer, a.err = nil, answer, err
}

func (a *answerer) recorded() []call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]call(nil), a.calls...)
}

func (a *answerer) unary(_ context.Context, req any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	a.record(info.FullMethod, req.(proto.Message))
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.answer, a.err
}

func (a *answerer) stream(_ any, ss grpc.ServerStream, info *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
	switch info.FullMethod {
	case agonessdk.SDK_Health_FullMethodName:
		for {
			ping := new(agonessdk.Empty)
			err := ss.RecvMsg(ping)
			if errors.Is(err, io.EOF) {
				return ss.SendMsg(new(agonessdk.Empty))
			}
			if err != nil {
				return err
			}
			a.record(info.FullMethod, ping)
		}
	case agonessdk.SDK_WatchGameServer_FullMethodName:
		req := new(agonessdk.Empty)
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		a.record(info.FullMethod, req)
		a.mu.Lock()
		watch := a.watch
		a.mu.Unlock()
		for _, gs := range watch {
			if err := ss.SendMsg(gs); err != nil {
				return err
			}
		}
		return nil
	}
	return status.Errorf(codes.Unimplemented, "%s is not a stream of these contracts", info.FullMethod)
}

// startGateway serves the four services on a loopback gRPC server behind
// answerer, and returns a grpc-gateway mux with Agones' JSON in front of
// it, registered with the generated gateway code.
func startGateway(t *testing.T, a *answerer) http.Handler {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(a.unary), grpc.StreamInterceptor(a.stream))
	agonessdk.RegisterSDKServer(srv, agonessdk.UnimplementedSDKServer{})
	agonessdkalpha.RegisterSDKServer(srv, agonessdkalpha.UnimplementedSDKServer{})
	agonessdkbeta.RegisterSDKServer(srv, agonessdkbeta.UnimplementedSDKServer{})
	agonesallocation.RegisterAllocationServiceServer(srv, agonesallocation.UnimplementedAllocationServiceServer{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("gRPC server: %v", err)
		}
	})

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	mux := gwruntime.NewServeMux(gwruntime.WithMarshalerOption(gwruntime.MIMEWildcard, agonesJSON))
	ctx := context.Background()
	for _, register := range []func(context.Context, *gwruntime.ServeMux, *grpc.ClientConn) error{
		agonessdk.RegisterSDKHandler,
		agonessdkalpha.RegisterSDKHandler,
		agonessdkbeta.RegisterSDKHandler,
		agonesallocation.RegisterAllocationServiceHandler,
	} {
		if err := register(ctx, mux, conn); err != nil {
			t.Fatal(err)
		}
	}
	return mux
}

// gameServer is a game server shaped as Agones' REST documentation shows
// one (its values are this test's own), with counters and lists.
func gameServer() *agonessdk.GameServer {
	return &agonessdk.GameServer{
		ObjectMeta: &agonessdk.GameServer_ObjectMeta{
			Name:              "arena-7xk2p",
			Namespace:         "default",
			Uid:               "0b5d4e9c",
			ResourceVersion:   "12",
			Generation:        1,
			CreationTimestamp: 1767225600,
			Annotations:       map[string]string{"agones.dev/sdk-map": "dust"},
			Labels:            map[string]string{"agones.dev/fleet": "arena"},
		},
		Spec: &agonessdk.GameServer_Spec{Health: &agonessdk.GameServer_Spec_Health{
			PeriodSeconds: 5, FailureThreshold: 3, InitialDelaySeconds: 5,
		}},
		Status: &agonessdk.GameServer_Status{
			State:     "Ready",
			Address:   "10.0.0.5",
			Addresses: []*agonessdk.GameServer_Status_Address{{Type: "InternalIP", Address: "10.0.0.5"}},
			Ports:     []*agonessdk.GameServer_Status_Port{{Name: "default", Port: 7777}},
			Counters:  map[string]*agonessdk.GameServer_Status_CounterStatus{"rooms": {Count: 1, Capacity: 10}},
			Lists:     map[string]*agonessdk.GameServer_Status_ListStatus{"players": {Capacity: 100, Values: []string{"p1"}}},
		},
	}
}

// gameServerJSON is gameServer as Agones' SDK server writes it: snake_case
// keys, int64 as strings, int32 and bool as JSON numbers and booleans, and
// the unset fields too (deletion_timestamp, players).
const gameServerJSON = `{
  "object_meta": {
    "name": "arena-7xk2p", "namespace": "default", "uid": "0b5d4e9c",
    "resource_version": "12", "generation": "1",
    "creation_timestamp": "1767225600", "deletion_timestamp": "0",
    "annotations": {"agones.dev/sdk-map": "dust"},
    "labels": {"agones.dev/fleet": "arena"}
  },
  "spec": {"health": {"disabled": false, "period_seconds": 5, "failure_threshold": 3, "initial_delay_seconds": 5}},
  "status": {
    "state": "Ready", "address": "10.0.0.5",
    "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
    "ports": [{"name": "default", "port": 7777}],
    "players": null,
    "counters": {"rooms": {"count": "1", "capacity": "10"}},
    "lists": {"players": {"capacity": "100", "values": ["p1"]}}
  }
}`

// allocationRequestJSON is a matchmaker's request to POST
// /gameserverallocation: Agones' allocator documentation sends a namespace
// and multiClusterSetting; the other fields carry the names of the proto's
// JSON, enums by name, int64 and uint64 as strings, and one field Agones
// does not know, which it ignores.
const allocationRequestJSON = `{
  "namespace": "default",
  "multiClusterSetting": {"enabled": false},
  "gameServerSelectors": [
    {"matchLabels": {"agones.dev/fleet": "arena"}, "gameServerState": "ALLOCATED",
     "counters": {"rooms": {"minAvailable": "1"}}},
    {"matchLabels": {"agones.dev/fleet": "arena"}, "gameServerState": "READY",
     "players": {"minAvailable": "4"}, "lists": {"players": {"containsValue": "p1", "maxAvailable": "90"}}}
  ],
  "scheduling": "Distributed",
  "priorities": [{"type": "Counter", "key": "rooms", "order": "Descending"}],
  "counters": {"rooms": {"action": "Increment", "amount": "1"}},
  "lists": {"players": {"addValues": ["p1", "p2"], "capacity": "100"}},
  "metadata": {"labels": {"mode": "ctf"}, "annotations": {"map": "dust"}},
  "matchmakerTicket": "ignored"
}`

// allocationRequest is allocationRequestJSON as a message.
func allocationRequest() *agonesallocation.AllocationRequest {
	arena := map[string]string{"agones.dev/fleet": "arena"}
	return &agonesallocation.AllocationRequest{
		Namespace:           "default",
		MultiClusterSetting: &agonesallocation.MultiClusterSetting{},
		GameServerSelectors: []*agonesallocation.GameServerSelector{
			{
				MatchLabels:     arena,
				GameServerState: agonesallocation.GameServerSelector_ALLOCATED,
				Counters:        map[string]*agonesallocation.CounterSelector{"rooms": {MinAvailable: 1}},
			},
			{
				MatchLabels:     arena,
				GameServerState: agonesallocation.GameServerSelector_READY,
				Players:         &agonesallocation.PlayerSelector{MinAvailable: 4},
				Lists:           map[string]*agonesallocation.ListSelector{"players": {ContainsValue: "p1", MaxAvailable: 90}},
			},
		},
		Scheduling: agonesallocation.AllocationRequest_Distributed,
		Priorities: []*agonesallocation.Priority{
			{Type: agonesallocation.Priority_Counter, Key: "rooms", Order: agonesallocation.Priority_Descending},
		},
		Counters: map[string]*agonesallocation.CounterAction{
			"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)},
		},
		Lists: map[string]*agonesallocation.ListAction{
			"players": {AddValues: []string{"p1", "p2"}, Capacity: wrapperspb.Int64(100)},
		},
		Metadata: &agonesallocation.MetaPatch{
			Labels:      map[string]string{"mode": "ctf"},
			Annotations: map[string]string{"map": "dust"},
		},
	}
}

// allocationResponse is the answer to allocationRequest.
func allocationResponse() *agonesallocation.AllocationResponse {
	return &agonesallocation.AllocationResponse{
		GameServerName: "arena-7xk2p",
		Ports:          []*agonesallocation.AllocationResponse_GameServerStatusPort{{Name: "default", Port: 7777}},
		Address:        "10.0.0.5",
		Addresses:      []*agonesallocation.AllocationResponse_GameServerStatusAddress{{Type: "InternalIP", Address: "10.0.0.5"}},
		NodeName:       "host-3",
		Metadata: &agonesallocation.AllocationResponse_GameServerMetadata{
			Labels:      map[string]string{"agones.dev/fleet": "arena", "mode": "ctf"},
			Annotations: map[string]string{"map": "dust"},
		},
		Counters: map[string]*agonesallocation.AllocationResponse_CounterStatus{
			"rooms": {Count: wrapperspb.Int64(2), Capacity: wrapperspb.Int64(4)},
		},
		Lists: map[string]*agonesallocation.AllocationResponse_ListStatus{
			"players": {Values: []string{"p1", "p2"}, Capacity: wrapperspb.Int64(100)},
		},
	}
}

// allocationResponseJSON is allocationResponse as Agones' allocator writes
// it: the documented keys (gameServerName, ports, address, nodeName) and
// the others, source written out although empty.
const allocationResponseJSON = `{
  "gameServerName": "arena-7xk2p",
  "ports": [{"name": "default", "port": 7777}],
  "address": "10.0.0.5",
  "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
  "nodeName": "host-3",
  "source": "",
  "metadata": {"labels": {"agones.dev/fleet": "arena", "mode": "ctf"}, "annotations": {"map": "dust"}},
  "counters": {"rooms": {"count": "2", "capacity": "4"}},
  "lists": {"players": {"values": ["p1", "p2"], "capacity": "100"}}
}`

// TestRESTPathsReachAgonesMethods drives each REST path of the four
// services, with bodies shaped as Agones' documentation shows them,
// through the generated gateway with Agones' JSON, and checks the gRPC
// call each became and the JSON answer.
func TestRESTPathsReachAgonesMethods(t *testing.T) {
	a := &answerer{}
	mux := startGateway(t, a)

	empty := &agonessdk.Empty{}
	counter := &agonessdkbeta.Counter{Name: "rooms", Count: 5, Capacity: 11}
	counterJSON := `{"name": "rooms", "count": "5", "capacity": "11"}`
	list := &agonessdkbeta.List{Name: "players", Capacity: 120, Values: []string{"p3", "p4"}}
	listJSON := `{"name": "players", "capacity": "120", "values": ["p3", "p4"]}`

	for _, tc := range []struct {
		verb, path, body string
		answer           proto.Message
		err              error
		want             []call
		status           int
		json             string
	}{
		{verb: "POST", path: "/ready", body: `{}`, answer: empty,
			want: []call{{agonessdk.SDK_Ready_FullMethodName, empty}}, json: `{}`},
		{verb: "POST", path: "/allocate", body: `{}`, answer: empty,
			want: []call{{agonessdk.SDK_Allocate_FullMethodName, empty}}, json: `{}`},
		{verb: "POST", path: "/shutdown", body: `{}`, answer: empty,
			want: []call{{agonessdk.SDK_Shutdown_FullMethodName, empty}}, json: `{}`},
		{verb: "POST", path: "/health", body: "{}\n{}",
			want: []call{{agonessdk.SDK_Health_FullMethodName, empty}, {agonessdk.SDK_Health_FullMethodName, empty}},
			json: `{}`},
		{verb: "GET", path: "/gameserver", answer: gameServer(),
			want: []call{{agonessdk.SDK_GetGameServer_FullMethodName, empty}}, json: gameServerJSON},
		{verb: "PUT", path: "/metadata/label", body: `{"key": "mode", "value": "ctf", "extra": 1}`, answer: empty,
			want: []call{{agonessdk.SDK_SetLabel_FullMethodName, &agonessdk.KeyValue{Key: "mode", Value: "ctf"}}},
			json: `{}`},
		{verb: "PUT", path: "/metadata/annotation", body: `{"key": "map", "value": "dust"}`, answer: empty,
			want: []call{{agonessdk.SDK_SetAnnotation_FullMethodName, &agonessdk.KeyValue{Key: "map", Value: "dust"}}},
			json: `{}`},
		{verb: "POST", path: "/reserve", body: `{"seconds": "5"}`, answer: empty,
			want: []call{{agonessdk.SDK_Reserve_FullMethodName, &agonessdk.Duration{Seconds: 5}}}, json: `{}`},

		{verb: "POST", path: "/alpha/player/connect", body: `{"playerID": "uzh7i"}`,
			answer: &agonessdkalpha.Bool{Bool: true},
			want:   []call{{agonessdkalpha.SDK_PlayerConnect_FullMethodName, &agonessdkalpha.PlayerID{PlayerID: "uzh7i"}}},
			json:   `{"bool": true}`},
		{verb: "POST", path: "/alpha/player/disconnect", body: `{"playerID": "uzh7i"}`,
			answer: &agonessdkalpha.Bool{},
			want:   []call{{agonessdkalpha.SDK_PlayerDisconnect_FullMethodName, &agonessdkalpha.PlayerID{PlayerID: "uzh7i"}}},
			json:   `{"bool": false}`},
		{verb: "PUT", path: "/alpha/player/capacity", body: `{"count": 5}`, answer: &agonessdkalpha.Empty{},
			want: []call{{agonessdkalpha.SDK_SetPlayerCapacity_FullMethodName, &agonessdkalpha.Count{Count: 5}}},
			json: `{}`},
		{verb: "GET", path: "/alpha/player/capacity", answer: &agonessdkalpha.Count{Count: 5},
			want: []call{{agonessdkalpha.SDK_GetPlayerCapacity_FullMethodName, &agonessdkalpha.Empty{}}},
			json: `{"count": "5"}`},
		{verb: "GET", path: "/alpha/player/count", answer: &agonessdkalpha.Count{},
			want: []call{{agonessdkalpha.SDK_GetPlayerCount_FullMethodName, &agonessdkalpha.Empty{}}},
			json: `{"count": "0"}`},
		{verb: "GET", path: "/alpha/player/connected/uzh7i", answer: &agonessdkalpha.Bool{Bool: true},
			want: []call{{agonessdkalpha.SDK_IsPlayerConnected_FullMethodName, &agonessdkalpha.PlayerID{PlayerID: "uzh7i"}}},
			json: `{"bool": true}`},
		{verb: "GET", path: "/alpha/player/connected", answer: &agonessdkalpha.PlayerIDList{List: []string{"uzh7i", "k2"}},
			want: []call{{agonessdkalpha.SDK_GetConnectedPlayers_FullMethodName, &agonessdkalpha.Empty{}}},
			json: `{"list": ["uzh7i", "k2"]}`},

		{verb: "GET", path: "/v1beta1/counters/rooms", answer: counter,
			want: []call{{agonessdkbeta.SDK_GetCounter_FullMethodName, &agonessdkbeta.GetCounterRequest{Name: "rooms"}}},
			json: counterJSON},
		{verb: "PATCH", path: "/v1beta1/counters/rooms", body: `{"count": "5", "capacity": "11"}`, answer: counter,
			want: []call{{agonessdkbeta.SDK_UpdateCounter_FullMethodName, &agonessdkbeta.UpdateCounterRequest{
				CounterUpdateRequest: &agonessdkbeta.CounterUpdateRequest{
					Name: "rooms", Count: wrapperspb.Int64(5), Capacity: wrapperspb.Int64(11),
				}}}},
			json: counterJSON},
		{verb: "PATCH", path: "/v1beta1/counters/rooms", body: `{"countDiff": "-1"}`, answer: counter,
			want: []call{{agonessdkbeta.SDK_UpdateCounter_FullMethodName, &agonessdkbeta.UpdateCounterRequest{
				CounterUpdateRequest: &agonessdkbeta.CounterUpdateRequest{Name: "rooms", CountDiff: -1}}}},
			json: counterJSON},
		{verb: "GET", path: "/v1beta1/lists/players", answer: list,
			want: []call{{agonessdkbeta.SDK_GetList_FullMethodName, &agonessdkbeta.GetListRequest{Name: "players"}}},
			json: listJSON},
		// Without an update_mask the gateway takes the mask from the body's
		// fields, as Agones' does.
		{verb: "PATCH", path: "/v1beta1/lists/players", body: `{"capacity": "120", "values": ["p3", "p4"]}`, answer: list,
			want: []call{{agonessdkbeta.SDK_UpdateList_FullMethodName, &agonessdkbeta.UpdateListRequest{
				List:       &agonessdkbeta.List{Name: "players", Capacity: 120, Values: []string{"p3", "p4"}},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"capacity", "values"}},
			}}},
			json: listJSON},
		{verb: "POST", path: "/v1beta1/lists/players:addValue", body: `{"value": "p9"}`, answer: list,
			want: []call{{agonessdkbeta.SDK_AddListValue_FullMethodName, &agonessdkbeta.AddListValueRequest{Name: "players", Value: "p9"}}},
			json: listJSON},
		{verb: "POST", path: "/v1beta1/lists/players:removeValue", body: `{"value": "p3"}`, answer: list,
			want: []call{{agonessdkbeta.SDK_RemoveListValue_FullMethodName, &agonessdkbeta.RemoveListValueRequest{Name: "players", Value: "p3"}}},
			json: listJSON},

		{verb: "POST", path: "/gameserverallocation", body: allocationRequestJSON, answer: allocationResponse(),
			want: []call{{agonesallocation.AllocationService_Allocate_FullMethodName, allocationRequest()}},
			json: allocationResponseJSON},
		// Nothing matches: RESOURCE_EXHAUSTED is HTTP 429, as matchmakers
		// expect of Agones' allocator.
		{verb: "POST", path: "/gameserverallocation", body: `{"namespace": "default"}`,
			err:    status.Error(codes.ResourceExhausted, "no game server matches"),
			want:   []call{{agonesallocation.AllocationService_Allocate_FullMethodName, &agonesallocation.AllocationRequest{Namespace: "default"}}},
			status: http.StatusTooManyRequests,
			json:   `{"code": 8, "message": "no game server matches", "details": []}`},
	} {
		t.Run(tc.verb+" "+tc.path, func(t *testing.T) {
			a.expect(tc.answer, tc.err)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(tc.verb, tc.path, strings.NewReader(tc.body)))
			want := tc.status
			if want == 0 {
				want = http.StatusOK
			}
			if rec.Code != want {
				t.Errorf("status %d, want %d: %s", rec.Code, want, rec.Body)
			}
			checkCalls(t, a.recorded(), tc.want)
			sameJSON(t, rec.Body.String(), tc.json)
		})
	}
}

// TestWatchGameServerOverRESTIsJSONLines checks GET /watch/gameserver: one
// line per GameServer sent, each {"result": …} in Agones' JSON.
func TestWatchGameServerOverRESTIsJSONLines(t *testing.T) {
	allocated := gameServer()
	allocated.Status.State = "Allocated"
	a := &answerer{watch: []*agonessdk.GameServer{gameServer(), allocated}}
	mux := startGateway(t, a)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/watch/gameserver", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	checkCalls(t, a.recorded(), []call{{agonessdk.SDK_WatchGameServer_FullMethodName, &agonessdk.Empty{}}})
	lines := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), rec.Body)
	}
	sameJSON(t, lines[0], `{"result": `+gameServerJSON+`}`)
	sameJSON(t, lines[1], `{"result": `+strings.Replace(gameServerJSON, `"state": "Ready"`, `"state": "Allocated"`, 1)+`}`)
}

// checkCalls compares the calls a server was given with the calls wanted.
func checkCalls(t *testing.T, got, want []call) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d calls %v, want %d %v", len(got), got, len(want), want)
		return
	}
	for i := range want {
		if got[i].method != want[i].method || !proto.Equal(got[i].req, want[i].req) {
			t.Errorf("call %d: %s %v, want %s %v", i, got[i].method, got[i].req, want[i].method, want[i].req)
		}
	}
}

// sameJSON fails unless two JSON texts hold the same values: key order and
// spacing aside, "1" and 1 differ.
func sameJSON(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Errorf("answer is not JSON: %v: %s", err, got)
		return
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the test's JSON: %v: %s", err, want)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("JSON\n%s\nwant\n%s", got, want)
	}
}
