package apiserver_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/oidcauth"
	"github.com/tetherhq/tether/services/testkit/testoidc"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// roleKeys writes a keys file with one key per role (plus an expired
// admin key) and returns the loaded keys and the secrets by role.
func roleKeys(t *testing.T) (*apikeys.Keys, map[apikeys.Role]string, string) {
	t.Helper()
	secrets := map[apikeys.Role]string{}
	var lines []string
	for _, r := range apikeys.Roles {
		secret, line, err := apikeys.New("test-"+string(r), r, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		secrets[r], lines = secret, append(lines, line)
	}
	expired, line, err := apikeys.New("test-expired", apikeys.Admin, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte(strings.Join(append(lines, line), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return keys, secrets, expired
}

// With API keys, every REST call needs one, and the key's role decides
// what it may do: no key or an expired one is 401, a role without the
// permission 403, with the reason in the ErrorInfo.
func TestRESTCallsAreAuthenticatedAndAuthorised(t *testing.T) {
	keys, key, expired := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys, key: key[apikeys.Admin]})
	call := func(k, method, path string, body any) response {
		t.Helper()
		return s.doWithKey(s.base, k, method, path, body)
	}

	for _, tc := range []struct{ name, key, reason string }{
		{"no key", "", apiserver.ReasonUnauthenticated},
		{"an unknown key", "tether_not-a-key", apiserver.ReasonUnauthenticated},
		{"an expired key", expired, apiserver.ReasonUnauthenticated},
	} {
		if r := call(tc.key, http.MethodGet, "/v1/fleets", nil); r.status != http.StatusUnauthorized || r.reason() != tc.reason {
			t.Errorf("%s: %d %s, want 401 %s", tc.name, r.status, r.reason(), tc.reason)
		}
	}

	// Without a key nothing is read: 512 MB announced, none sent, answered.
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /v1/fleets?fleetId=x HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 512<<20); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body announced without a key: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a body announced without a key: %d, want 401", resp.StatusCode)
	}

	if r := call(key[apikeys.Viewer], http.MethodGet, "/v1/fleets", nil); r.status != http.StatusOK {
		t.Errorf("viewer lists fleets: %d %v", r.status, r.body)
	}
	if r := call(key[apikeys.Viewer], http.MethodPost, "/v1/fleets?fleetId=arena", fleetWithoutReplicas()); r.status != http.StatusForbidden || r.reason() != apiserver.ReasonPermissionDenied {
		t.Errorf("viewer creates a fleet: %d %s, want 403 %s", r.status, r.reason(), apiserver.ReasonPermissionDenied)
	}
	if r := call(key[apikeys.Operator], http.MethodPost, "/v1/fleets?fleetId=arena", fleetWithoutReplicas()); r.status != http.StatusOK {
		t.Fatalf("operator creates a fleet: %d %v", r.status, r.body)
	}
	s.seedReady("arena", 1, 1, nil)
	if r := call(key[apikeys.Matchmaker], http.MethodPost, "/v1/fleets/arena/gameServers:allocate", map[string]any{"requestId": "auth-1"}); r.status != http.StatusOK {
		t.Errorf("matchmaker allocates: %d %v", r.status, r.body)
	}
	if r := call(key[apikeys.Matchmaker], http.MethodDelete, "/v1/fleets/arena", nil); r.status != http.StatusForbidden {
		t.Errorf("matchmaker deletes a fleet: %d %v, want 403", r.status, r.body)
	}
	if r := call(key[apikeys.Viewer], http.MethodGet, "/v1/fleets/arena/events", nil); r.status != http.StatusForbidden {
		t.Errorf("viewer reads history: %d, want 403", r.status)
	}
	if r := call(key[apikeys.Auditor], http.MethodGet, "/v1/fleets/arena/events", nil); r.status != http.StatusOK {
		t.Errorf("auditor reads history: %d %v", r.status, r.body)
	}
	// Who did what: each event names the caller as its actor.
	for _, tc := range []struct{ path, typ, actor string }{
		{"/v1/fleets/arena/events", "FleetCreated", "test-operator (operator, api-key)"},
		{"/v1/fleets/arena/gameServers/gs-000/events", "GameServerAllocated", "test-matchmaker (matchmaker, api-key)"},
	} {
		r := call(key[apikeys.Auditor], http.MethodGet, tc.path, nil)
		evs, _ := r.body["events"].([]any)
		found := false
		for _, e := range evs {
			m, _ := e.(map[string]any)
			if m["type"] == tc.typ {
				found = true
				if m["actor"] != tc.actor {
					t.Errorf("%s's actor %v, want %q", tc.typ, m["actor"], tc.actor)
				}
			}
		}
		if !found {
			t.Errorf("no %s in %s: %d %v", tc.typ, tc.path, r.status, r.body)
		}
	}
	if r := call(key[apikeys.Admin], http.MethodDelete, "/v1/fleets/arena", nil); r.status != http.StatusOK {
		t.Errorf("admin deletes the fleet: %d %v", r.status, r.body)
	}
	// Open to all, as before.
	resp, err = http.Get(s.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz without a key: %d", resp.StatusCode)
	}
}

