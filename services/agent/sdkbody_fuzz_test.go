package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// Fuzz targets for what the agent decodes from its game servers' SDK
// calls over REST (docs/fuzzing.md), without a whole agent: the agent's
// REST guard and a gateway like the agent's, in front of a gRPC server on
// an in-memory listener that records what reaches it.

// fuzzToken is the token of the one game server the fuzzed agent knows.
const fuzzToken = "fuzz-token"

// recordingSDK is an SDK server that records the requests reaching it.
type recordingSDK struct {
	sdkv1.UnimplementedSDKServiceServer
	mu   sync.Mutex
	last proto.Message
}

func (r *recordingSDK) record(m proto.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = m
}

// take returns the request recorded since the last take, or nil.
func (r *recordingSDK) take() proto.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.last
	r.last = nil
	return m
}

func (r *recordingSDK) Ready(_ context.Context, m *sdkv1.ReadyRequest) (*sdkv1.ReadyResponse, error) {
	r.record(m)
	return &sdkv1.ReadyResponse{}, nil
}

func (r *recordingSDK) Health(_ context.Context, m *sdkv1.HealthRequest) (*sdkv1.HealthResponse, error) {
	r.record(m)
	return &sdkv1.HealthResponse{}, nil
}

func (r *recordingSDK) Shutdown(_ context.Context, m *sdkv1.ShutdownRequest) (*sdkv1.ShutdownResponse, error) {
	r.record(m)
	return &sdkv1.ShutdownResponse{}, nil
}

func (r *recordingSDK) SetLabel(_ context.Context, m *sdkv1.SetLabelRequest) (*sdkv1.SetLabelResponse, error) {
	r.record(m)
	return &sdkv1.SetLabelResponse{}, nil
}

func (r *recordingSDK) Reserve(_ context.Context, m *sdkv1.ReserveRequest) (*sdkv1.ReserveResponse, error) {
	r.record(m)
	return &sdkv1.ReserveResponse{}, nil
}

func (r *recordingSDK) Allocate(_ context.Context, m *sdkv1.AllocateRequest) (*sdkv1.AllocateResponse, error) {
	r.record(m)
	return &sdkv1.AllocateResponse{GameSession: "gameSessions/gsess-1"}, nil
}

func (r *recordingSDK) AcceptPlayer(_ context.Context, m *sdkv1.AcceptPlayerRequest) (*sdkv1.AcceptPlayerResponse, error) {
	r.record(m)
	return &sdkv1.AcceptPlayerResponse{}, nil
}

func (r *recordingSDK) DisconnectPlayer(_ context.Context, m *sdkv1.DisconnectPlayerRequest) (*sdkv1.DisconnectPlayerResponse, error) {
	r.record(m)
	return &sdkv1.DisconnectPlayerResponse{}, nil
}

func (r *recordingSDK) RemovePlayer(_ context.Context, m *sdkv1.RemovePlayerRequest) (*sdkv1.RemovePlayerResponse, error) {
	r.record(m)
	return &sdkv1.RemovePlayerResponse{}, nil
}

// sdkHarness is the agent's SDK REST path: guardREST, then the gateway,
// then gRPC to the recording server, as sdkServer.run builds them.
type sdkHarness struct {
	handler http.Handler
	sdk     *recordingSDK
}

func newSDKHarness(tb testing.TB) *sdkHarness {
	tb.Helper()
	a := &Agent{log: slog.New(slog.DiscardHandler), tokens: map[string]*gameServer{fuzzToken: {name: "fleets/arena/gameServers/gs-1"}}}
	s := &sdkServer{ops: agentSDK{a: a}, log: a.log}
	rec := &recordingSDK{}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(maxSDKMessage))
	sdkv1.RegisterSDKServiceServer(gs, rec)
	go func() { _ = gs.Serve(lis) }() // ends with Stop below
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(func() {
		cancel()
		_ = conn.Close()
		gs.Stop()
	})
	gw := runtime.NewServeMux() // as sdkServer.run
	if err := sdkv1.RegisterSDKServiceHandler(ctx, gw, conn); err != nil {
		tb.Fatal(err)
	}
	return &sdkHarness{handler: s.guardREST(gw), sdk: rec}
}

// sdkRoutes are the SDK's REST calls that carry a body; {} is where the
// path parameter goes.
var sdkRoutes = []struct{ method, path string }{
	{http.MethodPost, "/v1/sdk/ready"},
	{http.MethodPost, "/v1/sdk/health"},
	{http.MethodPost, "/v1/sdk/shutdown"},
	{http.MethodPut, "/v1/sdk/labels/{}"},
	{http.MethodPost, "/v1/sdk/reserve"},
	{http.MethodPost, "/v1/sdk/allocate"},
	{http.MethodPost, "/v1/sdk/players:accept"},
	{http.MethodPost, "/v1/sdk/players/{}:disconnect"},
	{http.MethodPost, "/v1/sdk/players/{}:remove"},
}

