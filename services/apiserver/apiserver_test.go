package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/oidcauth"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stack is API replicas over real NATS JetStream and PostgreSQL (the
// shared testkit stack), with a projector that a test may start late, and
// the helpers of this package's tests.
type stack struct {
	*kit.Stack
	t         testing.TB
	base      string
	bases     []string // every replica's REST base URL; base is bases[0]
	grpcAddrs []string // every replica's gRPC address
	tracer    trace.TracerProvider
	key       string
}

type stackOptions struct {
	tracer        trace.TracerProvider
	readWait      time.Duration
	lateProjector bool // leave the projector stopped until startProjector
	replicas      int  // API replicas over the same NATS and PostgreSQL; default 1
	keys          *apikeys.Keys
	key           string        // the API key the helpers call with, when keys are set
	maxBody       int64         // the REST body limit; default the API's
	readTimeout   time.Duration // the REST read timeout; default the API's
	limits        apiserver.Limits
	authRecheck   time.Duration
	protect       bool // /metrics and /openapi.json need a key
	oidc          *oidcauth.Verifier
	jetStream     bool   // replicas get the stack's JetStream: heartbeats, the replica set
	installation  string // Options.Installation
	// archive, when set, is the first replica's segment store (the others
	// read no archive).
	archive archive.SegmentStore
}

func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	replica := 0
	opts := []kit.Option{kit.WithAPI(o.replicas, func(k *kit.Stack, a *apiserver.Options) {
		if replica++; replica == 1 && o.archive != nil {
			a.Archive = o.archive
		}
		if o.jetStream {
			a.JetStream = k.JS
		}
		a.ReadWait, a.TracerProvider, a.Keys, a.MaxBodyBytes = o.readWait, o.tracer, o.keys, o.maxBody
		a.ReadRequestTimeout, a.Installation = o.readTimeout, o.installation
		a.Limits, a.AuthRecheck = o.limits, o.authRecheck
		a.MetricsNeedKey, a.OpenAPINeedsKey, a.OIDC = o.protect, o.protect, o.oidc
		if o.protect {
			a.MetricsHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("# metrics\n")) })
		}
	})}
	if !o.lateProjector {
		opts = append(opts, kit.WithProjector(func(p *postgres.ProjectorOptions) { p.TracerProvider = o.tracer }))
	}
	k := kit.New(t, opts...)
	s := &stack{Stack: k, t: t, tracer: o.tracer, key: o.key}
	for _, api := range k.APIs {
		s.bases = append(s.bases, "http://"+api.HTTPAddr())
		s.grpcAddrs = append(s.grpcAddrs, api.GRPCAddr())
	}
	s.base = s.bases[0]
	return s
}

// run runs a component until the test ends.
func (s *stack) run(f func(context.Context) error) { s.Go("component", f) }

// startProjector starts the projector a lateProjector stack left stopped.
func (s *stack) startProjector() {
	s.StartProjector(func(p *postgres.ProjectorOptions) { p.TracerProvider = s.tracer })
}

// response is a decoded REST reply.
type response struct {
	status int
	body   map[string]any
}

func (s *stack) do(method, path string, body any) response {
	s.t.Helper()
	return s.doAt(s.base, method, path, body)
}

// doAt calls one replica's REST API.
func (s *stack) doAt(base, method, path string, body any) response {
	s.t.Helper()
	return s.doWithKey(base, s.key, method, path, body)
}

// doWithKey calls one replica's REST API with an API key ("": none).
func (s *stack) doWithKey(base, key, method, path string, body any) response {
	s.t.Helper()
	var raw []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		raw = b
	}
	return s.doRaw(base, key, method, path, raw)
}

// doRaw calls one replica's REST API with a body as it is (nil: none) and
// an API key ("": none).
func (s *stack) doRaw(base, key, method, path string, body []byte) response {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out := response{status: resp.StatusCode, body: map[string]any{}}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		s.t.Fatalf("%s %s: status %d, body not JSON: %s", method, path, resp.StatusCode, raw)
	}
	return out
}

func (r response) str(key string) string {
	v, _ := r.body[key].(string)
	return v
}

