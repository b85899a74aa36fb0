package apiserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	agonesallocation "github.com/tetherhq/tether/proto/allocation"
)

// match is one match a director gets from its match function: an id and
// its players.
type match struct {
	id      string
	players []string
}

// director is what an Open Match director does with Agones' allocator: for
// each match it fetches, one Allocate over gRPC with the allocation proto
// (a room on a running lobby server if one has room, else a READY one,
// the players added to its list with the allocation), and the address it
// hands the match's players.
type director struct {
	client agonesallocation.AllocationServiceClient
	fleet  string
}

// assign allocates a server for m and returns where its players connect.
func (d director) assign(ctx context.Context, m match) (*agonesallocation.AllocationResponse, error) {
	labels := map[string]string{"agones.dev/fleet": d.fleet}
	room := map[string]*agonesallocation.CounterSelector{"rooms": {MinAvailable: 1}}
	return d.client.Allocate(ctx, &agonesallocation.AllocationRequest{
		Namespace: "default",
		GameServerSelectors: []*agonesallocation.GameServerSelector{
			{MatchLabels: labels, GameServerState: agonesallocation.GameServerSelector_ALLOCATED, Counters: room},
			{MatchLabels: labels, Counters: room},
		},
		Metadata: &agonesallocation.MetaPatch{Annotations: map[string]string{"match/" + m.id: fmt.Sprint(len(m.players))}},
		Counters: map[string]*agonesallocation.CounterAction{"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)}},
		Lists:    map[string]*agonesallocation.ListAction{"players": {AddValues: m.players}},
	})
}

// A director-like client assigns the matches its match function returns,
// two rooms per server: each match gets an address and a port, every
// match's players are on its server's players list, no server takes more
// than its rooms, the answers name the installation that gave them
// (Options.Installation), and the match past the fleet's rooms is told
// RESOURCE_EXHAUSTED, which a director retries later.
func TestDirectorAssignsMatchesThroughAgonesAllocation(t *testing.T) {
	s := newStack(t, stackOptions{installation: "eu-west"})
	s.createFleet("lobby", fleetWithoutReplicas())
	s.seedRooms("lobby", 3, 3, 2) // 6 rooms, players lists of 8
	d := director{client: agonesallocation.NewAllocationServiceClient(dialAPI(t, s.grpcAddrs[0])), fleet: "lobby"}
	ctx, cancel := context.WithTimeout(s.Ctx, time.Minute)
	defer cancel()
	fetch := func(n int) []match { // the match function: n matches of two players
		var out []match
		for i := range n {
			out = append(out, match{id: fmt.Sprintf("m%d", i), players: []string{fmt.Sprintf("m%d-a", i), fmt.Sprintf("m%d-b", i)}})
		}
		return out
	}
	rooms := map[string]int{}
	for _, m := range fetch(7) {
		resp, err := d.assign(ctx, m)
		if m.id == "m6" {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("the seventh match, with the fleet's 6 rooms taken: %v, want RESOURCE_EXHAUSTED", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("match %s: %v", m.id, err)
		}
		if resp.GetAddress() == "" || len(resp.GetPorts()) == 0 || resp.GetPorts()[0].GetPort() == 0 {
			t.Fatalf("match %s: no address to hand its players: %v", m.id, resp)
		}
		if resp.GetSource() != "eu-west" {
			t.Fatalf("match %s: source %q, want the installation that answered, eu-west", m.id, resp.GetSource())
		}
		players := resp.GetLists()["players"].GetValues()
		for _, p := range m.players {
			found := false
			for _, v := range players {
				found = found || v == p
			}
			if !found {
				t.Fatalf("match %s on %s: players %v lack %s", m.id, resp.GetGameServerName(), players, p)
			}
		}
		if resp.GetMetadata().GetAnnotations()["match/"+m.id] != "2" {
			t.Fatalf("match %s: annotations %v", m.id, resp.GetMetadata().GetAnnotations())
		}
		if rooms[resp.GetGameServerName()]++; rooms[resp.GetGameServerName()] > 2 {
			t.Fatalf("%s took a third match", resp.GetGameServerName())
		}
	}
	if len(rooms) != 3 {
		t.Fatalf("matches went to %v, want three servers of two", rooms)
	}
}
