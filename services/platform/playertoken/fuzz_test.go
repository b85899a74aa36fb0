package playertoken

import (
	"strings"
	"testing"
)

// FuzzVerify checks that Verify never panics and that a text it accepts is
// exactly the token SignGeneration produces for the claims it read: no
// other text of a valid token verifies. The seeds are the valid tokens and
// the variants a fuzz run once found accepted (testdata/fuzz/FuzzVerify has
// more). Run it with go test -fuzz FuzzVerify ./services/platform/playertoken.
func FuzzVerify(f *testing.F) {
	r := fixedRing(f)
	for _, seed := range []string{
		fixedGen0,
		fixedGen7,
		fixedGen0[:len(fixedGen0)-1] + "l", // the last character's unused bits set
		fixedGen0 + "\n",
		strings.Replace(fixedGen7, ".7.", ".0.", 1),
		strings.Replace(fixedGen0, ".1795", ".+1795", 1),
		"k1.1.***",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := r.Check(text, fixedPS, fixedNow)
		if err != nil {
			return
		}
		if want := r.SignGeneration(fixedPS, c.Expiry, c.Generation); text != want {
			t.Fatalf("%q verifies as %+v, but that token is %q", text, c, want)
		}
	})
}
