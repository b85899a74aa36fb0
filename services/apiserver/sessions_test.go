package apiserver_test

import (
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// allocatePlayer allocates a server of a fresh fleet with one player and
// returns the player session's name and token once its game session is in
// the views.
func (s *stack) allocatePlayer() (name, token string) {
	s.t.Helper()
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 1, 1, nil)
	r := s.do(http.MethodPost, "/v1/fleets/arena/gameServers:allocate", map[string]any{"players": []any{map[string]any{"playerId": "p1"}}})
	if r.status != http.StatusOK {
		s.t.Fatalf("allocate: %d %v", r.status, r.body)
	}
	ps := r.body["playerSessions"].([]any)[0].(map[string]any)
	gsess := r.body["gameSession"].(map[string]any)["name"].(string)
	wait.For(s.t, 5*time.Second, "the game session in the views", func() bool {
		return s.do(http.MethodGet, "/v1/"+gsess, nil).status == http.StatusOK
	})
	return ps["name"].(string), ps["token"].(string)
}

// reconnect calls :reconnect on replica base and returns the token and the
// generation it was issued for, checked against the player session's.
func (s *stack) reconnect(base, ps string, body map[string]any) (string, int64) {
	s.t.Helper()
	r := s.doAt(base, http.MethodPost, "/v1/"+ps+":reconnect", body)
	if r.status != http.StatusOK {
		s.t.Fatalf("reconnect: %d %v", r.status, r.body)
	}
	token := r.str("token")
	claims, err := s.Tokens.Check(token, ps, time.Now())
	if err != nil {
		s.t.Fatalf("reconnect token: %v", err)
	}
	// int64 fields are JSON strings; generation 0 is left out.
	got, _ := r.body["playerSession"].(map[string]any)["tokenGeneration"].(string)
	if got != strconv.FormatInt(claims.Generation, 10) {
		s.t.Fatalf("player session says token generation %q, the token %d", got, claims.Generation)
	}
	return token, claims.Generation
}

// reissued lists the generations PlayerTokenReissued recorded, in order.
func (s *stack) reissued(ps string) []int64 {
	s.t.Helper()
	gsessID, _, err := events.ParsePlayerSessionName(ps)
	if err != nil {
		s.t.Fatal(err)
	}
	h, err := s.Store.History(s.Ctx, events.MustSubject(events.GameSessionName(gsessID)), 1)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []int64
	for _, e := range h {
		if r, ok := e.Data.(*eventsv1.PlayerTokenReissued); ok {
			out = append(out, r.GetTokenGeneration())
		}
	}
	return out
}

// Each :reconnect records the seat's next token generation and signs the
// token for it; a retry with the same request id gets the same generation;
// a reissue by another writer is seen (no generation is issued twice).
func TestReconnectReissuesTheToken(t *testing.T) {
	s := newStack(t, stackOptions{})
	ps, first := s.allocatePlayer()
	if c, err := s.Tokens.Check(first, ps, time.Now()); err != nil || c.Generation != 0 {
		t.Fatalf("allocation token: %+v, %v; want generation 0", c, err)
	}
	for want := int64(1); want <= 2; want++ {
		if _, gen := s.reconnect(s.base, ps, map[string]any{}); gen != want {
			t.Fatalf("reconnect %d: generation %d", want, gen)
		}
	}
	tok, gen := s.reconnect(s.base, ps, map[string]any{"requestId": "rc-1"})
	again, genAgain := s.reconnect(s.base, ps, map[string]any{"requestId": "rc-1"})
	if gen != 3 || genAgain != 3 || tok == "" || again == "" {
		t.Fatalf("reconnect with a request id, twice: generations %d and %d, want 3 both times", gen, genAgain)
	}
	// Another writer reissues (another replica, say); this replica's next
	// reissue goes past it.
	gsessID, psID, _ := events.ParsePlayerSessionName(ps)
	gsess := events.GameSessionName(gsessID)
	last, err := s.Store.LastSequence(s.Ctx, events.MustSubject(gsess))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.Append(s.Ctx, events.MustSubject(gsess), last, events.New(gsess, time.Now(),
		&eventsv1.PlayerTokenReissued{PlayerSession: psID, TokenGeneration: 4})); err != nil {
		t.Fatal(err)
	}
	if _, gen := s.reconnect(s.base, ps, map[string]any{}); gen != 5 {
		t.Fatalf("reconnect after another writer's reissue: generation %d, want 5", gen)
	}
	if got := s.reissued(ps); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("reissues recorded: %v, want [1 2 3 4 5]", got)
	}
}

// Reconnects racing through two replicas each get a generation of their
// own, or ABORTED when they lost the race too often: the game session's
// sequence guards every reissue, so no generation is handed out twice and
// each one handed out is the one recorded.
func TestConcurrentReconnectsGetDistinctGenerations(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 2})
	ps, _ := s.allocatePlayer()
	const callers, calls = 4, 5
	var (
		mu      sync.Mutex
		results []response
		wg      sync.WaitGroup
	)
	for i := range callers {
		base := s.bases[i%len(s.bases)]
		wg.Go(func() {
			for range calls {
				r := s.doAt(base, http.MethodPost, "/v1/"+ps+":reconnect", map[string]any{})
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var gens []int64
	for _, r := range results {
		switch {
		case r.status == http.StatusOK:
			c, err := s.Tokens.Check(r.str("token"), ps, time.Now())
			if err != nil {
				t.Fatalf("token: %v", err)
			}
			gens = append(gens, c.Generation)
		case r.status == http.StatusConflict && r.reason() == "VERSION_CONFLICT":
			// lost the race every time it tried: the client retries
		default:
			t.Fatalf("reconnect: %d %v", r.status, r.body)
		}
	}
	slices.Sort(gens)
	if len(gens) == 0 || len(slices.Compact(slices.Clone(gens))) != len(gens) {
		t.Fatalf("generations handed out: %v, want some, each once", gens)
	}
	if got := s.reissued(ps); !slices.Equal(got, gens) {
		t.Fatalf("reissues recorded %v, handed out %v", got, gens)
	}
}
