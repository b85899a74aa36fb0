package apiserver

import (
	"testing"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// A request's fingerprint is its content: the request id and min_sequence
// do not change it, any other field does.
func TestFingerprint(t *testing.T) {
	alloc := func(id string, players ...string) *tetherv1.AllocateGameServerRequest {
		r := &tetherv1.AllocateGameServerRequest{Parent: "fleets/arena", RequestId: id,
			Selector: &tetherv1.LabelSelector{MatchLabels: map[string]string{"mode": "ranked", "region": "eu", "tier": "1"}}}
		for _, p := range players {
			r.Players = append(r.Players, &tetherv1.PlayerRequest{PlayerId: p})
		}
		return r
	}
	reconnect := func(id string, minSeq int64) *tetherv1.ReconnectPlayerSessionRequest {
		return &tetherv1.ReconnectPlayerSessionRequest{Name: "gameSessions/g/playerSessions/p", RequestId: id, MinSequence: minSeq}
	}
	fp := func(req any) string {
		t.Helper()
		got, err := fingerprint(req)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, tc := range []struct {
		name string
		a, b any
		same bool
	}{
		{"same content, another request id", alloc("r1", "p1"), alloc("r2", "p1"), true},
		{"same content, maps built again", alloc("r1", "p1", "p2"), alloc("r1", "p1", "p2"), true},
		{"another player", alloc("r1", "p1"), alloc("r1", "p2"), false},
		{"players in another order", alloc("r1", "p1", "p2"), alloc("r1", "p2", "p1"), false},
		{"another min_sequence", reconnect("r1", 5), reconnect("r1", 9), true},
		{"another player session", reconnect("r1", 5), &tetherv1.ReconnectPlayerSessionRequest{Name: "gameSessions/g/playerSessions/q", RequestId: "r1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := fp(tc.a), fp(tc.b)
			if len(a) != 64 || len(b) != 64 {
				t.Fatalf("fingerprints %q and %q are not SHA-256 in hex", a, b)
			}
			if (a == b) != tc.same {
				t.Fatalf("fingerprints equal = %v, want %v", a == b, tc.same)
			}
		})
	}
	if got := fp(alloc("", "p1")); got != "" {
		t.Fatalf("a request without a request id has fingerprint %q, want none", got)
	}
	if got := fp(&tetherv1.GetFleetRequest{Name: "fleets/a"}); got != "" {
		t.Fatalf("a request with no request_id field has fingerprint %q, want none", got)
	}
}
