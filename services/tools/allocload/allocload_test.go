package allocload_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/tools/allocload"
)

// stallingAPI answers its first answered calls at once, then holds every
// later call until its caller gives up: an API server that hangs.
type stallingAPI struct {
	tetherv1.UnimplementedAllocationServiceServer
	answered int64
	calls    atomic.Int64
}

func (a *stallingAPI) AllocateGameServer(ctx context.Context, _ *tetherv1.AllocateGameServerRequest) (*tetherv1.AllocateGameServerResponse, error) {
	if a.calls.Add(1) <= a.answered {
		return &tetherv1.AllocateGameServerResponse{GameServer: &tetherv1.GameServer{Name: "fleets/f/gameServers/gs"}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// Calls that hang until the run's Duration ends are counted as cut, not
// dropped: a round of the matchmaker benchmark once reported 9
// allocations/s with no error, its calls' hangs visible nowhere.
func TestCallsUnansweredWhenTheRunEndsAreCounted(t *testing.T) {
	api := &stallingAPI{answered: 10}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	tetherv1.RegisterAllocationServiceServer(srv, api)
	go func() { _ = srv.Serve(l) }() // ends with Stop below
	t.Cleanup(srv.Stop)

	res, err := allocload.Run(t.Context(), allocload.Options{
		Targets: []string{l.Addr().String()}, Parent: "fleets/f", Callers: 3,
		Duration: 2 * time.Second, CallWait: time.Minute, Max: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Allocations != 10 || len(res.Errors) != 0 || res.Cut != 3 {
		t.Fatalf("%d allocations, errors %v, %d cut; want 10, none, 3 (every caller hung at the end)", res.Allocations, res.Errors, res.Cut)
	}
	var table strings.Builder
	if err := res.Table(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "3 unanswered at the end of the run") {
		t.Errorf("the table does not say calls were cut:\n%s", table.String())
	}

	// A run bounded by its Duration alone ends with calls in flight: they
	// are neither cut nor errors.
	res, err = allocload.Run(t.Context(), allocload.Options{
		Targets: []string{l.Addr().String()}, Parent: "fleets/f", Callers: 3,
		Duration: 500 * time.Millisecond, CallWait: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Allocations != 0 || len(res.Errors) != 0 || res.Cut != 0 {
		t.Fatalf("a timed run: %d allocations, errors %v, %d cut; want none of each", res.Allocations, res.Errors, res.Cut)
	}
}
