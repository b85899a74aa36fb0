package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
	agonesallocation "github.com/tetherhq/tether/proto/allocation"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/platform/apikeys"
)

// An allocation request shaped as Agones' documentation shows it (REST
// POST /gameserverallocation: namespace, a selector naming the fleet by
// agones.dev/fleet, metadata) allocates a READY server of the Tether fleet
// and answers with its name, address, ports and host, the metadata set
// on it with the allocation (one event). A second selector is tried when
// the first matches nothing; nothing matching is 429.
func TestAgonesAllocationOverREST(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("simple-game-server", fleetWithoutReplicas())
	s.seedReady("simple-game-server", 2, 1, map[string]string{"mode": "ranked"})

	r := s.do(http.MethodPost, "/gameserverallocation", map[string]any{
		"namespace": "default",
		"gameServerSelectors": []any{
			map[string]any{"matchLabels": map[string]string{"agones.dev/fleet": "simple-game-server", "mode": "casual"}},
			map[string]any{"matchLabels": map[string]string{"agones.dev/fleet": "simple-game-server"}, "gameServerState": "READY"},
		},
		"scheduling": "Packed",
		"metadata":   map[string]any{"labels": map[string]string{"match": "m-1"}, "annotations": map[string]string{"map": "dust"}},
	})
	if r.status != http.StatusOK {
		t.Fatalf("allocate: %d %v", r.status, r.body)
	}
	name := r.str("gameServerName")
	if !strings.HasPrefix(name, "gs-") || r.str("address") != "127.0.0.1" || r.str("nodeName") != "h0" || r.str("source") != "local" {
		t.Fatalf("answer %v: want a gs- name, address 127.0.0.1, node h0, source local", r.body)
	}
	ports, _ := r.body["ports"].([]any)
	if len(ports) != 1 || ports[0].(map[string]any)["name"] != "game" {
		t.Fatalf("ports %v, want the game port", r.body["ports"])
	}
	meta, _ := r.body["metadata"].(map[string]any)
	if labels, _ := meta["labels"].(map[string]any); labels["match"] != "m-1" || labels["mode"] != "ranked" {
		t.Fatalf("metadata %v, want match=m-1 set and mode=ranked kept", meta)
	}
	full := events.GameServerName("simple-game-server", name)
	hist, err := s.Store.History(s.Ctx, events.MustSubject(full), 0)
	if err != nil {
		t.Fatal(err)
	}
	last := hist[len(hist)-1]
	a, ok := last.Data.(*eventsv1.GameServerAllocated)
	if !ok || a.GetLabels()["match"] != "m-1" || a.GetAnnotations()["map"] != "dust" {
		t.Fatalf("last event %s %v, want the allocation with its metadata", last.Type, last.Data)
	}

	// The second server, then none: 429, as Agones answers.
	if r := s.do(http.MethodPost, "/gameserverallocation", map[string]any{}); r.status != http.StatusOK {
		t.Fatalf("an empty request (any READY server): %d %v", r.status, r.body)
	}
	if r := s.do(http.MethodPost, "/gameserverallocation", map[string]any{
		"gameServerSelectors": []any{map[string]any{"matchLabels": map[string]string{"agones.dev/fleet": "simple-game-server"}}},
	}); r.status != http.StatusTooManyRequests {
		t.Fatalf("nothing READY: %d %v, want 429", r.status, r.body)
	}

	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
	}{
		{"multi-cluster", map[string]any{"multiClusterSetting": map[string]any{"enabled": true}}, http.StatusBadRequest},
		{"a player selector with max below min", map[string]any{"gameServerSelectors": []any{map[string]any{"players": map[string]any{"minAvailable": "3", "maxAvailable": "1"}}}}, http.StatusBadRequest},
		{"a bad counter action", map[string]any{"counters": map[string]any{"rooms": map[string]any{"action": "Double", "amount": "1"}}}, http.StatusBadRequest},
		{"a negative amount", map[string]any{"counters": map[string]any{"rooms": map[string]any{"action": "Increment", "amount": "-1"}}}, http.StatusBadRequest},
		{"a bad list selector", map[string]any{"gameServerSelectors": []any{map[string]any{"lists": map[string]any{"players": map[string]any{"minAvailable": "-1"}}}}}, http.StatusBadRequest},
		{"a bad fleet name", map[string]any{"gameServerSelectors": []any{map[string]any{"matchLabels": map[string]string{"agones.dev/fleet": "Not A Name"}}}}, http.StatusBadRequest},
		{"an unknown fleet", map[string]any{"gameServerSelectors": []any{map[string]any{"matchLabels": map[string]string{"agones.dev/fleet": "nope"}}}}, http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := s.do(http.MethodPost, "/gameserverallocation", tc.body); r.status != tc.status {
				t.Fatalf("%d %v, want %d", r.status, r.body, tc.status)
			}
		})
	}
}