// readCounter counts the bytes read from a request body.
type readCounter struct {
	r io.Reader
	n int
}

func (c *readCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// Any SDK REST call, with any body and path parameter, is answered without
// a panic or a server error. Without the game server's token it is refused
// with 401 before its body is read. A body over the SDK's limit never
// reaches the SDK. What reaches it is a message that gRPC carries (so UTF-8
// strings) within the limit, that a label the SDK would record keeps the
// views whole (events.DecideGameServer refuses the others).
func FuzzSDKRESTBody(f *testing.F) {
	for i, body := range []string{
		`{}`, `{}`, `{}`, `{"value":"ranked"}`, `{"seconds":30}`,
		`{"properties":{"map":"dust","mode":"ranked"}}`,
		`{"playerSessionId":"ps-hdfmejrrgy","token":"dev.1795407680.cKYq"}`,
		`{"connection":"3"}`, `{"connection":3}`,
	} {
		f.Add(uint8(i), "ps-hdfmejrrgy", []byte(body), true, i%2 == 0)
	}
	f.Add(uint8(3), "mode", []byte(`{"value":"\u0000"}`), true, true)
	f.Add(uint8(3), "mode", []byte(`{"value":"ranked"}`), false, true)
	f.Add(uint8(5), "", []byte(`{"properties":{"a":1}}`), true, true)
	f.Add(uint8(6), "", []byte(`{"playerSessionId":"ps-1","token":"x","extra":true}`), true, false)
	f.Add(uint8(4), "", bytes.Repeat([]byte(" "), maxSDKMessage+1), true, true)
	f.Add(uint8(4), "", bytes.Repeat([]byte(" "), maxSDKMessage+1), true, false)
	h := newSDKHarness(f)
	ready := &eventsv1.GameServerState{Name: "fleets/arena/gameServers/gs-1", Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY}
	f.Fuzz(func(t *testing.T, route uint8, param string, body []byte, authed, announced bool) {
		rt := sdkRoutes[int(route)%len(sdkRoutes)]
		if !strings.Contains(rt.path, "{}") {
			param = ""
		}
		if param == "" && strings.Contains(rt.path, "{}") {
			param = "x"
		}
		target := strings.Replace(rt.path, "{}", url.PathEscape(param), 1)
		if _, err := url.ParseRequestURI(target); err != nil {
			return
		}
		counted := &readCounter{r: bytes.NewReader(body)}
		req := httptest.NewRequest(rt.method, target, counted)
		req.Header.Set("Content-Type", "application/json")
		if announced {
			req.ContentLength = int64(len(body))
		}
		if authed {
			req.Header.Set("Authorization", "Bearer "+fuzzToken)
		}
		w := httptest.NewRecorder()
		h.handler.ServeHTTP(w, req)
		got := h.sdk.take()
		switch {
		case w.Code >= 500:
			t.Fatalf("%s %s with %q: %d %s", rt.method, target, trim(body), w.Code, w.Body)
		case !authed && (w.Code != http.StatusUnauthorized || counted.n != 0 || got != nil):
			t.Fatalf("without a token: %d, %d body bytes read, reached the SDK: %v", w.Code, counted.n, got != nil)
		case got == nil:
			return
		case len(body) > maxSDKMessage:
			t.Fatalf("a body of %d bytes reached the SDK", len(body))
		case w.Code != http.StatusOK:
			t.Fatalf("the SDK answered, but the call got %d %s", w.Code, w.Body)
		}
		b, err := proto.Marshal(got)
		if err != nil || len(b) > maxSDKMessage {
			t.Fatalf("the SDK got a request of %d bytes that gRPC cannot carry (%v)", len(b), err)
		}
		if l, ok := got.(*sdkv1.SetLabelRequest); ok {
			checkSDKLabel(t, ready, l)
		}
	})
}

// checkSDKLabel asserts that a label the agent would record (SetLabel
// decides SetLabels on the server) is one the views can hold: no NUL byte
// or other control character, within the label limits, in valid JSON.
func checkSDKLabel(t *testing.T, state *eventsv1.GameServerState, l *sdkv1.SetLabelRequest) {
	t.Helper()
	msgs, err := events.DecideGameServer(state.GetName(), state, events.SetLabels{Set: map[string]string{l.GetKey(): l.GetValue()}})
	if err != nil {
		var ve *events.ValidationError
		if !errors.As(err, &ve) || status.Code(sdkError(err)) != codes.InvalidArgument {
			t.Fatalf("label %q=%q refused with %v, not INVALID_ARGUMENT", l.GetKey(), l.GetValue(), err)
		}
		return
	}
	if len(l.GetKey()) > events.MaxLabelKeyBytes || len(l.GetValue()) > events.MaxLabelValueBytes {
		t.Fatalf("label of %d + %d bytes accepted", len(l.GetKey()), len(l.GetValue()))
	}
	for _, m := range msgs {
		changed, ok := m.(*eventsv1.LabelsChanged)
		if !ok {
			continue
		}
		b, err := json.Marshal(changed.GetSet()) // as the projector writes labels (jsonb)
		if err != nil || bytes.Contains(b, []byte(`\u0000`)) || strings.ContainsFunc(l.GetKey()+l.GetValue(), func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Fatalf("label %q=%q accepted: %s", l.GetKey(), l.GetValue(), b)
		}
	}
}

// trim shortens a body for a failure message.
func trim(b []byte) []byte { return b[:min(len(b), 200)] }

// Any player session id a game server names in an SDK call is resolved
// against its own game session or refused (INVALID_ARGUMENT, or
// FAILED_PRECONDITION for another session's), never a panic: what is
// resolved is the server's game session and a valid id, and a full name
// given is that same name.
func FuzzSDKPlayerSessionID(f *testing.F) {
	for _, s := range []string{
		"ps-hdfmejrrgy", "gameSessions/gsess-a/playerSessions/ps-1", "gameSessions/gsess-b/playerSessions/ps-1",
		"gameSessions/gsess-a/playerSessions/", "gameSessions/gsess-a", "../ps-1", "PS-1", "", "ps-1/",
	} {
		f.Add(s)
	}
	const current = "gameSessions/gsess-a"
	gs := &gameServer{state: &eventsv1.GameServerState{GameSession: current}}
	f.Fuzz(func(t *testing.T, id string) {
		gsess, ps, err := gs.playerSessionOf(id)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.FailedPrecondition {
				t.Fatalf("%q refused with %v", id, err)
			}
			return
		}
		if gsess != current || events.CheckID(ps) != nil {
			t.Fatalf("%q resolved to (%q, %q)", id, gsess, ps)
		}
		g, _ := events.ParseGameSessionName(gsess)
		if strings.Contains(id, "/") && events.PlayerSessionName(g, ps) != id {
			t.Fatalf("%q resolved to another name, %s", id, events.PlayerSessionName(g, ps))
		}
		if !strings.Contains(id, "/") && ps != id {
			t.Fatalf("%q resolved to the id %q", id, ps)
		}
	})
}