func (r response) num(key string) float64 {
	v, _ := r.body[key].(float64)
	return v
}

// reason returns the ErrorInfo reason of an error reply.
func (r response) reason() string {
	details, _ := r.body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		if m["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" {
			v, _ := m["reason"].(string)
			return v
		}
	}
	return ""
}

// fieldViolation returns the first BadRequest field of an error reply.
func (r response) fieldViolation() string {
	details, _ := r.body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		if m["@type"] == "type.googleapis.com/google.rpc.BadRequest" {
			vs, _ := m["fieldViolations"].([]any)
			if len(vs) > 0 {
				v, _ := vs[0].(map[string]any)
				f, _ := v["field"].(string)
				return f
			}
		}
	}
	return ""
}

func arenaFleet(replicas int) map[string]any {
	return map[string]any{
		"replicas": replicas,
		"template": map[string]any{
			"command": "/usr/local/bin/mygame", "args": []string{"--port", "${TETHER_PORT_GAME}"},
			"env": map[string]string{"MODE": "ranked"}, "ports": []any{map[string]any{"name": "game", "protocol": "UDP"}},
		},
		"health":                    map[string]any{"initialDelaySeconds": 5, "periodSeconds": 5, "failureThreshold": 3},
		"sdkDisconnectGraceSeconds": 30,
		"playerSessions":            map[string]any{"maxPlayers": 16, "reservationTimeoutSeconds": 60, "reconnectWindowSeconds": 120},
		"scheduling":                "PACKED",
		"labels":                    map[string]string{"mode": "ranked"},
	}
}

func TestFleetRoundTripOverREST(t *testing.T) {
	s := newStack(t, stackOptions{})

	created := s.do("POST", "/v1/fleets?fleetId=arena", arenaFleet(3))
	if created.status != http.StatusOK {
		t.Fatalf("create: status %d: %v", created.status, created.body)
	}
	if created.str("name") != "fleets/arena" || created.num("replicas") != 3 || created.str("scheduling") != "PACKED" {
		t.Fatalf("create returned %v", created.body)
	}
	etag := created.str("etag")
	if etag == "" || created.str("sequence") == "" {
		t.Fatalf("create returned no etag or sequence: %v", created.body)
	}

	patched := s.do("PATCH", "/v1/fleets/arena?updateMask=replicas", map[string]any{"replicas": 5, "etag": etag})
	if patched.status != http.StatusOK || patched.num("replicas") != 5 {
		t.Fatalf("patch: status %d: %v", patched.status, patched.body)
	}
	if patched.str("etag") == etag {
		t.Fatalf("patch kept the etag %q", etag)
	}
	health, _ := patched.body["health"].(map[string]any)
	if health["periodSeconds"] != float64(5) {
		t.Fatalf("patch of replicas changed other fields: %v", patched.body)
	}

	stale := s.do("PATCH", "/v1/fleets/arena?updateMask=replicas", map[string]any{"replicas": 7, "etag": etag})
	if stale.status != http.StatusConflict || stale.body["code"] != float64(10) || stale.reason() != "VERSION_CONFLICT" {
		t.Fatalf("stale etag: want 409 ABORTED VERSION_CONFLICT, got %d %v", stale.status, stale.body)
	}

	got := s.do("GET", "/v1/fleets/arena?minSequence="+patched.str("sequence"), nil)
	if got.status != http.StatusOK || got.num("replicas") != 5 || got.str("etag") != patched.str("etag") {
		t.Fatalf("get: status %d: %v", got.status, got.body)
	}
	tmpl, _ := got.body["template"].(map[string]any)
	if tmpl["command"] != "/usr/local/bin/mygame" {
		t.Fatalf("get lost the template: %v", got.body)
	}
	labels, _ := got.body["labels"].(map[string]any)
	if labels["mode"] != "ranked" {
		t.Fatalf("get lost the labels: %v", got.body)
	}

	// The ready timeout: unset it reads 0 (the default, 300 s, applies
	// where it is enforced); set, it is kept.
	if h, _ := got.body["health"].(map[string]any); h["readyTimeoutSeconds"] != float64(0) {
		t.Fatalf("an unset ready timeout reads %v, want 0", h["readyTimeoutSeconds"])
	}
	timed := s.do("PATCH", "/v1/fleets/arena?updateMask=health.ready_timeout_seconds",
		map[string]any{"health": map[string]any{"readyTimeoutSeconds": 900}})
	if h, _ := timed.body["health"].(map[string]any); timed.status != http.StatusOK || h["readyTimeoutSeconds"] != float64(900) || h["periodSeconds"] != float64(5) {
		t.Fatalf("patch of the ready timeout: status %d: %v", timed.status, timed.body)
	}
	bad := s.do("PATCH", "/v1/fleets/arena?updateMask=health.ready_timeout_seconds",
		map[string]any{"health": map[string]any{"readyTimeoutSeconds": -1}})
	if bad.status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(bad.body), "ready_timeout_seconds") {
		t.Fatalf("a negative ready timeout: want 400 naming the field, got %d %v", bad.status, bad.body)
	}
}

