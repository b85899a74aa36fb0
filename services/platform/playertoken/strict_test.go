package playertoken

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Fixed inputs, so that the fuzz corpus in testdata stays meaningful.
const (
	fixedSpec = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
	fixedPS   = "gameSessions/gsess-a/playerSessions/ps-a"
	// fixedGen0 is a token in the format issued before token generations
	// (key id, expiry, MAC): it still verifies, as generation 0.
	fixedGen0 = "k1.1795438800.XOmiOnrRE5vD6JZOYdSXYGxcfmo-iL42u7U07Bkaujk"
	// fixedGen7 is the same seat's token of generation 7.
	fixedGen7 = "k1.1795438800.7.TxlrBCRK62MBwfGiNTtFCviyiL4qOApHsliN9xGwVM0"
)

var (
	fixedNow    = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	fixedExpiry = time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)
)

func fixedRing(t testing.TB) *Ring {
	t.Helper()
	r, err := Parse(fixedSpec)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGenerations(t *testing.T) {
	r := fixedRing(t)
	if got := r.Sign(fixedPS, fixedExpiry); got != fixedGen0 {
		t.Fatalf("Sign = %s, want the pre-generation format %s", got, fixedGen0)
	}
	if got := r.SignGeneration(fixedPS, fixedExpiry, 0); got != fixedGen0 {
		t.Fatalf("SignGeneration(0) = %s, want what Sign gives, %s", got, fixedGen0)
	}
	if got := r.SignGeneration(fixedPS, fixedExpiry, 7); got != fixedGen7 {
		t.Fatalf("SignGeneration(7) = %s, want %s", got, fixedGen7)
	}
	for _, tt := range []struct {
		token string
		gen   int64
	}{{fixedGen0, 0}, {fixedGen7, 7}} {
		c, err := r.Check(tt.token, fixedPS, fixedNow)
		if err != nil || c.Generation != tt.gen || !c.Expiry.Equal(fixedExpiry) {
			t.Fatalf("Check(%s) = %+v, %v; want generation %d, expiry %s", tt.token, c, err, tt.gen, fixedExpiry)
		}
	}
	// The generation is under the MAC: another generation with the same
	// MAC is a forgery, and generation 0 has only the three-part form.
	forged := strings.Replace(fixedGen7, ".7.", ".8.", 1)
	if _, err := r.Check(forged, fixedPS, fixedNow); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("generation altered: %v, want ErrBadSignature", err)
	}
	zero := strings.Replace(fixedGen7, ".7.", ".0.", 1)
	if _, err := r.Check(zero, fixedPS, fixedNow); !errors.Is(err, ErrMalformed) {
		t.Fatalf("four-part generation 0: %v, want ErrMalformed", err)
	}
}

// tokenAlphabet is every byte worth trying in a token's text: printable
// ASCII, whitespace, and a byte that is not ASCII.
func tokenAlphabet() []byte {
	out := []byte{'\n', '\r', '\t', 0, 0xff}
	for c := byte(' '); c <= '~'; c++ {
		out = append(out, c)
	}
	return out
}

// variants returns every text one edit away from s: each byte replaced,
// each byte deleted, a byte inserted anywhere.
func variants(s string) []string {
	var out []string
	for i := 0; i <= len(s); i++ {
		for _, c := range tokenAlphabet() {
			out = append(out, s[:i]+string(c)+s[i:])
			if i < len(s) && c != s[i] {
				out = append(out, s[:i]+string(c)+s[i+1:])
			}
		}
		if i < len(s) {
			out = append(out, s[:i]+s[i+1:])
		}
	}
	return out
}

// No text one edit away from a valid token verifies: not another base64
// text of the same MAC (the unused low bits of the last character, a CR or
// LF the decoder skips, padding), not another decimal of the same number.
func TestNoOtherTextVerifies(t *testing.T) {
	r := fixedRing(t)
	for _, tok := range []string{fixedGen0, fixedGen7} {
		for _, v := range variants(tok) {
			if v == tok {
				continue
			}
			if err := r.Verify(v, fixedPS, fixedNow); err == nil {
				t.Errorf("variant %q of %q verifies", v, tok)
			}
		}
	}
}

func TestStrictDecoding(t *testing.T) {
	r := fixedRing(t)
	sig0 := fixedGen0[strings.LastIndexByte(fixedGen0, '.')+1:]
	last := sig0[len(sig0)-1]
	sameBits := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", last) ^ 1
	tests := []struct {
		name, token string
	}{
		{"low bits of the last character set", fixedGen0[:len(fixedGen0)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[sameBits])},
		{"padded", fixedGen0 + "="},
		{"line feed in the MAC", fixedGen0[:30] + "\n" + fixedGen0[30:]},
		{"carriage return at the end", fixedGen0 + "\r"},
		{"standard base64 alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(fixedGen0)},
		{"plus sign on the expiry", strings.Replace(fixedGen0, ".1795", ".+1795", 1)},
		{"leading zero on the expiry", strings.Replace(fixedGen0, ".1795", ".01795", 1)},
		{"leading zero on the generation", strings.Replace(fixedGen7, ".7.", ".07.", 1)},
		{"negative generation", strings.Replace(fixedGen7, ".7.", ".-7.", 1)},
		{"empty key id", fixedGen0[2:]},
		{"five parts", fixedGen7 + ".x"},
		{"MAC cut short", fixedGen0[:len(fixedGen0)-4]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := r.Verify(tt.token, fixedPS, fixedNow); err == nil {
				t.Fatalf("%q verifies", tt.token)
			}
		})
	}
}