// Over gRPC, with Agones' allocation proto and a matchmaker's key: the
// answer as over REST; a viewer's key is refused; nothing left is
// RESOURCE_EXHAUSTED.
func TestAgonesAllocationOverGRPC(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys, key: key[apikeys.Operator]})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 1, 1, nil)
	client := agonesallocation.NewAllocationServiceClient(dialAPI(t, s.grpcAddrs[0]))
	as := func(role apikeys.Role) context.Context {
		ctx, cancel := context.WithTimeout(s.Ctx, 20*time.Second)
		t.Cleanup(cancel)
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key[role])
	}
	req := &agonesallocation.AllocationRequest{Namespace: "default", GameServerSelectors: []*agonesallocation.GameServerSelector{
		{MatchLabels: map[string]string{"agones.dev/fleet": "arena"}}}}
	if _, err := client.Allocate(as(apikeys.Viewer), req); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a viewer: %v, want PERMISSION_DENIED", err)
	}
	resp, err := client.Allocate(as(apikeys.Matchmaker), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGameServerName() != "gs-000" || resp.GetAddress() != "127.0.0.1" || len(resp.GetPorts()) != 1 || resp.GetPorts()[0].GetPort() != 7000 ||
		len(resp.GetAddresses()) != 1 || resp.GetAddresses()[0].GetType() != "InternalIP" {
		t.Fatalf("answer %v", resp)
	}
	if _, err := client.Allocate(as(apikeys.Matchmaker), req); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("nothing READY: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// Agones' player selector (its alpha player tracking): a server is
// selected by the room its game's tracked players leave, its player
// capacity less the players connected. gs-000 has 1 seat left of 4,
// gs-001 all 4; a selector of at least 2 finds gs-001, one of exactly 1
// gs-000, and one of more than any server has none (429).
func TestAgonesAllocationByPlayers(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("lobby", fleetWithoutReplicas())
	names := s.seedRooms("lobby", 2, 1, 4)
	var last uint64
	for i, name := range names {
		subject := events.MustSubject(name)
		seq, err := s.Store.LastSequence(s.Ctx, subject)
		if err != nil {
			t.Fatal(err)
		}
		evs := []events.Envelope{events.New(name, time.Now(), &eventsv1.PlayerCapacitySet{Capacity: 4})}
		if i == 0 {
			for j, p := range []string{"ann", "bo", "cy"} {
				evs = append(evs, events.New(name, time.Now(), &eventsv1.TrackedPlayerConnected{PlayerId: p, Count: int64(j + 1)}))
			}
		}
		if last, err = s.Store.Append(s.Ctx, subject, seq, evs...); err != nil {
			t.Fatal(err)
		}
	}
	s.waitApplied(last)
	allocate := func(players map[string]any) response {
		return s.do(http.MethodPost, "/gameserverallocation", map[string]any{"gameServerSelectors": []any{
			map[string]any{"matchLabels": map[string]string{"agones.dev/fleet": "lobby"}, "players": players}}})
	}
	if r := allocate(map[string]any{"minAvailable": "5"}); r.status != http.StatusTooManyRequests {
		t.Fatalf("room for 5 players: %d %v, want 429", r.status, r.body)
	}
	if r := allocate(map[string]any{"minAvailable": "2"}); r.status != http.StatusOK || r.body["gameServerName"] != "gs-001" {
		t.Fatalf("room for 2 players: %d %v, want gs-001", r.status, r.body)
	}
	if r := allocate(map[string]any{"minAvailable": "1", "maxAvailable": "1"}); r.status != http.StatusOK || r.body["gameServerName"] != "gs-000" {
		t.Fatalf("room for exactly 1 player: %d %v, want gs-000", r.status, r.body)
	}
}

// A row the views wrote before they held the players' room (NULL, until
// its server next changes) is a maybe for the views' query, and the
// allocator checks the server's state itself: a server with no seat left
// is not allocated to a player selector.
func TestAPlayerSelectorChecksRowsFromBeforeTheColumn(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("lobby", fleetWithoutReplicas())
	name := s.seedRooms("lobby", 1, 1, 4)[0]
	subject := events.MustSubject(name)
	seq, err := s.Store.LastSequence(s.Ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if seq, err = s.Store.Append(s.Ctx, subject, seq, events.New(name, time.Now(), &eventsv1.PlayerCapacitySet{Capacity: 0})); err != nil {
		t.Fatal(err)
	}
	s.waitApplied(seq)
	if _, err := s.Pool.Exec(s.Ctx, `UPDATE game_servers SET players_available = NULL WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
	r := s.do(http.MethodPost, "/gameserverallocation", map[string]any{"gameServerSelectors": []any{
		map[string]any{"matchLabels": map[string]string{"agones.dev/fleet": "lobby"}, "players": map[string]any{"minAvailable": "1"}}}})
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("a server with no seat left, its row from before the column: %d %v, want 429", r.status, r.body)
	}
}
