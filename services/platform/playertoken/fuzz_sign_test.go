package playertoken

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// otherSpec is a key of the same id as fixedSpec's with another secret: a
// token it signs is a forgery to the fixed ring.
const otherSpec = "k1:/+7t3Nu6mZiXlpWUk5KRkI+OjYyLiomIh4aFhIOCgYA"

// FuzzSignCheck signs a token for any player session, expiry and
// generation, and checks what must hold of it: the ring that signed it
// accepts it for that player session until its expiry, with the claims
// signed, and refuses it after; it is refused for any other player session,
// by a ring with another secret under the same key id, and with any one
// byte changed (tokens have one text only). A ring whose signing key is
// another still accepts it while the signing key stays in the ring
// (rotation).
func FuzzSignCheck(f *testing.F) {
	f.Add(fixedPS, fixedExpiry.Unix(), int64(0), uint16(0), byte('x'))
	f.Add(fixedPS, fixedExpiry.Unix(), int64(7), uint16(20), byte('.'))
	f.Add("gameSessions/g/playerSessions/p", int64(0), int64(1), uint16(3), byte('0'))
	f.Add("", int64(math.MaxInt64/2), int64(math.MaxInt64), uint16(60), byte('='))
	f.Add("a\x00b", int64(1), int64(-3), uint16(1), byte(0))
	r := fixedRing(f)
	other, err := Parse(otherSpec)
	if err != nil {
		f.Fatal(err)
	}
	rotated, err := Parse(NewKeySpec("k2") + "," + fixedSpec)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ps string, expiry, generation int64, at uint16, b byte) {
		if expiry < 0 || expiry > 1<<40 {
			return // before 1970 or after year 36812: never issued
		}
		exp := time.Unix(expiry, 0)
		tok := r.SignGeneration(ps, exp, generation)
		c, err := r.Check(tok, ps, exp)
		if err != nil {
			t.Fatalf("a token just signed is refused: %v", err)
		}
		if c.Generation != max(generation, 0) || c.Expiry.Unix() != expiry {
			t.Fatalf("claims %+v, signed with generation %d, expiry %d", c, generation, expiry)
		}
		if _, err := r.Check(tok, ps, exp.Add(time.Second)); !errors.Is(err, ErrExpired) {
			t.Fatalf("a second after its expiry: %v, want ErrExpired", err)
		}
		if _, err := r.Check(tok, ps+"x", exp); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("for another player session: %v, want ErrBadSignature", err)
		}
		if _, err := other.Check(tok, ps, exp); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("by another secret under the same key id: %v, want ErrBadSignature", err)
		}
		if _, err := rotated.Check(tok, ps, exp); err != nil {
			t.Fatalf("by a ring that signs with a new key and keeps this one: %v", err)
		}
		altered := []byte(tok)
		i := int(at) % len(altered)
		if altered[i] == b {
			return
		}
		altered[i] = b
		if c, err := r.Check(string(altered), ps, exp); err == nil {
			t.Fatalf("%q, an altered %q, is accepted as %+v", altered, tok, c)
		}
	})
}

// FuzzParse reads any key spec: it is refused with an error, or it is a
// ring whose first key signs tokens that it accepts, and whose every key
// has an id without '.' and a secret of at least minSecret bytes.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		fixedSpec, fixedSpec + "," + otherSpec, "k2:" + strings.Repeat("A", 22), "k1:short", " k1 : AAECAwQFBgcICQoLDA0ODw== ",
		"a.b:AAECAwQFBgcICQoLDA0ODw", ":AAECAwQFBgcICQoLDA0ODw", "k1:AAECAwQFBgcICQoLDA0ODw,k1:AAECAwQFBgcICQoLDA0ODw", "", ",",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		ring, err := Parse(spec)
		if err != nil {
			if ring != nil {
				t.Fatalf("Parse(%q) returned a ring and %v", spec, err)
			}
			return
		}
		keys := ring.current()
		if len(keys) == 0 {
			t.Fatalf("Parse(%q) gave a ring without keys", spec)
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if k.id == "" || strings.Contains(k.id, ".") || len(k.secret) < minSecret || seen[k.id] {
				t.Fatalf("Parse(%q) accepted the key %q with %d bytes", spec, k.id, len(k.secret))
			}
			seen[k.id] = true
		}
		tok := ring.SignGeneration(fixedPS, fixedExpiry, 3)
		if !strings.HasPrefix(tok, keys[0].id+".") {
			t.Fatalf("token %q is not signed by the first key %q", tok, keys[0].id)
		}
		if c, err := ring.Check(tok, fixedPS, fixedNow); err != nil || c.Generation != 3 {
			t.Fatalf("the ring refuses its own token %q: %+v %v", tok, c, err)
		}
		if _, err := ring.Check(fixedGen0, fixedPS, fixedNow); err == nil && !seen["k1"] {
			t.Fatalf("a ring without key k1 accepts a token of k1")
		}
	})
}
