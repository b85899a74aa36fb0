package playertoken

import (
	"errors"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ring, err := Parse(NewKeySpec("k1"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := Parse(NewKeySpec("k1"))
	if err != nil {
		t.Fatal(err)
	}
	const ps = "gameSessions/gsess-a/playerSessions/ps-a"
	tok := ring.Sign(ps, now.Add(time.Minute))
	tests := []struct {
		name  string
		ring  *Ring
		token string
		ps    string
		at    time.Time
		want  error
	}{
		{"valid", ring, tok, ps, now, nil},
		{"valid at expiry second", ring, tok, ps, now.Add(time.Minute), nil},
		{"expired", ring, tok, ps, now.Add(time.Minute + time.Second), ErrExpired},
		{"another player session", ring, tok, "gameSessions/gsess-a/playerSessions/ps-b", now, ErrBadSignature},
		{"another game session", ring, tok, "gameSessions/gsess-b/playerSessions/ps-a", now, ErrBadSignature},
		{"same key id, other secret (forged)", other, tok, ps, now, ErrBadSignature},
		{"expiry altered", ring, "k1.99999999999." + tok[len("k1.")+len("1795435260."):], ps, now, ErrBadSignature},
		{"garbage", ring, "hello", ps, now, ErrMalformed},
		{"bad base64", ring, "k1.1.***", ps, now, ErrMalformed},
		{"unknown key", ring, "k9" + tok[2:], ps, now, ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.ring.Verify(tt.token, tt.ps, tt.at)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestRotation(t *testing.T) {
	now := time.Now()
	oldSpec, newSpec := NewKeySpec("old"), NewKeySpec("new")
	oldRing, _ := Parse(oldSpec)
	rotated, err := Parse(newSpec + "," + oldSpec)
	if err != nil {
		t.Fatal(err)
	}
	const ps = "gameSessions/g/playerSessions/p"
	if err := rotated.Verify(oldRing.Sign(ps, now.Add(time.Hour)), ps, now); err != nil {
		t.Fatalf("a token of the old key must verify during rotation: %v", err)
	}
	tok := rotated.Sign(ps, now.Add(time.Hour))
	if tok[:4] != "new." {
		t.Fatalf("the first key must sign: %s", tok)
	}
	if err := oldRing.Verify(tok, ps, now); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old-only ring verifying a new token: %v, want ErrUnknownKey", err)
	}
}

func TestParseRejects(t *testing.T) {
	for _, spec := range []string{"", "k1", "k1:", "k1:c2hvcnQ", "a.b:" + NewKeySpec("x")[2:], NewKeySpec("k") + "," + NewKeySpec("k"), "k1:!!!"} {
		if _, err := Parse(spec); err == nil {
			t.Errorf("Parse(%q) accepted", spec)
		}
	}
}
