package apiserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/playertoken"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// restReply is a REST answer with its Retry-After header.
type restReply struct {
	status     int
	reason     string
	retryAfter string
}

// getREST reads path from base, decoding the API's error shape.
func getREST(t *testing.T, base, path string) restReply {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := restReply{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	var body struct {
		Details []struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
		} `json:"details"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("GET %s: %d, body not JSON: %s", path, resp.StatusCode, raw)
	}
	for _, d := range body.Details {
		if d.Type == "type.googleapis.com/google.rpc.ErrorInfo" {
			out.reason = d.Reason
		}
	}
	return out
}

// An API server that starts over views behind the stream (rebuilt,
// restored, replayed after a restart) does not answer NOT_FOUND for a
// resource the stream holds (issue 39, item 5: a restarted stack answered
// 404 for fleets/arena 250 ms after its start): until the views have
// applied the stream's position at its start, a read that finds no row is
// UNAVAILABLE, reason PROJECTION_BEHIND, with Retry-After; then the
// resource is read, and what does not exist is NOT_FOUND.
func TestReadsBeforeTheViewsCatchUpAreUnavailable(t *testing.T) {
	k := kit.New(t, kit.WithPostgres(), kit.WithCommands())
	const name = "fleets/arena"
	msgs, err := events.DecideFleet(name, nil, events.CreateFleet{Spec: &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := k.Store.Append(k.Ctx, events.MustSubject(name), events.AnySequence, events.New(name, time.Now(), m)); err != nil {
			t.Fatal(err)
		}
	}
	tokens, err := playertoken.Parse(playertoken.NewKeySpec("test"))
	if err != nil {
		t.Fatal(err)
	}
	// The views are empty, and no projector runs yet: a restart whose
	// views are still being replayed.
	api, err := apiserver.New(apiserver.Options{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Store: k.Store, Views: k.Views,
		Freshness: postgres.NewFreshness(k.Pool, k.Logger), Tokens: tokens, Commands: k.Commands, Logger: k.Logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	k.Go("API", api.Run)
	base := "http://" + api.HTTPAddr()
	wait.Until(t, 10*time.Second, "the API to answer", func() error {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})

	for _, path := range []string{"/v1/" + name, "/v1/fleets/absent", "/v1/fleets/arena/gameServers/gs-1"} {
		if r := getREST(t, base, path); r.status != http.StatusServiceUnavailable || r.reason != apiserver.ReasonProjectionBehind || r.retryAfter != "1" {
			t.Fatalf("GET %s before the views caught up: %d %s Retry-After %q, want 503 %s Retry-After 1", path, r.status, r.reason, r.retryAfter, apiserver.ReasonProjectionBehind)
		}
	}
	conn, err := grpc.NewClient(api.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := tetherv1.NewFleetServiceClient(conn).GetFleet(k.Ctx, &tetherv1.GetFleetRequest{Name: name}); status.Code(err) != codes.Unavailable {
		t.Fatalf("GetFleet over gRPC before the views caught up: %v, want UNAVAILABLE", err)
	}

	k.StartProjector()
	wait.Until(t, 10*time.Second, "the fleet to be read", func() error {
		if r := getREST(t, base, "/v1/"+name); r.status != http.StatusOK {
			return fmt.Errorf("%d %s", r.status, r.reason)
		}
		return nil
	})
	// The fleet's row can be read a moment before the replica hears that
	// the views reached the stream's position (Freshness wakes it): under
	// load, make test-short read 503 here once.
	wait.For(t, 10*time.Second, "the replica to know the views caught up", api.ViewsCaughtUp)
	if r := getREST(t, base, "/v1/fleets/absent"); r.status != http.StatusNotFound || r.reason != apiserver.ReasonNotFound {
		t.Fatalf("GET of a fleet that does not exist, the views caught up: %d %s, want 404 %s", r.status, r.reason, apiserver.ReasonNotFound)
	}
}