func TestListFleetsPages(t *testing.T) {
	s := newStack(t, stackOptions{})
	var want []string
	var last string
	for i := range 7 {
		id := fmt.Sprintf("f%d", i)
		r := s.do("POST", "/v1/fleets?fleetId="+id, arenaFleet(1))
		if r.status != http.StatusOK {
			t.Fatalf("create %s: %d %v", id, r.status, r.body)
		}
		want = append(want, "fleets/"+id)
		last = r.str("sequence")
	}
	var got []string
	token := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("paging does not end")
		}
		r := s.do("GET", "/v1/fleets?pageSize=3&minSequence="+last+"&pageToken="+token, nil)
		if r.status != http.StatusOK {
			t.Fatalf("list: %d %v", r.status, r.body)
		}
		fleets, _ := r.body["fleets"].([]any)
		if len(fleets) > 3 {
			t.Fatalf("page of %d > pageSize 3", len(fleets))
		}
		for _, f := range fleets {
			got = append(got, f.(map[string]any)["name"].(string))
		}
		token = r.str("nextPageToken")
		if token == "" {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged names = %v, want %v", got, want)
	}
	bad := s.do("GET", "/v1/fleets?pageToken=garbage", nil)
	if bad.status != http.StatusBadRequest || bad.fieldViolation() != "page_token" {
		t.Fatalf("bad token: %d %v", bad.status, bad.body)
	}
}

