package apiserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
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

// Pages of a list end early once their items are large, so a few fleets
// with templates near the event size limit never make a page larger than
// a gRPC client takes (4 MiB by default), nor break the REST listing.
func TestListPagesStayWithinAClientsMessageSize(t *testing.T) {
	s := newStack(t, stackOptions{maxBody: 2 << 20})
	const fleets = 10 // of about 500 KB each: 5 MB in all
	var last uint64
	for i := range fleets {
		f := fleetWithoutReplicas()
		env := map[string]string{}
		for v := range 5 { // 100 KB each: exec takes at most 128 KB per string
			env[fmt.Sprintf("BIG%d", v)] = strings.Repeat("x", 100<<10)
		}
		f["template"].(map[string]any)["env"] = env
		r := s.do(http.MethodPost, fmt.Sprintf("/v1/fleets?fleetId=big-%d", i), f)
		if r.status != http.StatusOK {
			t.Fatalf("create fleet %d: %d %.200v", i, r.status, r.body)
		}
		seq, _ := strconv.ParseUint(r.str("sequence"), 10, 64)
		last = max(last, seq)
	}
	s.waitApplied(last)
	if r := s.do(http.MethodGet, "/v1/fleets?pageSize=1000", nil); r.status != http.StatusOK || r.str("nextPageToken") == "" {
		t.Fatalf("REST list of large fleets: %d, next page %q", r.status, r.str("nextPageToken"))
	}
	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := tetherv1.NewFleetServiceClient(conn)
	seen, token := 0, ""
	for pages := 0; pages < fleets+1; pages++ {
		resp, err := client.ListFleets(s.Ctx, &tetherv1.ListFleetsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("gRPC list, page %d: %v", pages+1, err)
		}
		seen += len(resp.GetFleets())
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if seen != fleets {
		t.Errorf("listed %d fleets over the pages, want %d", seen, fleets)
	}
}
