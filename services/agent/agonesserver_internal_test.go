package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// fakeOps records what a protocol server asks of the agent.
type fakeOps struct {
	sdkOps // the calls not overridden are not expected
	mu     sync.Mutex
	calls  []string
	labels map[string]string
	// annotations are the last SetAnnotation's.
	annotations map[string]string
	// changes, sent to, makes a watch send the server again.
	changes chan struct{}
	state   string
	open    int
	pings   int
}

func (f *fakeOps) note(s string) { f.mu.Lock(); f.calls = append(f.calls, s); f.mu.Unlock() }

func (f *fakeOps) NoteCall(context.Context, sdkCaller, string) { f.note("note") }
func (f *fakeOps) ReadyCall(sdkCaller) func()                  { f.note("readycall"); return func() {} }
func (f *fakeOps) StreamOpened(context.Context, sdkCaller) {
	f.mu.Lock()
	f.open++
	f.mu.Unlock()
}
func (f *fakeOps) StreamClosed(sdkCaller, eventsv1.DisconnectKind, string) {
	f.mu.Lock()
	f.open--
	f.mu.Unlock()
	f.note("closed")
}
func (f *fakeOps) Ready(context.Context, sdkCaller) error {
	f.note("ready")
	f.mu.Lock()
	f.state = "READY"
	f.mu.Unlock()
	return nil
}
func (f *fakeOps) HealthPing(context.Context, sdkCaller, string) {
	f.mu.Lock()
	f.pings++
	f.mu.Unlock()
}
func (f *fakeOps) Shutdown(context.Context, sdkCaller) error { f.note("shutdown"); return nil }
func (f *fakeOps) GameServer(sdkCaller) *sdkv1.GameServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &sdkv1.GameServer{Name: "fleets/arena/gameServers/gs-1", State: f.state, Address: "10.0.0.5",
		Ports: []*sdkv1.Port{{Name: "game", Port: 7300}}, Labels: f.labels, Annotations: f.annotations}
}
func (f *fakeOps) WatchGameServer(ctx context.Context, c sdkCaller, send func(*sdkv1.GameServer) error) error {
	if err := send(f.GameServer(c)); err != nil {
		return err
	}
	for {
		select {
		case <-f.changes: // nil unless a test sends changes
			if err := send(f.GameServer(c)); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
func (f *fakeOps) SetLabel(_ context.Context, _ sdkCaller, k, v string) error {
	if len(k) > events.MaxLabelKeyBytes {
		return &events.ValidationError{Field: "labels", Reason: "key too long"}
	}
	f.mu.Lock()
	f.labels = map[string]string{k: v}
	f.mu.Unlock()
	return nil
}
func (f *fakeOps) SetAnnotation(_ context.Context, _ sdkCaller, k, v string) error {
	f.mu.Lock()
	f.annotations = map[string]string{k: v}
	f.mu.Unlock()
	return nil
}
func (f *fakeOps) Reserve(_ context.Context, _ sdkCaller, d time.Duration) error {
	f.note("reserve " + d.String())
	return nil
}
func (f *fakeOps) Allocate(context.Context, sdkCaller, map[string]string) (string, error) {
	f.note("allocate")
	return "gameSessions/x", nil
}

// serveAgones serves an agonesServer over ops on loopback; known tells
// whether a call is identified.
func serveAgones(t *testing.T, ops sdkOps, known bool) agonessdk.SDKClient {
	t.Helper()
	s := &agonesServer{ops: ops, identify: func(context.Context) (sdkCaller, bool) { return sdkCaller{}, known }}
	srv := s.grpcServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agonessdk.NewSDKClient(conn)
}

// The Agones server carries each call to sdkOps as Tether's SDK server
// does: noted first (a Ready as under way too), labels prefixed, Reserve
// bounded, the GameServer in Agones' shape, the Health stream a held
// connection whose messages are health pings.
func TestAgonesServerCarriesCallsToSDKOps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ops := &fakeOps{state: "STARTING"}
	c := serveAgones(t, ops, true)

	if _, err := c.Ready(ctx, &agonessdk.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetLabel(ctx, &agonessdk.KeyValue{Key: "mode", Value: "ctf"}); err != nil {
		t.Fatal(err)
	}
	gs, err := c.GetGameServer(ctx, &agonessdk.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	m := gs.GetObjectMeta()
	if m.GetName() != "gs-1" || m.GetNamespace() != "default" || m.GetLabels()["agones.dev/sdk-mode"] != "ctf" ||
		m.GetLabels()["agones.dev/fleet"] != "arena" || len(m.GetUid()) != 36 {
		t.Errorf("object_meta = %v", m)
	}
	if st := gs.GetStatus(); st.GetState() != "Ready" || st.GetAddress() != "10.0.0.5" ||
		len(st.GetPorts()) != 1 || st.GetPorts()[0].GetPort() != 7300 {
		t.Errorf("status = %v", st)
	}
	if again, _ := c.GetGameServer(ctx, &agonessdk.Empty{}); again.GetObjectMeta().GetUid() != m.GetUid() {
		t.Errorf("uid changed: %s then %s", m.GetUid(), again.GetObjectMeta().GetUid())
	}
	if _, err := c.SetLabel(ctx, &agonessdk.KeyValue{Key: string(make([]byte, 60)), Value: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a label key too long with its prefix: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.Reserve(ctx, &agonessdk.Duration{Seconds: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(ctx, &agonessdk.Duration{Seconds: 0}); err != nil {
		t.Errorf("Reserve(0), until the server says otherwise: %v", err)
	}
	for _, n := range []int64{-1, maxReserveSeconds + 1} {
		if _, err := c.Reserve(ctx, &agonessdk.Duration{Seconds: n}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Reserve(%d): %v, want INVALID_ARGUMENT", n, err)
		}
	}
	if _, err := c.Allocate(ctx, &agonessdk.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetAnnotation(ctx, &agonessdk.KeyValue{Key: "a", Value: "b"}); err != nil {
		t.Fatal(err)
	}
	if gs, err := c.GetGameServer(ctx, &agonessdk.Empty{}); err != nil || gs.GetObjectMeta().GetAnnotations()["agones.dev/sdk-a"] != "b" {
		t.Errorf("annotations %v, %v; want agones.dev/sdk-a=b", gs.GetObjectMeta().GetAnnotations(), err)
	}

	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := h.Send(&agonessdk.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	w, err := c.WatchGameServer(wctx, &agonessdk.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil || first.GetStatus().GetState() != "Ready" {
		t.Errorf("watch's first message: %v, %v", first, err)
	}
	wcancel()
	if _, err := c.Shutdown(ctx, &agonessdk.Empty{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 5*time.Second, "the streams closed after 3 health pings", func() error {
		ops.mu.Lock()
		defer ops.mu.Unlock()
		if ops.open != 0 || ops.pings != 3 {
			return fmt.Errorf("streams open %d, health pings %d; want 0 and 3", ops.open, ops.pings)
		}
		return nil
	})
	ops.mu.Lock()
	defer ops.mu.Unlock()
	want := []string{"note", "readycall", "ready", "reserve 5s", "reserve 0s", "allocate", "shutdown"}
	for _, w := range want {
		found := false
		for _, c := range ops.calls {
			found = found || c == w
		}
		if !found {
			t.Errorf("calls %v lack %q", ops.calls, w)
		}
	}
	if ops.calls[0] != "readycall" && ops.calls[0] != "note" {
		t.Errorf("first call %q: a call is noted before it is carried out", ops.calls[0])
	}
}

// A call the server cannot place is refused before anything reaches the
// agent.
func TestAgonesServerRefusesAnUnknownCaller(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ops := &fakeOps{}
	c := serveAgones(t, ops, false)
	if _, err := c.Ready(ctx, &agonessdk.Empty{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Ready: %v, want UNAUTHENTICATED", err)
	}
	h, err := c.Health(ctx)
	if err == nil {
		_, err = h.CloseAndRecv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Health: %v, want UNAUTHENTICATED", err)
	}
	if len(ops.calls) != 0 || ops.pings != 0 {
		t.Errorf("the agent was called: %v, %d pings", ops.calls, ops.pings)
	}
}

// Every lifecycle has a word in Agones.
func TestAgonesStatesCoverTheLifecycle(t *testing.T) {
	for v, name := range eventsv1.Lifecycle_name {
		if v == 0 {
			continue
		}
		l := events.LifecycleName(eventsv1.Lifecycle(v))
		if agonesState(l) == "Unknown" {
			t.Errorf("%s (%s) has no Agones state", l, name)
		}
	}
}

// Agones' REST paths, JSON as Agones writes it: POST /health takes `{}`
// and refuses an empty body (400); GET /gameserver has proto names and
// unset fields written out; /watch/gameserver is {"result": …} lines;
// unknown input fields are ignored.
func TestAgonesRESTPaths(t *testing.T) {
	ops := &fakeOps{state: "STARTING"}
	s := &agonesServer{ops: ops, identify: func(context.Context) (sdkCaller, bool) { return sdkCaller{}, true }}
	h, err := s.restHandler(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Body != nil { // an upgraded connection's answer has none
			defer resp.Body.Close()
		}
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if code, body := do("POST", "/ready", "{}"); code != 200 {
		t.Fatalf("POST /ready: %d %s", code, body)
	}
	if code, body := do("POST", "/health", "{}"); code != 200 {
		t.Fatalf("POST /health {}: %d %s", code, body)
	}
	if code, body := do("POST", "/health", ""); code != 400 {
		t.Fatalf("POST /health with no body: %d %s, want 400", code, body)
	}
	if code, body := do("PUT", "/metadata/label", `{"key":"mode","value":"ctf","extra":1}`); code != 200 {
		t.Fatalf("PUT /metadata/label: %d %s", code, body)
	}
	if code, body := do("POST", "/reserve", `{"seconds":"7"}`); code != 200 {
		t.Fatalf("POST /reserve: %d %s", code, body)
	}
	code, body := do("GET", "/gameserver", "")
	if code != 200 {
		t.Fatalf("GET /gameserver: %d %s", code, body)
	}
	var gs map[string]map[string]any
	if err := json.Unmarshal([]byte(body), &gs); err != nil {
		t.Fatalf("GET /gameserver: %v: %s", err, body)
	}
	meta := gs["object_meta"]
	if meta["name"] != "gs-1" || meta["creation_timestamp"] != "0" || gs["status"]["state"] != "Ready" {
		t.Errorf("GET /gameserver: %s", body)
	}
	if labels, _ := meta["labels"].(map[string]any); labels["agones.dev/sdk-mode"] != "ctf" {
		t.Errorf("labels: %v", meta["labels"])
	}
	ops.mu.Lock()
	pings, calls := ops.pings, fmt.Sprint(ops.calls)
	ops.mu.Unlock()
	if pings != 1 || !strings.Contains(calls, "reserve 7s") {
		t.Errorf("health pings %d (want 1), calls %s", pings, calls)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/watch/gameserver", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Body != nil { // an upgraded connection's answer has none
		defer resp.Body.Close()
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var first struct {
		Result map[string]map[string]any `json:"result"`
	}
	if err := json.Unmarshal([]byte(line), &first); err != nil || first.Result["status"]["state"] != "Ready" {
		t.Errorf("first watch line %q: %v", line, err)
	}
}

// The watch on a WebSocket (an Upgrade on /watch/gameserver, as Unreal's
// Agones plugin asks): the server at once as one text message
// {"result": GameServer}, then every change, until the client closes.
func TestAgonesWatchOverAWebSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ops := &fakeOps{state: "READY", changes: make(chan struct{}, 1)}
	s := &agonesServer{ops: ops, identify: func(context.Context) (sdkCaller, bool) { return sdkCaller{}, true }}
	h, err := s.restHandler(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/watch/gameserver", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Body != nil { // an upgraded connection's answer has none
		defer resp.Body.Close()
	}
	defer conn.CloseNow()
	state := func() string {
		t.Helper()
		typ, raw, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Result struct {
				Status struct{ State string } `json:"status"`
			} `json:"result"`
		}
		if typ != websocket.MessageText || json.Unmarshal(raw, &m) != nil {
			t.Fatalf("message %v %s: want a text message {\"result\": GameServer}", typ, raw)
		}
		return m.Result.Status.State
	}
	if got := state(); got != "Ready" {
		t.Fatalf("first message: state %q, want Ready at once", got)
	}
	ops.mu.Lock()
	ops.state = "ALLOCATED"
	ops.mu.Unlock()
	ops.changes <- struct{}{}
	if got := state(); got != "Allocated" {
		t.Fatalf("after the change: state %q, want Allocated", got)
	}
	if err := conn.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
}