// gRPC calls take the key in the authorization metadata, unary and
// streaming alike.
func TestGRPCCallsAreAuthenticatedAndAuthorised(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys})
	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fleets := tetherv1.NewFleetServiceClient(conn)
	as := func(k string) context.Context {
		ctx, cancel := context.WithTimeout(s.Ctx, 10*time.Second)
		t.Cleanup(cancel)
		if k == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+k)
	}
	if _, err := fleets.ListFleets(as(""), &tetherv1.ListFleetsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no key: %v, want UNAUTHENTICATED", err)
	}
	if _, err := fleets.ListFleets(as(key[apikeys.Auditor]), &tetherv1.ListFleetsRequest{}); err != nil {
		t.Errorf("auditor lists fleets: %v", err)
	}
	if _, err := fleets.DeleteFleet(as(key[apikeys.Auditor]), &tetherv1.DeleteFleetRequest{Name: "fleets/none"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("auditor deletes a fleet: %v, want PERMISSION_DENIED", err)
	}
	history := tetherv1.NewHistoryServiceClient(conn)
	for role, want := range map[apikeys.Role]codes.Code{apikeys.Matchmaker: codes.PermissionDenied, apikeys.Viewer: codes.OK} {
		stream, err := history.WatchEvents(as(key[role]), &tetherv1.WatchEventsRequest{})
		if err == nil {
			_, err = stream.Header() // the interceptor's answer arrives with the stream's first reply
			if err == nil && want != codes.OK {
				_, err = stream.Recv()
			}
		}
		if status.Code(err) != want {
			t.Errorf("%s watches events: %v, want %s", role, err, want)
		}
	}
}

// A role that may not call a method is refused it (403) whatever its body,
// before the body is looked at (issue 39, item 5): the matchmaker, viewer
// and auditor got 400 on CreateGameServer for an unknown field. A role
// that may call it is told what is wrong with its body, in the terms of the
// request it sent: a standalone server's unknown field is not "Fleet has no
// such field".
func TestPermissionIsCheckedBeforeTheBody(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys, key: key[apikeys.Admin]})
	s.createFleet("arena", fleetWithoutReplicas())
	const standalone = "/v1/fleets/standalone/gameServers?gameServerId=s1"
	bodies := []struct{ name, method, path, body string }{
		{"an unknown field", "POST", standalone, `{"template":{"command":"/bin/game"},"replica":3}`},
		{"an unknown nested field", "POST", standalone, `{"template":{"comand":"/bin/game"}}`},
		{"an unknown enum name", "POST", standalone, `{"template":{"command":"/bin/game","ports":[{"name":"game","protocol":"SCTP"}]}}`},
		{"a value of the wrong type", "POST", standalone, `{"template":{"command":"/bin/game","args":"x"}}`},
		{"no JSON", "POST", standalone, `{"template":`},
		{"a fleet with an unknown field", "POST", "/v1/fleets?fleetId=f1", `{"replica":3}`},
		{"a history query of the wrong type", "GET", "/v1/fleets/arena/events?pageSize=ten", ""},
	}
	for _, role := range []apikeys.Role{apikeys.Matchmaker, apikeys.Viewer, apikeys.Auditor} {
		for _, b := range bodies {
			if b.method == "GET" && role == apikeys.Auditor {
				continue // the auditor reads history
			}
			t.Run(string(role)+" "+b.name, func(t *testing.T) {
				var body []byte
				if b.body != "" {
					body = []byte(b.body)
				}
				r := s.doRaw(s.base, key[role], b.method, b.path, body)
				if r.status != http.StatusForbidden || r.reason() != apiserver.ReasonPermissionDenied {
					t.Fatalf("got %d %s, want 403 %s: %v", r.status, r.reason(), apiserver.ReasonPermissionDenied, r.body)
				}
			})
		}
	}
	for _, tc := range []struct{ name, path, body, field, says string }{
		{"a standalone server's field", standalone, `{"template":{"command":"/bin/game"},"replica":3}`, "spec.replica",
			`unknown field "replica": CreateGameServerRequest.spec has no such field`},
		{"a standalone server's template field", standalone, `{"template":{"comand":"/bin/game"}}`, "spec.template.comand",
			`unknown field "comand": CreateGameServerRequest.spec.template has no such field`},
		{"a fleet's field", "/v1/fleets?fleetId=f1", `{"replica":3}`, "fleet.replica",
			`unknown field "replica": CreateFleetRequest.fleet has no such field`},
		{"an allocation's field", "/v1/fleets/arena/gameServers:allocate", `{"player":[]}`, "player",
			`unknown field "player": AllocateGameServerRequest has no such field`},
	} {
		t.Run("admin "+tc.name, func(t *testing.T) {
			r := s.doRaw(s.base, key[apikeys.Admin], "POST", tc.path, []byte(tc.body))
			if r.status != http.StatusBadRequest || r.fieldViolation() != tc.field || !strings.Contains(r.str("message"), tc.says) {
				t.Fatalf("got %d field %q %q, want 400 field %q saying %q", r.status, r.fieldViolation(), r.str("message"), tc.field, tc.says)
			}
		})
	}
}

