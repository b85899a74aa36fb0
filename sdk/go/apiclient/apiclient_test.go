package apiclient_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/sdk/go/apiclient"
)

// replica is a stand-in API replica: it answers GetFleet, or, while down,
// refuses every call UNAVAILABLE, as a replica that is shutting down does.
type replica struct {
	tetherv1.UnimplementedFleetServiceServer
	name  string
	down  bool
	calls atomic.Int64
}

func (r *replica) GetFleet(_ context.Context, req *tetherv1.GetFleetRequest) (*tetherv1.Fleet, error) {
	r.calls.Add(1)
	if r.down {
		return nil, status.Error(codes.Unavailable, r.name+" is shutting down")
	}
	return &tetherv1.Fleet{Name: r.name}, nil
}

func serve(t *testing.T, r *replica) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	tetherv1.RegisterFleetServiceServer(s, r)
	go func() { _ = s.Serve(l) }() // returns when stopped
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// dial connects to the replicas at endpoints through apiclient, and
// returns a fleet client and a context bounding the test's calls.
func dial(t *testing.T, endpoints ...string) (tetherv1.FleetServiceClient, context.Context) {
	t.Helper()
	conn, err := apiclient.Dial(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return tetherv1.NewFleetServiceClient(conn), ctx
}

func TestSplit(t *testing.T) {
	got := apiclient.Split(" a:1, b:2,,c:3 ")
	if len(got) != 3 || got[0] != "a:1" || got[1] != "b:2" || got[2] != "c:3" {
		t.Fatalf("Split: %q", got)
	}
	if _, err := apiclient.Dial(nil); err == nil {
		t.Fatal("Dial with no endpoint: no error")
	}
}

// Calls are spread over the replicas, and a call that a replica refuses
// UNAVAILABLE is retried on another: every call succeeds.
func TestSpreadsAndRetriesOnAnotherReplica(t *testing.T) {
	up, down := &replica{name: "up"}, &replica{name: "down", down: true}
	fleets, ctx := dial(t, serve(t, down), serve(t, up))
	// Until its connection to a replica is up the balancer sends every
	// call to the other: under load, 20 calls all went to the live one
	// before the refusing one was connected. So calls go on, each one
	// answered, until the refusing one has had some (at most 1,000).
	calls := 0
	for calls < 20 || down.calls.Load() == 0 && calls < 1000 {
		calls++
		f, err := fleets.GetFleet(ctx, &tetherv1.GetFleetRequest{Name: "fleets/arena"})
		if err != nil {
			t.Fatalf("a call failed although a replica was up: %v", err)
		}
		if f.GetName() != "up" {
			t.Fatalf("answered by %q", f.GetName())
		}
	}
	if up.calls.Load() != int64(calls) || down.calls.Load() == 0 {
		t.Fatalf("calls: %d on the live replica, %d on the refusing one; want %d and some", up.calls.Load(), down.calls.Load(), calls)
	}
}

// A replica that is gone (nothing listens) is skipped.
func TestSkipsAReplicaThatIsGone(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	up := &replica{name: "up"}
	fleets, ctx := dial(t, gone, serve(t, up))
	for range 10 {
		if _, err := fleets.GetFleet(ctx, &tetherv1.GetFleetRequest{Name: "fleets/arena"}); err != nil {
			t.Fatalf("a call failed although a replica was up: %v", err)
		}
	}
}
