package apiserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// seedReady appends the events of n READY game servers of a fleet, spread
// over hosts, the way agents would: the API under test only reads views.
func (s *stack) seedReady(fleet string, n int, hosts int, labels map[string]string) []string {
	s.t.Helper()
	var names []string
	var last uint64
	for i := range n {
		name := events.GameServerName(fleet, fmt.Sprintf("gs-%03d", i))
		host := events.HostName(fmt.Sprintf("h%d", i%max(hosts, 1)))
		evs := []events.Envelope{
			events.New(name, time.Now(), &eventsv1.GameServerScheduled{Host: host, Labels: labels}),
			events.New(name, time.Now(), &eventsv1.ProcessStarted{Pid: int32(1000 + i), Address: "127.0.0.1",
				Ports: []*eventsv1.Port{{Name: "game", Port: int32(7000 + i)}}, Attempt: 1}),
			events.New(name, time.Now(), &eventsv1.GameServerReady{}),
		}
		seq, err := s.Store.Append(s.Ctx, events.MustSubject(name), 0, evs...)
		if err != nil {
			s.t.Fatal(err)
		}
		last = seq
		names = append(names, name)
	}
	s.waitApplied(last)
	return names
}

// waitApplied waits until the views have applied seq.
func (s *stack) waitApplied(seq uint64) {
	s.t.Helper()
	r := s.do(http.MethodGet, fmt.Sprintf("/v1/fleets?minSequence=%d", seq), nil)
	if r.status != http.StatusOK {
		s.t.Fatalf("views did not reach %d: %v", seq, r.body)
	}
}

// allocations counts the GameServerAllocated events per game server in the
// stream: the truth, whatever the views say.
func (s *stack) allocations(fleet string) map[string]int {
	s.t.Helper()
	evs, err := s.Store.History(s.Ctx, events.FleetGameServersSubject(fleet), 0)
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range evs {
		if e.Type == "GameServerAllocated" {
			out[e.Aggregate]++
		}
	}
	return out
}

// createFleet creates a fleet and waits until the views hold it, so that a
// test's later reads without minSequence see it: a write answers once it is
// stored, and on a busy machine the projector folded it a second later
// (GET answered 404 in a make test-short with both cores busy).
func (s *stack) createFleet(id string, body map[string]any) {
	s.t.Helper()
	r := s.do(http.MethodPost, "/v1/fleets?fleetId="+id, body)
	if r.status != http.StatusOK {
		s.t.Fatalf("create fleet: %d %v", r.status, r.body)
	}
	seq, err := strconv.ParseUint(r.str("sequence"), 10, 64)
	if err != nil {
		s.t.Fatalf("create fleet: sequence %q: %v", r.str("sequence"), err)
	}
	s.waitApplied(seq)
}

func fleetWithoutReplicas() map[string]any {
	f := arenaFleet(0)
	f["playerSessions"] = map[string]any{"maxPlayers": 4, "reservationTimeoutSeconds": 60, "reconnectWindowSeconds": 120}
	return f
}

