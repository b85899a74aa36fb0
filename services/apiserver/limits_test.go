package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
)

// A caller above its rate gets 429 with Retry-After and the reason; another
// caller is served meanwhile, and streams are bounded per caller too.
func TestCallersAreLimitedOneByOne(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys, limits: apiserver.Limits{Rate: 1, Burst: 3, MaxWatches: 1}})
	get := func(k string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.base+"/v1/fleets", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+k)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var refused *http.Response
	for i := range 10 { // the burst of 3, then a refusal (a slow machine refills a little)
		resp := get(key[apikeys.Operator])
		if resp.StatusCode == http.StatusTooManyRequests {
			refused = resp
			break
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d", i, resp.StatusCode)
		}
	}
	if refused == nil {
		t.Fatal("10 calls at 1/s with a burst of 3 were all served")
	}
	defer refused.Body.Close()
	var body struct {
		Details []struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
		} `json:"details"`
	}
	if err := json.NewDecoder(refused.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	reason := ""
	for _, d := range body.Details {
		reason += d.Reason
	}
	if reason != apiserver.ReasonRateLimited {
		t.Errorf("reason %q, want %s", reason, apiserver.ReasonRateLimited)
	}
	if secs, err := strconv.Atoi(refused.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Errorf("Retry-After %q", refused.Header.Get("Retry-After"))
	}
	if resp := get(key[apikeys.Viewer]); resp.StatusCode != http.StatusOK {
		t.Errorf("another caller: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}

	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	history := tetherv1.NewHistoryServiceClient(conn)
	// watch opens a stream; a refused one ends at its first Recv.
	watch := func(k string, refused bool) error {
		ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(s.Ctx, "authorization", "Bearer "+k))
		t.Cleanup(cancel)
		stream, err := history.WatchEvents(ctx, &tetherv1.WatchEventsRequest{})
		if err == nil {
			_, err = stream.Header()
		}
		if err == nil && refused {
			_, err = stream.Recv()
		}
		return err
	}
	if err := watch(key[apikeys.Auditor], false); err != nil {
		t.Fatal(err)
	}
	if err := watch(key[apikeys.Auditor], true); status.Code(err) != codes.ResourceExhausted || !hasReason(status.Convert(err), apiserver.ReasonTooManyWatches) {
		t.Errorf("a second stream of the same caller: %v, want RESOURCE_EXHAUSTED %s", err, apiserver.ReasonTooManyWatches)
	}
	if err := watch(key[apikeys.Viewer], false); err != nil {
		t.Errorf("another caller's stream: %v", err)
	}
}

// An open stream ends when its key is revoked: a dashboard left open does
// not keep reading with a key that no longer exists.
func TestRevokedKeyEndsItsOpenStreams(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	viewer, err := apikeys.Add(file, "dashboard", apikeys.Viewer, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := apikeys.Add(file, "ops", apikeys.Admin, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{keys: keys, key: admin, authRecheck: 50 * time.Millisecond})
	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(s.Ctx, "authorization", "Bearer "+viewer), 30*time.Second)
	defer cancel()
	stream, err := tetherv1.NewHistoryServiceClient(conn).WatchEvents(ctx, &tetherv1.WatchEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	// Revoke: the file without the dashboard's key, replaced whole.
	only, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var kept string
	for line := range strings.Lines(string(only)) {
		if !strings.HasPrefix(line, "dashboard ") {
			kept += line
		}
	}
	if err := os.WriteFile(file+".new", []byte(kept), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := stream.Recv()
		if err == nil {
			continue // events of the test's own stack
		}
		st := status.Convert(err)
		if st.Code() != codes.Unauthenticated || !hasReason(st, apiserver.ReasonKeyRevoked) {
			t.Fatalf("the stream ended with %v, want UNAUTHENTICATED %s", err, apiserver.ReasonKeyRevoked)
		}
		return
	}
}

// hasReason reports whether a status carries an ErrorInfo with reason.
func hasReason(st *status.Status, reason string) bool {
	for _, d := range st.Details() {
		if info, ok := d.(interface{ GetReason() string }); ok && info.GetReason() == reason {
			return true
		}
	}
	return false
}
