package apiserver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// An allocation's retries get its answer, however they arrive: sent while
// the first call is in progress (a matchmaker's timeout shorter than the
// call), or right after it was answered, before the views show it. With
// the fleet's one READY server taken by the first call, they used to find
// none and answer RESOURCE_EXHAUSTED for an allocation that succeeded.
func TestAllocationRetriesGetTheFirstAnswer(t *testing.T) {
	s := newStack(t, stackOptions{})
	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	alloc := tetherv1.NewAllocationServiceClient(conn)
	for round := range 5 {
		// A fleet with one READY server each round.
		fleet := fmt.Sprintf("arena-%d", round)
		s.createFleet(fleet, fleetWithoutReplicas())
		s.seedReady(fleet, 1, 1, nil)
		req := &tetherv1.AllocateGameServerRequest{Parent: "fleets/" + fleet, RequestId: fmt.Sprintf("match-%d", round)}
		const callers = 8
		var wg sync.WaitGroup
		names := make([]string, callers)
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(s.Ctx, 10*time.Second)
				defer cancel()
				resp, err := alloc.AllocateGameServer(ctx, req)
				names[i], errs[i] = resp.GetGameServer().GetName(), err
			})
		}
		wg.Wait()
		// And retries right after the answers, before the views catch up.
		for range 4 {
			ctx, cancel := context.WithTimeout(s.Ctx, 10*time.Second)
			resp, err := alloc.AllocateGameServer(ctx, req)
			cancel()
			names, errs = append(names, resp.GetGameServer().GetName()), append(errs, err)
		}
		for i := range names {
			if errs[i] != nil || names[i] == "" || names[i] != names[0] {
				t.Fatalf("round %d, call %d: %q, %v; want every call answered with the same server (%q)", round, i, names[i], errs[i], names[0])
			}
		}
	}
}