// Two replicas, 50 concurrent allocations, 20 READY servers: exactly 20
// succeed, the others get NO_READY_GAME_SERVER, and the stream holds one
// allocation per server.
func TestAllocateConcurrentTwoReplicas(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 2, jetStream: true})
	s.createFleet("arena", fleetWithoutReplicas())
	servers := s.seedReady("arena", 20, 4, map[string]string{"mode": "ranked"})

	type result struct {
		status     int
		reason, gs string
	}
	results := make([]result, 50)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			base := s.bases[i%2]
			r := s.doAt(base, http.MethodPost, "/v1/fleets/arena/gameServers:allocate", map[string]any{
				"requestId":   fmt.Sprintf("req-%d", i),
				"gameSession": map[string]any{"properties": map[string]string{"map": "dust"}},
				"players":     []any{map[string]any{"playerId": fmt.Sprintf("p%d", i)}},
			})
			gs, _ := r.body["gameServer"].(map[string]any)
			name, _ := gs["name"].(string)
			results[i] = result{status: r.status, reason: r.reason(), gs: name}
		})
	}
	wg.Wait()
	won := map[string]int{}
	failed := 0
	for i, r := range results {
		switch {
		case r.status == http.StatusOK:
			won[r.gs]++
		case r.status == http.StatusTooManyRequests && r.reason == "NO_READY_GAME_SERVER":
			failed++
		default:
			t.Errorf("allocation %d: status %d reason %q", i, r.status, r.reason)
		}
	}
	if len(won) != 20 || failed != 30 {
		t.Fatalf("%d servers allocated, %d refused; want 20 and 30", len(won), failed)
	}
	for gs, n := range won {
		if n != 1 {
			t.Errorf("%s returned to %d allocations", gs, n)
		}
	}
	stream := s.allocations("arena")
	for _, gs := range servers {
		if stream[gs] != 1 {
			t.Errorf("stream holds %d allocations of %s, want 1", stream[gs], gs)
		}
	}
}

// A retried allocation returns the first result through either replica,
// also when the retries race each other.
func TestAllocateIdempotentAcrossReplicas(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 2, jetStream: true})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 6, 2, nil)
	body := map[string]any{"requestId": "match-42", "players": []any{map[string]any{"playerId": "p1"}}}

	first := s.doAt(s.bases[0], http.MethodPost, "/v1/fleets/arena/gameServers:allocate", body)
	if first.status != http.StatusOK {
		t.Fatalf("allocate: %d %v", first.status, first.body)
	}
	retry := s.doAt(s.bases[1], http.MethodPost, "/v1/fleets/arena/gameServers:allocate", body)
	if retry.status != http.StatusOK {
		t.Fatalf("retry: %d %v", retry.status, retry.body)
	}
	for _, key := range []string{"gameServer", "gameSession"} {
		a, _ := first.body[key].(map[string]any)
		b, _ := retry.body[key].(map[string]any)
		if a["name"] != b["name"] || a["name"] == nil {
			t.Errorf("%s: first %v, retry %v", key, a["name"], b["name"])
		}
	}
	psA := first.body["playerSessions"].([]any)[0].(map[string]any)
	psB := retry.body["playerSessions"].([]any)[0].(map[string]any)
	if psA["name"] != psB["name"] {
		t.Errorf("player session: first %v, retry %v", psA["name"], psB["name"])
	}

	// Racing retries of a new request id, on both replicas.
	race := map[string]any{"requestId": "match-43"}
	names := make([]string, 6)
	var wg sync.WaitGroup
	for i := range names {
		wg.Go(func() {
			r := s.doAt(s.bases[i%2], http.MethodPost, "/v1/fleets/arena/gameServers:allocate", race)
			if r.status != http.StatusOK {
				t.Errorf("racing retry %d: %d %v", i, r.status, r.body)
				return
			}
			names[i], _ = r.body["gameSession"].(map[string]any)["name"].(string)
		})
	}
	wg.Wait()
	for _, n := range names[1:] {
		if n != names[0] {
			t.Fatalf("racing retries got different game sessions: %v", names)
		}
	}
	total := 0
	for _, n := range s.allocations("arena") {
		total += n
	}
	if total != 2 {
		t.Fatalf("stream holds %d allocations, want 2 (one per request id)", total)
	}
}

