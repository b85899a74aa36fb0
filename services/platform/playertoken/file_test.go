package playertoken_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/platform/playertoken"
)

// TestKeysFileRotatesWithoutARestart rotates the keys of a ring read from
// a file, as an operator does: the new key first, the old one kept; the
// ring signs with the new key at once and still takes the old key's
// tokens, until the old key is dropped.
func TestKeysFileRotatesWithoutARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "player-token-keys")
	old, next := playertoken.NewKeySpec("k1"), playertoken.NewKeySpec("k2")
	write := func(lines ...string) {
		t.Helper()
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("# the first key signs", old)
	ring, err := playertoken.LoadFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	const ps = "gameSessions/g1/playerSessions/ps-1"
	now := time.Now()
	oldToken := ring.Sign(ps, now.Add(time.Hour))
	if !strings.HasPrefix(oldToken, "k1.") {
		t.Fatalf("signed with %q", oldToken)
	}

	write(next, old)
	if changed, err := ring.Reload(); err != nil || !changed {
		t.Fatalf("reload: changed %v, %v", changed, err)
	}
	if tok := ring.Sign(ps, now.Add(time.Hour)); !strings.HasPrefix(tok, "k2.") {
		t.Errorf("after the rotation the ring signs with %q, not k2", tok)
	}
	if err := ring.Verify(oldToken, ps, now); err != nil {
		t.Errorf("a token of the old key is refused while the key is kept: %v", err)
	}

	write("") // caught while being written: the keys stay
	if _, err := ring.Reload(); err == nil {
		t.Error("an empty keys file was taken")
	}
	if err := ring.Verify(oldToken, ps, now); err != nil {
		t.Errorf("an empty file dropped the keys: %v", err)
	}

	write(next)
	if _, err := ring.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := ring.Verify(oldToken, ps, now); !errors.Is(err, playertoken.ErrUnknownKey) {
		t.Errorf("the dropped key's token: %v, want ErrUnknownKey", err)
	}
}