// A key is rotated without a restart: a key added to the file works within
// seconds, and the one removed is refused.
func TestKeyRotationWithoutARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	old, err := apikeys.Add(file, "matchmaker-old", apikeys.Matchmaker, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{keys: keys, key: old})
	status := func(key string) int {
		t.Helper()
		return s.doWithKey(s.base, key, http.MethodGet, "/v1/fleets/-/gameServers", nil).status
	}
	if code := status(old); code != http.StatusOK {
		t.Fatalf("the old key: %d", code)
	}
	fresh, err := apikeys.Add(file, "matchmaker-new", apikeys.Matchmaker, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the added key to be taken", func() bool { return status(fresh) == http.StatusOK })
	// Revoke the old one: its line leaves the file (replaced whole).
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "matchmaker-old ") {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(file+".new", []byte(strings.Join(kept, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the revoked key to be refused", func() bool { return status(old) == http.StatusUnauthorized })
	if code := status(fresh); code != http.StatusOK {
		t.Errorf("the new key after the old one's revocation: %d", code)
	}
}

// /metrics and /openapi.json may be made to need a key; /healthz stays
// open, for load balancers.
func TestMetricsAndOpenAPICanNeedAKey(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys, protect: true})
	get := func(path, k string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if k != "" {
			req.Header.Set("Authorization", "Bearer "+k)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/metrics", "/openapi.json"} {
		if code := get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without a key: %d, want 401", path, code)
		}
		if code := get(path, key[apikeys.Viewer]); code != http.StatusOK {
			t.Errorf("%s with a key: %d", path, code)
		}
	}
	if code := get("/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz without a key: %d", code)
	}
}

// With OIDC, a token of the studio's identity provider authenticates its
// caller with the role its claims give, and the events it causes name the
// person.
func TestOIDCTokensAuthenticate(t *testing.T) {
	idp := testoidc.New(t)
	v, err := oidcauth.New(context.Background(), oidcauth.Options{Issuer: testoidc.Issuer, Audience: "tether", JWKSFile: idp.JWKSFile})
	if err != nil {
		t.Fatal(err)
	}
	operator := idp.Token("tether", time.Hour, map[string]any{"email": "alice@example.com", "tether_role": "operator"})
	viewer := idp.Token("tether", time.Hour, map[string]any{"email": "bob@example.com", "tether_role": "viewer"})
	s := newStack(t, stackOptions{oidc: v, key: operator})
	if r := s.doWithKey(s.base, viewer, http.MethodGet, "/v1/fleets", nil); r.status != http.StatusOK {
		t.Errorf("a viewer lists fleets: %d %v", r.status, r.body)
	}
	if r := s.doWithKey(s.base, viewer, http.MethodPost, "/v1/fleets?fleetId=arena", arenaFleet(0)); r.status != http.StatusForbidden {
		t.Errorf("a viewer creates a fleet: %d, want 403", r.status)
	}
	if r := s.doWithKey(s.base, idp.Token("grafana", time.Hour, map[string]any{"tether_role": "admin"}), http.MethodGet, "/v1/fleets", nil); r.status != http.StatusUnauthorized {
		t.Errorf("a token for another audience: %d, want 401", r.status)
	}
	s.createFleet("arena", arenaFleet(0))
	r := s.do(http.MethodGet, "/v1/fleets/arena/events", nil)
	evs, _ := r.body["events"].([]any)
	if r.status != http.StatusOK || len(evs) == 0 {
		t.Fatalf("history: %d %v", r.status, r.body)
	}
	if actor := evs[0].(map[string]any)["actor"]; actor != "alice@example.com (operator, oidc)" {
		t.Errorf("the fleet's creation names %v", actor)
	}
}

// A request id is its caller's: another principal that replays it, body
// and all, is refused instead of given the first caller's allocation; the
// first caller's retry still gets its own answer.
func TestRequestIDsAreScopedToTheirCaller(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys, key: key[apikeys.Admin]})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 2, 1, nil)
	body := map[string]any{"requestId": "match-7", "players": []any{map[string]any{"playerId": "p1"}}}
	const path = "/v1/fleets/arena/gameServers:allocate"
	first := s.doWithKey(s.base, key[apikeys.Matchmaker], http.MethodPost, path, body)
	if first.status != http.StatusOK {
		t.Fatalf("allocate: %d %v", first.status, first.body)
	}
	other := s.doWithKey(s.base, key[apikeys.Admin], http.MethodPost, path, body)
	if other.status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(other.body), apiserver.ReasonRequestIDReused) {
		t.Errorf("another caller's replay: %d %v, want 400 %s", other.status, other.body, apiserver.ReasonRequestIDReused)
	}
	retry := s.doWithKey(s.base, key[apikeys.Matchmaker], http.MethodPost, path, body)
	name := func(r response) any { gs, _ := r.body["gameSession"].(map[string]any); return gs["name"] }
	if retry.status != http.StatusOK || name(retry) == nil || name(retry) != name(first) {
		t.Errorf("the caller's retry: %d, game session %v, want its first answer's, %v", retry.status, name(retry), name(first))
	}
}