func TestAllocateSelectorsAndErrors(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 2, 1, map[string]string{"mode": "ranked"})

	tests := []struct {
		name   string
		path   string
		body   map[string]any
		status int
		reason string
	}{
		{"no server matches", "/v1/fleets/arena/gameServers:allocate",
			map[string]any{"selector": map[string]any{"matchLabels": map[string]string{"mode": "casual"}}},
			http.StatusTooManyRequests, "NO_READY_GAME_SERVER"},
		{"unknown fleet", "/v1/fleets/nope/gameServers:allocate", map[string]any{}, http.StatusNotFound, "NOT_FOUND"},
		{"selector and selectors", "/v1/fleets/arena/gameServers:allocate", map[string]any{
			"selector": map[string]any{}, "selectors": []any{map[string]any{}}}, http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"bad scheduling", "/v1/fleets/arena/gameServers:allocate", map[string]any{"scheduling": "RANDOM"}, http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"player without id", "/v1/fleets/arena/gameServers:allocate", map[string]any{"players": []any{map[string]any{}}}, http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"more players than seats", "/v1/fleets/arena/gameServers:allocate", map[string]any{
			"gameSession": map[string]any{"maxPlayers": 1},
			"players":     []any{map[string]any{"playerId": "a"}, map[string]any{"playerId": "b"}}}, http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"second selector matches, any fleet", "/v1/fleets/-/gameServers:allocate", map[string]any{"selectors": []any{
			map[string]any{"matchLabels": map[string]string{"mode": "casual"}},
			map[string]any{"matchLabels": map[string]string{"mode": "ranked"}}}}, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(http.MethodPost, tt.path, tt.body)
			if r.status != tt.status || r.reason() != tt.reason {
				t.Fatalf("status %d reason %q, want %d %q: %v", r.status, r.reason(), tt.status, tt.reason, r.body)
			}
		})
	}
}

// The same player twice in one allocation is refused, naming the field
// (issue 39, item 5): it took two seats of the session. Nothing is
// allocated; the players once each are.
func TestAllocationRefusesAPlayerTwice(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas()) // 4 seats
	s.seedReady("arena", 1, 1, nil)
	players := func(ids ...string) map[string]any {
		var out []any
		for _, id := range ids {
			out = append(out, map[string]any{"playerId": id})
		}
		return map[string]any{"players": out}
	}
	for _, tc := range []struct {
		name  string
		ids   []string
		field string
	}{
		{"twice in a row", []string{"p1", "p1"}, "players[1].player_id"},
		{"twice apart", []string{"p1", "p2", "p3", "p2"}, "players[3].player_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodPost, "/v1/fleets/arena/gameServers:allocate", players(tc.ids...))
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tc.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %v", r.status, r.reason(), r.fieldViolation(), tc.field, r.body)
			}
		})
	}
	if n := len(s.allocations("arena")); n != 0 {
		t.Fatalf("refused allocations allocated %d servers", n)
	}
	r := s.do(http.MethodPost, "/v1/fleets/arena/gameServers:allocate", players("p1", "p2"))
	if sessions, _ := r.body["playerSessions"].([]any); r.status != http.StatusOK || len(sessions) != 2 {
		t.Fatalf("two players: %d %v", r.status, r.body)
	}
}

