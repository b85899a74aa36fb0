package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tetherhq/tether/events"
	agonesallocation "github.com/tetherhq/tether/proto/allocation"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// seedRooms appends n READY servers of fleet on hosts hosts, each with a
// counter rooms (0 of rooms) and a list players (none of 4×rooms), and
// waits for the views.
func (s *stack) seedRooms(fleet string, n, hosts int, rooms int64) []string {
	s.t.Helper()
	tmpl := &eventsv1.GameServerTemplate{Command: "/bin/game",
		Counters: map[string]*eventsv1.Counter{"rooms": {Count: 0, Capacity: rooms}},
		Lists:    map[string]*eventsv1.List{"players": {Capacity: 4 * rooms}},
	}
	var names []string
	var last uint64
	for i := range n {
		name := events.GameServerName(fleet, fmt.Sprintf("gs-%03d", i))
		host := events.HostName(fmt.Sprintf("h%d", i%max(hosts, 1)))
		seq, err := s.Store.Append(s.Ctx, events.MustSubject(name), 0,
			events.New(name, time.Now(), &eventsv1.GameServerScheduled{Host: host, Template: tmpl}),
			events.New(name, time.Now(), &eventsv1.ProcessStarted{Pid: int32(1000 + i), Address: "127.0.0.1",
				Ports: []*eventsv1.Port{{Name: "game", Port: int32(7000 + i)}}, Attempt: 1}),
			events.New(name, time.Now(), &eventsv1.GameServerReady{}))
		if err != nil {
			s.t.Fatal(err)
		}
		last = seq
		names = append(names, name)
	}
	s.waitApplied(last)
	return names
}