func TestBadInputGetsClearErrors(t *testing.T) {
	s := newStack(t, stackOptions{})
	if r := s.do("POST", "/v1/fleets?fleetId=arena", arenaFleet(1)); r.status != http.StatusOK {
		t.Fatalf("create: %d %v", r.status, r.body)
	}
	negative := arenaFleet(-1)
	noCommand := arenaFleet(1)
	noCommand["template"] = map[string]any{}
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		reason, field      string
	}{
		{"invalid fleet id", "POST", "/v1/fleets?fleetId=Bad_Id", arenaFleet(1), 400, "INVALID_ARGUMENT", "fleet_id"},
		{"negative replicas", "POST", "/v1/fleets?fleetId=neg", negative, 400, "INVALID_ARGUMENT", "fleet.replicas"},
		{"missing command", "POST", "/v1/fleets?fleetId=nocmd", noCommand, 400, "INVALID_ARGUMENT", "fleet.template.command"},
		{"duplicate fleet", "POST", "/v1/fleets?fleetId=arena", arenaFleet(1), 409, "ALREADY_EXISTS", ""},
		{"unknown fleet", "GET", "/v1/fleets/nope", nil, 404, "NOT_FOUND", ""},
		{"patch unknown fleet", "PATCH", "/v1/fleets/nope?updateMask=replicas", map[string]any{"replicas": 2}, 404, "NOT_FOUND", ""},
		{"patch negative replicas", "PATCH", "/v1/fleets/arena?updateMask=replicas", map[string]any{"replicas": -2}, 400, "INVALID_ARGUMENT", "fleet.replicas"},
		{"patch output-only field", "PATCH", "/v1/fleets/arena?updateMask=status", map[string]any{}, 400, "INVALID_ARGUMENT", "update_mask"},
		{"patch unknown field", "PATCH", "/v1/fleets/arena?updateMask=colour", map[string]any{}, 400, "INVALID_ARGUMENT", "update_mask"},
		{"wrong etag on delete", "DELETE", "/v1/fleets/arena?etag=999", nil, 409, "VERSION_CONFLICT", ""},
		{"bad filter", "GET", "/v1/fleets/arena/gameServers?filter=colour%3Dred", nil, 400, "INVALID_ARGUMENT", "filter"},
		{"bad state in filter", "GET", "/v1/fleets/arena/gameServers?filter=state%3DASLEEP", nil, 400, "INVALID_ARGUMENT", "filter"},
		{"ended not true or false", "GET", "/v1/fleets/arena/gameServers?filter=ended%3Dyes", nil, 400, "INVALID_ARGUMENT", "filter"},
		{"ended with a state", "GET", "/v1/fleets/arena/gameServers?filter=ended%3Dfalse%20AND%20state%3DREADY", nil, 400, "INVALID_ARGUMENT", "filter"},
		{"bad id in filter", "GET", "/v1/fleets/-/gameServers?filter=id%3DBad_Id", nil, 400, "INVALID_ARGUMENT", "filter"},
		{"unknown game server", "GET", "/v1/fleets/arena/gameServers/gs-nope", nil, 404, "NOT_FOUND", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(tc.method, tc.path, tc.body)
			if r.status != tc.status || r.reason() != tc.reason {
				t.Fatalf("got %d %q, want %d %q: %v", r.status, r.reason(), tc.status, tc.reason, r.body)
			}
			if tc.field != "" && r.fieldViolation() != tc.field {
				t.Fatalf("field violation %q, want %q: %v", r.fieldViolation(), tc.field, r.body)
			}
		})
	}
}

func TestReadWaitsForMinimumSequence(t *testing.T) {
	s := newStack(t, stackOptions{readWait: 300 * time.Millisecond, lateProjector: true})
	created := s.do("POST", "/v1/fleets?fleetId=arena", arenaFleet(2))
	if created.status != http.StatusOK {
		t.Fatalf("create: %d %v", created.status, created.body)
	}
	seq := created.str("sequence")

	// The projector is not running: the views cannot be that fresh, and the
	// read must say so rather than answer from stale views.
	behind := s.do("GET", "/v1/fleets/arena?minSequence="+seq, nil)
	if behind.status != http.StatusServiceUnavailable || behind.reason() != "PROJECTION_BEHIND" {
		t.Fatalf("read ahead of the views: want 503 PROJECTION_BEHIND, got %d %v", behind.status, behind.body)
	}

	// Once started, the projector catches up: until then (longer than the
	// 300 ms wait on a busy machine) the read still says 503, rightly.
	s.startProjector()
	var fresh response
	wait.For(t, 20*time.Second, "the views at the create's sequence", func() bool {
		fresh = s.do("GET", "/v1/fleets/arena?minSequence="+seq, nil)
		return fresh.status != http.StatusServiceUnavailable || fresh.reason() != "PROJECTION_BEHIND"
	})
	if fresh.status != http.StatusOK || fresh.str("name") != "fleets/arena" || fresh.num("replicas") != 2 {
		t.Fatalf("read with minSequence after the projector caught up: %d %v", fresh.status, fresh.body)
	}
	if got, want := mustInt(t, fresh.str("sequence")), mustInt(t, seq); got < want {
		t.Fatalf("read returned sequence %s older than %s", fresh.str("sequence"), seq)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("not an integer: %q", s)
	}
	return n
}

