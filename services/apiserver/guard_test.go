package apiserver_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/apiserver"
)

// rawResponse is a REST answer to a hand-made request.
type rawResponse struct {
	status int
	reason string
}

// raw sends a hand-made request and decodes the API's error shape.
func raw(t *testing.T, req *http.Request) rawResponse {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
	}
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("%s %s: %d, body not the API's error shape: %s", req.Method, req.URL.Path, resp.StatusCode, b)
		}
	}
	out := rawResponse{status: resp.StatusCode}
	if len(body.Details) > 0 {
		out.reason = body.Details[0].Reason
	}
	return out
}

// The REST layer refuses, before any work: a body that is not JSON (415,
// so a browser page's cross-site text/plain POST cannot create a fleet),
// a body over the limit (413, not 429: it is no reason to retry), a
// method the path does not take (405, not 501) and a path the API does
// not have (404), each with its reason.
func TestRESTRefusesBadRequestsBeforeAnyWork(t *testing.T) {
	s := newStack(t, stackOptions{})
	fleet, err := json.Marshal(fleetWithoutReplicas())
	if err != nil {
		t.Fatal(err)
	}
	req := func(method, path, contentType string, body io.Reader) *http.Request {
		r, err := http.NewRequest(method, s.base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		return r
	}
	withHeader := func(r *http.Request, k, v string) *http.Request { r.Header.Set(k, v); return r }
	big := `{"pad":"` + strings.Repeat("x", apiserver.DefaultMaxBodyBytes) + `"}`
	chunked := req(http.MethodPost, "/v1/fleets?fleetId=big2", "application/json", io.MultiReader(strings.NewReader(big)))
	chunked.ContentLength = -1 // sent chunked: the limit holds without a length
	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
		reason string
	}{
		{"text/plain", req(http.MethodPost, "/v1/fleets?fleetId=a1", "text/plain", bytes.NewReader(fleet)), http.StatusUnsupportedMediaType, apiserver.ReasonUnsupportedMediaType},
		{"form", req(http.MethodPost, "/v1/fleets?fleetId=a2", "application/x-www-form-urlencoded", bytes.NewReader(fleet)), http.StatusUnsupportedMediaType, apiserver.ReasonUnsupportedMediaType},
		{"no content type", req(http.MethodPost, "/v1/fleets?fleetId=a3", "", bytes.NewReader(fleet)), http.StatusUnsupportedMediaType, apiserver.ReasonUnsupportedMediaType},
		{"too large", req(http.MethodPost, "/v1/fleets?fleetId=big", "application/json", strings.NewReader(big)), http.StatusRequestEntityTooLarge, apiserver.ReasonBodyTooLarge},
		{"too large, chunked", chunked, http.StatusRequestEntityTooLarge, apiserver.ReasonBodyTooLarge},
		{"wrong method", req(http.MethodPut, "/v1/fleets", "", nil), http.StatusMethodNotAllowed, apiserver.ReasonMethodNotAllowed},
		{"unknown path", req(http.MethodGet, "/v1/nothing/here", "", nil), http.StatusNotFound, apiserver.ReasonNotFound},
		{"a page of another site, empty body", withHeader(req(http.MethodPost, "/v1/fleets/-/gameServers:allocate", "", nil), "Origin", "https://evil.example"),
			http.StatusForbidden, apiserver.ReasonCrossOrigin},
		{"a page of another site, by Sec-Fetch-Site", withHeader(req(http.MethodPost, "/v1/fleets?fleetId=a4", "application/json", bytes.NewReader(fleet)), "Sec-Fetch-Site", "cross-site"),
			http.StatusForbidden, apiserver.ReasonCrossOrigin},
		{"a page of the API's own origin", withHeader(req(http.MethodPost, "/v1/fleets?fleetId=same", "application/json", bytes.NewReader(fleet)), "Origin", s.base),
			http.StatusOK, ""},
		{"a read from a page of another site", withHeader(req(http.MethodGet, "/v1/fleets", "", nil), "Origin", "https://evil.example"), http.StatusOK, ""},
		{"JSON with a charset", req(http.MethodPost, "/v1/fleets?fleetId=ok", "application/json; charset=utf-8", bytes.NewReader(fleet)), http.StatusOK, ""},
	} {
		if got := raw(t, tc.req); got.status != tc.status || got.reason != tc.reason {
			t.Errorf("%s: %d %q, want %d %q", tc.name, got.status, got.reason, tc.status, tc.reason)
		}
	}
	if r := s.do(http.MethodGet, "/v1/fleets/a1", nil); r.status != http.StatusNotFound {
		t.Errorf("the text/plain POST created a fleet: %d %v", r.status, r.body)
	}
}

// A body that does not arrive in time is 408, and a body cut short 400,
// neither naming the connection's addresses (issue 39, item 5: a slow
// body got "400 reading the request body: read tcp
// 127.0.0.1:17080->…: i/o timeout").
func TestSlowOrCutBodiesSayNoAddresses(t *testing.T) {
	const timeout = 500 * time.Millisecond
	s := newStack(t, stackOptions{readTimeout: timeout})
	addr := strings.TrimPrefix(s.base, "http://")
	for _, tc := range []struct {
		name   string
		cut    bool // the client ends its side after the part it sent
		status int
		reason string
	}{
		{"slow", false, http.StatusRequestTimeout, apiserver.ReasonRequestTimeout},
		{"cut short", true, http.StatusBadRequest, "INVALID_ARGUMENT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := fmt.Fprintf(conn, "POST /v1/fleets?fleetId=slow HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"replicas\""); err != nil {
				t.Fatal(err)
			}
			if tc.cut {
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			if err := conn.SetReadDeadline(time.Now().Add(10 * timeout)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Message string `json:"message"`
				Details []struct {
					Reason string `json:"reason"`
				} `json:"details"`
			}
			if err := json.Unmarshal(b, &body); err != nil || len(body.Details) == 0 {
				t.Fatalf("%d, not the API's error shape: %s", resp.StatusCode, b)
			}
			if resp.StatusCode != tc.status || body.Details[0].Reason != tc.reason {
				t.Fatalf("%d %s, want %d %s: %s", resp.StatusCode, body.Details[0].Reason, tc.status, tc.reason, b)
			}
			local, remote := conn.LocalAddr().String(), conn.RemoteAddr().String()
			if strings.Contains(body.Message, "tcp") || strings.Contains(body.Message, local) || strings.Contains(body.Message, remote) {
				t.Fatalf("the answer names the connection: %q", body.Message)
			}
		})
	}
}

// A path or query that is not valid UTF-8 is a bad request (400), not an
// internal error in the gateway's gRPC hop (500).
func TestRESTRefusesInvalidUTF8(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, target := range []string{"/v1/fleets?pageToken=%FF", "/v1/fleets/%FF", "/v1/fleets/-/gameServers?filter=%C3%28"} {
		resp, err := http.Get(s.base + target)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", target, resp.StatusCode)
		}
	}
}