// The harness of FuzzSDKRESTBody serves the SDK's REST calls as the agent
// does: a call with the token reaches the SDK with its body and path
// decoded, one without is refused before, and a body over the limit never
// reaches it, announced or not.
func TestSDKRESTHarness(t *testing.T) {
	h := newSDKHarness(t)
	big := `{"value":"` + strings.Repeat("v", maxSDKMessage) + `"}`
	for _, tc := range []struct {
		name, method, path, body string
		token                    string
		announced                bool
		status                   int
		want                     proto.Message // what reaches the SDK; nil: nothing
	}{
		{"ready", http.MethodPost, "/v1/sdk/ready", `{}`, fuzzToken, true, http.StatusOK, &sdkv1.ReadyRequest{}},
		{"a label", http.MethodPut, "/v1/sdk/labels/mode", `{"value":"ranked"}`, fuzzToken, true, http.StatusOK, &sdkv1.SetLabelRequest{Key: "mode", Value: "ranked"}},
		{"a disconnect", http.MethodPost, "/v1/sdk/players/ps-1:disconnect", `{"connection":"3"}`, fuzzToken, false, http.StatusOK,
			&sdkv1.DisconnectPlayerRequest{PlayerSession: "ps-1", Connection: 3}},
		{"no token", http.MethodPost, "/v1/sdk/ready", `{}`, "", true, http.StatusUnauthorized, nil},
		{"another token", http.MethodPost, "/v1/sdk/ready", `{}`, "other", true, http.StatusUnauthorized, nil},
		{"a body over the limit, announced", http.MethodPut, "/v1/sdk/labels/mode", big, fuzzToken, true, http.StatusRequestEntityTooLarge, nil},
		{"a body over the limit, chunked", http.MethodPut, "/v1/sdk/labels/mode", big, fuzzToken, false, http.StatusBadRequest, nil},
		{"not JSON", http.MethodPost, "/v1/sdk/reserve", `{"seconds":`, fuzzToken, true, http.StatusBadRequest, nil},
		{"a label key that is not UTF-8", http.MethodPut, "/v1/sdk/labels/%FF", `{"value":"x"}`, fuzzToken, true, http.StatusBadRequest, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, &readCounter{r: strings.NewReader(tc.body)})
			if tc.announced {
				req.ContentLength = int64(len(tc.body))
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			w := httptest.NewRecorder()
			h.handler.ServeHTTP(w, req)
			got := h.sdk.take()
			if w.Code != tc.status || (got == nil) != (tc.want == nil) || got != nil && !proto.Equal(got, tc.want) {
				t.Fatalf("got %d %s, the SDK got %v; want %d and %v", w.Code, trim(w.Body.Bytes()), got, tc.status, tc.want)
			}
		})
	}
}