func TestCreateIsIdempotentByRequestID(t *testing.T) {
	s := newStack(t, stackOptions{})
	body := arenaFleet(2)
	first := s.do("POST", "/v1/fleets?fleetId=arena&requestId=req-1", body)
	second := s.do("POST", "/v1/fleets?fleetId=arena&requestId=req-1", body)
	if first.status != http.StatusOK || second.status != http.StatusOK {
		t.Fatalf("create twice with one request id: %d %v / %d %v", first.status, first.body, second.status, second.body)
	}
	if first.str("sequence") != second.str("sequence") || first.str("etag") != second.str("etag") {
		t.Fatalf("retry returned another result: %v vs %v", first.body, second.body)
	}
	history, err := s.Store.History(s.Ctx, events.MustSubject("fleets/arena"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != 1 {
		t.Fatalf("stream holds %d events for the fleet, want 1", len(history))
	}
	other := s.do("POST", "/v1/fleets?fleetId=arena&requestId=req-2", body)
	if other.status != http.StatusConflict || other.reason() != "ALREADY_EXISTS" {
		t.Fatalf("another request id: want ALREADY_EXISTS, got %d %v", other.status, other.body)
	}
}

// The trace context of the request that appended an event travels with the
// event, and the projector's batch span links to it.
func TestTraceContextTravelsWithTheEvent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := newStack(t, stackOptions{tracer: tp})
	created := s.do("POST", "/v1/fleets?fleetId=traced", arenaFleet(1))
	if created.status != http.StatusOK {
		t.Fatalf("create: %d %v", created.status, created.body)
	}
	hist, err := s.Store.History(s.Ctx, events.MustSubject("fleets/traced"), 0)
	if err != nil || len(hist) != 1 {
		t.Fatalf("history %v, %v", hist, err)
	}
	tp0 := hist[0].TraceParent
	if tp0 == "" {
		t.Fatal("the event carries no traceparent")
	}
	// The server span ends as its handler returns, which may be just after
	// the gateway has answered: wait for it rather than read it at once.
	var serverTrace trace.TraceID
	wait.For(t, 10*time.Second, "the CreateFleet server span to end", func() bool {
		for _, sp := range rec.Ended() {
			if sp.SpanKind() == trace.SpanKindServer && strings.Contains(sp.Name(), "CreateFleet") {
				serverTrace = sp.SpanContext().TraceID()
			}
		}
		return serverTrace.IsValid()
	})
	if !strings.Contains(tp0, serverTrace.String()) {
		t.Fatalf("traceparent %q is not the CreateFleet server span's trace %s", tp0, serverTrace)
	}
	wait.For(t, 10*time.Second, "a projector batch span linked to the request", func() bool {
		for _, sp := range rec.Ended() {
			if sp.Name() != "projector.batch" {
				continue
			}
			for _, l := range sp.Links() {
				if l.SpanContext.TraceID() == serverTrace {
					return true
				}
			}
		}
		return false
	})
}

// An allocation's own steps are spans under its server span: the
// candidates it took from (allocation.candidates) and the fleet's policy
// read on a cache miss (allocation.policy), beside its appends' spans; so
// a trace says where a slow allocation waited.
func TestAllocationStepsAreSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := newStack(t, stackOptions{tracer: tp, jetStream: true})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 2, 1, nil)
	if r := s.do(http.MethodPost, "/v1/fleets/arena/gameServers:allocate", map[string]any{"requestId": "traced"}); r.status != http.StatusOK {
		t.Fatalf("allocate: %d %v", r.status, r.body)
	}
	want := []string{"allocation.candidates", "allocation.policy"} // the appends' spans are the store's (natsjs)
	wait.For(t, 10*time.Second, fmt.Sprintf("spans %v under the allocation's server span", want), func() bool {
		var server trace.SpanContext
		for _, sp := range rec.Ended() {
			if sp.SpanKind() == trace.SpanKindServer && strings.HasSuffix(sp.Name(), "AllocateGameServer") {
				server = sp.SpanContext()
			}
		}
		if !server.IsValid() {
			return false
		}
		seen := map[string]bool{}
		for _, sp := range rec.Ended() {
			if sp.SpanContext().TraceID() == server.TraceID() && sp.Parent().SpanID() == server.SpanID() {
				seen[sp.Name()] = true
			}
		}
		for _, w := range want {
			if !seen[w] {
				return false
			}
		}
		return true
	})
}
