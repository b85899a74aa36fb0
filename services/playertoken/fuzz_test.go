package playertoken_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/services/playertoken"
)

// Any text is a token of the ring or refused, never a panic; the only text
// accepted for a seat is the token signed for it (strict decoding: no
// altered text of a valid token is valid too), and a token is accepted for
// no other seat.
func FuzzCheck(f *testing.F) {
	ring, err := playertoken.Parse("k1:MDEyMzQ1Njc4OWFiY2RlZg,k0:ZmVkY2JhOTg3NjU0MzIxMA")
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	const seat = "gameSessions/m1/playerSessions/p1"
	valid := ring.SignGeneration(seat, now.Add(time.Hour), 3)
	f.Add(valid, seat)
	f.Add(ring.Sign(seat, now.Add(time.Hour)), seat)
	f.Add(valid+"=", seat)
	f.Add("k1.1.2.abc", "gameSessions/m1/playerSessions/p2")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, token, playerSession string) {
		claims, err := ring.Check(token, playerSession, now)
		if err != nil {
			return
		}
		if claims.Expiry.Before(now) {
			t.Fatalf("expired token %q accepted", token)
		}
		if playerSession == seat && token != valid && token != ring.Sign(seat, now.Add(time.Hour)) {
			t.Fatalf("token %q accepted for %s: not one the ring signed", token, seat)
		}
	})
}