// Player sessions through the API: seats, max players, tokens, reconnect.
func TestPlayerSessionsAPI(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas()) // 4 seats
	s.seedReady("arena", 1, 1, nil)
	alloc := s.do(http.MethodPost, "/v1/fleets/arena/gameServers:allocate", map[string]any{
		"players": []any{map[string]any{"playerId": "p1", "playerData": "elo=1500"}, map[string]any{"playerId": "p2"}},
	})
	if alloc.status != http.StatusOK {
		t.Fatalf("allocate: %d %v", alloc.status, alloc.body)
	}
	gsess := alloc.body["gameSession"].(map[string]any)["name"].(string)
	players := alloc.body["playerSessions"].([]any)
	for i, p := range players {
		ps := p.(map[string]any)
		if int(ps["slot"].(float64)) != i || ps["state"] != "RESERVED" {
			t.Errorf("player %d: %v", i, ps)
		}
		if err := s.Tokens.Verify(ps["token"].(string), ps["name"].(string), time.Now()); err != nil {
			t.Errorf("player %d token: %v", i, err)
		}
	}
	var seq float64
	wait.For(t, 5*time.Second, "game session in the views", func() bool {
		r := s.do(http.MethodGet, "/v1/"+gsess, nil)
		seq = r.num("sequence")
		return r.status == http.StatusOK
	})

	// Two more seats fit (slots 2, 3); a fifth player does not.
	for i, want := range []int{2, 3} {
		r := s.do(http.MethodPost, "/v1/"+gsess+"/playerSessions", map[string]any{"playerId": fmt.Sprintf("late-%d", i)})
		if r.status != http.StatusOK || int(r.num("slot")) != want || r.str("token") == "" {
			t.Fatalf("add player %d: %d %v", i, r.status, r.body)
		}
	}
	if r := s.do(http.MethodPost, "/v1/"+gsess+"/playerSessions", map[string]any{"playerId": "late-x"}); r.status != http.StatusBadRequest || r.reason() != "GAME_SESSION_FULL" {
		t.Fatalf("fifth player: %d %q %v", r.status, r.reason(), r.body)
	}
	list := s.do(http.MethodGet, "/v1/"+gsess+"/playerSessions", nil)
	if n := len(list.body["playerSessions"].([]any)); n != 4 {
		t.Fatalf("%d player sessions listed, want 4", n)
	}

	// Reconnect answers while the seat is held, with a fresh valid token...
	p1 := players[0].(map[string]any)["name"].(string)
	r := s.do(http.MethodPost, "/v1/"+p1+":reconnect", map[string]any{})
	if r.status != http.StatusOK {
		t.Fatalf("reconnect: %d %v", r.status, r.body)
	}
	if err := s.Tokens.Verify(r.str("token"), p1, time.Now()); err != nil {
		t.Fatalf("reconnect token: %v", err)
	}
	if ep, _ := r.body["endpoint"].(map[string]any); ep["address"] != "127.0.0.1" {
		t.Fatalf("reconnect endpoint: %v", r.body["endpoint"])
	}
	// ...and PLAYER_SESSION_EXPIRED once it ended.
	_, psID, _ := events.ParsePlayerSessionName(p1)
	done, err := s.Store.Append(s.Ctx, events.MustSubject(gsess), events.AnySequence, events.New(gsess, time.Now(),
		&eventsv1.PlayerSessionCompleted{PlayerSession: psID, Reason: eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_LEFT}))
	if err != nil {
		t.Fatal(err)
	}
	if done <= uint64(seq) {
		t.Fatalf("completion sequence %d not after %v", done, seq)
	}
	s.waitApplied(done)
	if r := s.do(http.MethodPost, "/v1/"+p1+":reconnect", map[string]any{}); r.status != http.StatusBadRequest || r.reason() != "PLAYER_SESSION_EXPIRED" {
		t.Fatalf("reconnect after the end: %d %q", r.status, r.reason())
	}
	if r := s.do(http.MethodGet, "/v1/"+gsess+"/playerSessions/ps-nope", nil); r.status != http.StatusNotFound {
		t.Fatalf("unknown player session: %d", r.status)
	}
}

// The allocation is answered once it is stored: the notice to the server's
// agent is sent in the background, so a commands stream that cannot take
// it (here deleted: publishes get no answer, and are retried for
// jsclient.DefaultUnavailableWait, 12 s) does not hold the matchmaker's
// answer. The cluster test found it in a NATS partition's rejoin, where
// the commands stream was between leaders.
func TestAllocateDoesNotWaitForTheAgentsNotice(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 2, 1, nil)
	if err := s.JS.DeleteStream(s.Ctx, commands.StreamName); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"requestId": "req-notice"})
	if err != nil {
		t.Fatal(err)
	}
	// A matchmaker's deadline, well inside the 12 s a notice may take.
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Post(s.base+"/v1/fleets/arena/gameServers:allocate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("allocate with the commands stream gone: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("allocate: %d %s", resp.StatusCode, b)
	}
}