// roomRequest is Tether's REST allocation of one room: an ALLOCATED server
// with a room free first, else a READY one, taking the room.
func roomRequest(extra map[string]any) map[string]any {
	free := map[string]any{"rooms": map[string]any{"minAvailable": "1"}}
	body := map[string]any{
		"selectors": []any{
			map[string]any{"gameServerState": "ALLOCATED", "counters": free},
			map[string]any{"gameServerState": "READY", "counters": free},
		},
		"counterActions": map[string]any{"rooms": map[string]any{"action": "INCREMENT", "amount": "1"}},
	}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// roomsIn counts, from the stream (the truth, whatever the views say),
// the rooms each server of fleet had taken by allocations and the events
// that took them, and fails if any server's count ever passed its
// capacity.
func (s *stack) roomsIn(fleet string) (rooms map[string]int64, allocated, reallocated int) {
	s.t.Helper()
	evs, err := s.Store.History(s.Ctx, events.FleetGameServersSubject(fleet), 0)
	if err != nil {
		s.t.Fatal(err)
	}
	rooms = map[string]int64{}
	for _, e := range evs {
		var cs []*eventsv1.CounterChanged
		switch d := e.Data.(type) {
		case *eventsv1.GameServerAllocated:
			allocated++
			cs = d.GetCounters()
		case *eventsv1.GameServerReallocated:
			reallocated++
			cs = d.GetCounters()
		}
		for _, c := range cs {
			if c.GetName() == "rooms" {
				if c.GetCount() > c.GetCapacity() || c.GetCount() != rooms[e.Aggregate]+c.GetCountDiff() {
					s.t.Fatalf("%s at %d: rooms %d of %d (diff %d) after %d", e.Aggregate, e.Sequence, c.GetCount(), c.GetCapacity(), c.GetCountDiff(), rooms[e.Aggregate])
				}
				rooms[e.Aggregate] = c.GetCount()
			}
		}
	}
	return rooms, allocated, reallocated
}

// obj is the response's object field key.
func (r response) obj(key string) map[string]any {
	v, _ := r.body[key].(map[string]any)
	return v
}

// Packed with a counter action fills one server's rooms before it opens
// the next: the allocations, one after another, take gs-a's four rooms,
// then another server's four, and so on; the first of each server is a
// new game session (GameServerAllocated), the next three join it
// (GameServerReallocated). With every room taken: 429.
func TestPackedRoomsFillAServerBeforeTheNext(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("lobby", fleetWithoutReplicas())
	s.seedRooms("lobby", 3, 3, 4)
	var order []string
	sessions := map[string]string{}
	for i := range 12 {
		r := s.do(http.MethodPost, "/v1/fleets/lobby/gameServers:allocate", roomRequest(nil))
		if r.status != http.StatusOK {
			t.Fatalf("allocation %d: %d %v", i, r.status, r.body)
		}
		gs := r.obj("gameServer")
		name := gs["name"].(string)
		order = append(order, name)
		session := r.obj("gameSession")["name"].(string)
		if first, ok := sessions[name]; ok && first != session {
			t.Fatalf("allocation %d into %s: game session %s, want the one its first room opened, %s", i, name, session, first)
		}
		sessions[name] = session
		counters, _ := gs["counters"].(map[string]any)
		rooms, _ := counters["rooms"].(map[string]any)
		if want := fmt.Sprint(i%4 + 1); fmt.Sprint(rooms["count"]) != want {
			t.Fatalf("allocation %d into %s: rooms %v, want %s taken", i, name, rooms, want)
		}
	}
	for i := range order {
		if order[i] != order[i/4*4] {
			t.Fatalf("allocations went to %v: want each server's four rooms filled before the next", order)
		}
	}
	if order[0] == order[4] || order[4] == order[8] || order[0] == order[8] {
		t.Fatalf("allocations went to %v: want three servers", order)
	}
	if r := s.do(http.MethodPost, "/v1/fleets/lobby/gameServers:allocate", roomRequest(nil)); r.status != http.StatusTooManyRequests {
		t.Fatalf("with every room taken: %d %v, want 429", r.status, r.body)
	}
	rooms, allocated, reallocated := s.roomsIn("lobby")
	if allocated != 3 || reallocated != 9 {
		t.Fatalf("%d GameServerAllocated and %d GameServerReallocated, want 3 and 9", allocated, reallocated)
	}
	for name, n := range rooms {
		if n != 4 {
			t.Fatalf("%s has %d rooms taken, want 4", name, n)
		}
	}
	// A match that ends gives its room back; the next allocation takes it.
	freed := order[0]
	if r := s.do(http.MethodPatch, "/v1/"+freed+"/counters/rooms", map[string]any{"countDiff": "-1"}); r.status != http.StatusOK {
		t.Fatalf("give a room back: %d %v", r.status, r.body)
	}
	r := s.do(http.MethodPost, "/v1/fleets/lobby/gameServers:allocate", roomRequest(nil))
	if r.status != http.StatusOK || r.obj("gameServer")["name"] != freed {
		t.Fatalf("after %s gave a room back: %d %v, want that room", freed, r.status, r.body)
	}
}

// A room allocation retried with its request id is answered with the
// first call's room, not a second one: right after it (the stream's
// duplicate window), and once the server is full and the views hold it
// (the request id looked up before the 429). Another request id gets the
// 429.
func TestARoomAllocationRetriedIsAnsweredOnce(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("lobby", fleetWithoutReplicas())
	s.seedRooms("lobby", 1, 1, 2)
	allocate := func(id string) response {
		t.Helper()
		return s.do(http.MethodPost, "/v1/fleets/lobby/gameServers:allocate", roomRequest(map[string]any{"requestId": id}))
	}
	roomsTaken := func(r response) string {
		counters, _ := r.obj("gameServer")["counters"].(map[string]any)
		rooms, _ := counters["rooms"].(map[string]any)
		return fmt.Sprint(rooms["count"])
	}
	first := allocate("a")
	second := allocate("b") // the server's second and last room, another match
	if first.status != http.StatusOK || second.status != http.StatusOK || roomsTaken(second) != "2" {
		t.Fatalf("two rooms: %d %v; %d %v", first.status, first.body, second.status, second.body)
	}
	session := second.obj("gameSession")["name"]
	for _, when := range []string{"at once", "with the views up to date"} {
		if when != "at once" {
			head, err := s.Store.StreamLastSequence(s.Ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.waitApplied(head)
		}
		again := allocate("b")
		if again.status != http.StatusOK || again.obj("gameServer")["name"] != second.obj("gameServer")["name"] ||
			again.obj("gameSession")["name"] != session || roomsTaken(again) != "2" {
			t.Fatalf("retry %s: %d %v, want the first call's answer", when, again.status, again.body)
		}
	}
	if r := allocate("c"); r.status != http.StatusTooManyRequests {
		t.Fatalf("another request with both rooms taken: %d %v, want 429", r.status, r.body)
	}
	if rooms, allocated, reallocated := s.roomsIn("lobby"); allocated != 1 || reallocated != 1 || len(rooms) != 1 {
		t.Fatalf("%d GameServerAllocated, %d GameServerReallocated over %d servers; want 1, 1, 1", allocated, reallocated, len(rooms))
	}
}

// 32 concurrent callers, across two API replicas, allocating rooms of 20
// servers of 4 rooms each (each call an ALLOCATED selector with a room,
// then a READY one): exactly 80 succeed, no room is taken twice, and every
// call after those answers 429.
func TestConcurrentRoomAllocationsNeverPassACapacity(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 2})
	s.createFleet("lobby", fleetWithoutReplicas())
	s.seedRooms("lobby", 20, 4, 4)
	const callers, perCaller = 32, 6 // 192 calls for 80 rooms
	var mu sync.Mutex
	ok, exhausted := 0, 0
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			base := s.bases[c%len(s.bases)]
			for i := range perCaller {
				r := s.doAt(base, http.MethodPost, "/v1/fleets/lobby/gameServers:allocate",
					roomRequest(map[string]any{"requestId": fmt.Sprintf("c%d-%d", c, i)}))
				mu.Lock()
				switch r.status {
				case http.StatusOK:
					ok++
				case http.StatusTooManyRequests:
					exhausted++
				default:
					t.Errorf("caller %d call %d: %d %v", c, i, r.status, r.body)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 80 || exhausted != callers*perCaller-80 {
		t.Fatalf("%d allocations succeeded and %d answered 429, want 80 and %d", ok, exhausted, callers*perCaller-80)
	}
	rooms, allocated, reallocated := s.roomsIn("lobby")
	if allocated+reallocated != 80 || len(rooms) != 20 {
		t.Fatalf("%d allocation events over %d servers, want 80 over 20", allocated+reallocated, len(rooms))
	}
	for name, n := range rooms {
		if n != 4 {
			t.Fatalf("%s has %d rooms taken, want 4", name, n)
		}
	}
	if r := s.do(http.MethodPost, "/v1/fleets/lobby/gameServers:allocate", roomRequest(nil)); r.status != http.StatusTooManyRequests {
		t.Fatalf("after the 80: %d %v, want 429", r.status, r.body)
	}
}

// Agones' lobby pattern over its own gRPC allocation API: an ALLOCATED
// server with room for the player first, else a READY one; the player is
// added to the server's players list with the allocation, and a player
// already there is found again by containsValue. Priorities and a
// capacity action are taken as Agones sends them.
func TestAgonesAllocationWithCountersAndLists(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("lobby", fleetWithoutReplicas())
	s.seedRooms("lobby", 2, 1, 2) // players: capacity 8 each
	client := agonesallocation.NewAllocationServiceClient(dialAPI(t, s.grpcAddrs[0]))
	ctx, cancel := context.WithTimeout(s.Ctx, 30*time.Second)
	defer cancel()
	fleet := map[string]string{"agones.dev/fleet": "lobby"}
	join := func(player string) (*agonesallocation.AllocationResponse, error) {
		room := map[string]*agonesallocation.ListSelector{"players": {MinAvailable: 1}}
		return client.Allocate(ctx, &agonesallocation.AllocationRequest{
			Namespace: "default",
			GameServerSelectors: []*agonesallocation.GameServerSelector{
				{MatchLabels: fleet, GameServerState: agonesallocation.GameServerSelector_ALLOCATED, Lists: room},
				{MatchLabels: fleet, Lists: room},
			},
			Priorities: []*agonesallocation.Priority{{Type: agonesallocation.Priority_List, Key: "players", Order: agonesallocation.Priority_Ascending}},
			Lists:      map[string]*agonesallocation.ListAction{"players": {AddValues: []string{player}}},
		})
	}
	first, err := join("alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bob", "carol"} {
		got, err := join(p)
		if err != nil {
			t.Fatal(err)
		}
		if got.GetGameServerName() != first.GetGameServerName() {
			t.Fatalf("%s went to %s, alice to %s: want the fullest server with room (ascending)", p, got.GetGameServerName(), first.GetGameServerName())
		}
		if vs := got.GetLists()["players"].GetValues(); vs[len(vs)-1] != p {
			t.Fatalf("players %v after %s joined", vs, p)
		}
	}
	// A selector by a player already there finds the server again.
	again, err := client.Allocate(ctx, &agonesallocation.AllocationRequest{GameServerSelectors: []*agonesallocation.GameServerSelector{
		{MatchLabels: fleet, GameServerState: agonesallocation.GameServerSelector_ALLOCATED, Lists: map[string]*agonesallocation.ListSelector{"players": {ContainsValue: "bob"}}},
	}})
	if err != nil || again.GetGameServerName() != first.GetGameServerName() {
		t.Fatalf("containsValue bob: %v %v, want %s", again.GetGameServerName(), err, first.GetGameServerName())
	}
	// A counter action with a capacity, as Agones sends it (wrapped values).
	got, err := client.Allocate(ctx, &agonesallocation.AllocationRequest{
		GameServerSelectors: []*agonesallocation.GameServerSelector{{MatchLabels: fleet, GameServerState: agonesallocation.GameServerSelector_ALLOCATED}},
		Counters: map[string]*agonesallocation.CounterAction{"rooms": {
			Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1), Capacity: wrapperspb.Int64(1)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := got.GetCounters()["rooms"]; c.GetCount().GetValue() != 1 || c.GetCapacity().GetValue() != 1 {
		t.Fatalf("rooms %v, want 1 of 1", c)
	}
	// No room left on it, and none on a READY one for an ALLOCATED-only
	// request: RESOURCE_EXHAUSTED.
	_, err = client.Allocate(ctx, &agonesallocation.AllocationRequest{
		GameServerSelectors: []*agonesallocation.GameServerSelector{{MatchLabels: fleet, GameServerState: agonesallocation.GameServerSelector_ALLOCATED}},
		Counters:            map[string]*agonesallocation.CounterAction{"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)}},
	})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a room past the capacity: %v, want RESOURCE_EXHAUSTED", err)
	}
}
