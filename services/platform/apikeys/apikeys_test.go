package apikeys_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// writeKeys writes lines as a keys file and returns its path.
func writeKeys(t *testing.T, path string, lines ...string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "keys")
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t *testing.T, name string, role apikeys.Role, expires time.Time) (secret, line string) {
	t.Helper()
	secret, line, err := apikeys.New(name, role, expires)
	if err != nil {
		t.Fatal(err)
	}
	return secret, line
}

// A key made by New authenticates as its name and role until it expires;
// no key, another key, or the file's hash itself do not.
func TestAuthenticate(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	mm, mmLine := newKey(t, "matchmaker-eu", apikeys.Matchmaker, time.Time{})
	old, oldLine := newKey(t, "ci", apikeys.Viewer, now.Add(time.Hour))
	keys, err := apikeys.Load(writeKeys(t, "", "# the keys", mmLine+"  # the EU matchmaker", "", oldLine), nil)
	if err != nil {
		t.Fatal(err)
	}
	if keys.Len() != 2 {
		t.Fatalf("%d keys loaded, want 2", keys.Len())
	}
	p, err := keys.Authenticate(mm, now)
	if err != nil || p != (apikeys.Principal{Name: "matchmaker-eu", Role: apikeys.Matchmaker, Via: "api-key"}) {
		t.Errorf("matchmaker key: %+v, %v", p, err)
	}
	if p, err := keys.Authenticate(old, now.Add(59*time.Minute)); err != nil || p.Name != "ci" || p.Role != apikeys.Viewer {
		t.Errorf("ci key before its expiry: %+v, %v", p, err)
	}
	if _, err := keys.Authenticate(old, now.Add(time.Hour)); !errors.Is(err, apikeys.ErrExpired) {
		t.Errorf("ci key at its expiry: %v, want ErrExpired", err)
	}
	if _, err := keys.Authenticate("", now); !errors.Is(err, apikeys.ErrNoKey) {
		t.Errorf("no key: %v, want ErrNoKey", err)
	}
	hash := strings.Fields(mmLine)[2]
	for _, wrong := range []string{mm + "x", mm[:len(mm)-1], hash, strings.TrimPrefix(hash, "sha256:"), "tether_"} {
		if _, err := keys.Authenticate(wrong, now); !errors.Is(err, apikeys.ErrUnknownKey) {
			t.Errorf("key %q: %v, want ErrUnknownKey", wrong, err)
		}
	}
	if !strings.HasPrefix(mm, "tether_") || strings.Contains(mmLine, mm) {
		t.Errorf("key %q, line %q: want a tether_ key that its line does not contain", mm, mmLine)
	}
}

// A keys file that does not parse is refused with its line number.
func TestLoadRefusesBadFiles(t *testing.T) {
	_, good := newKey(t, "a", apikeys.Admin, time.Time{})
	hash := strings.Fields(good)[2]
	for _, tc := range []struct{ name, content, want string }{
		{"too few fields", "a admin", "line 1"},
		{"unknown role", "a root " + hash, "unknown role"},
		{"bad hash", "a admin sha256:abc", "64 hex digits"},
		{"hash without its kind", "a admin " + strings.TrimPrefix(hash, "sha256:"), "sha256:"},
		{"bad name", "a/b admin " + hash, "name"},
		{"bad expiry", good + " tomorrow", "RFC 3339"},
		{"a name twice", good + "\na viewer sha256:" + strings.Repeat("0", 64), "used twice"},
		{"a key twice", good + "\nb viewer " + hash, "listed twice"},
		{"too many fields", good + " 2027-01-01T00:00:00Z extra", "fields"},
	} {
		_, err := apikeys.Load(writeKeys(t, "", tc.content), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := apikeys.Load(empty, nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty file: %v, want it refused", err)
	}
	if keys, err := apikeys.Load(writeKeys(t, "", "# no keys yet"), nil); err != nil || keys.Len() != 0 {
		t.Errorf("a file of comments: %v keys, %v; want 0 and no error", keys, err)
	}
	if _, err := apikeys.Load(filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Error("a missing file: no error")
	}
	if _, _, err := apikeys.New("bad name", apikeys.Admin, time.Time{}); err == nil {
		t.Error("New with a bad name: no error")
	}
	if _, _, err := apikeys.New("ok", "root", time.Time{}); err == nil {
		t.Error("New with an unknown role: no error")
	}
}

// Keys added to and removed from the file take effect without a restart;
// a file that stops parsing leaves the keys loaded before in force.
func TestWatchReloadsTheFile(t *testing.T) {
	now := time.Now()
	first, firstLine := newKey(t, "first", apikeys.Operator, time.Time{})
	second, secondLine := newKey(t, "second", apikeys.Auditor, time.Time{})
	path := writeKeys(t, "", firstLine)
	keys, err := apikeys.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go keys.Watch(ctx, 10*time.Millisecond)

	writeKeys(t, path, firstLine, secondLine) // added
	wait.For(t, 5*time.Second, "the added key to authenticate", func() bool {
		_, err := keys.Authenticate(second, now)
		return err == nil
	})
	writeKeys(t, path, secondLine) // the first revoked
	wait.For(t, 5*time.Second, "the revoked key to be refused", func() bool {
		_, err := keys.Authenticate(first, now)
		return errors.Is(err, apikeys.ErrUnknownKey)
	})
	writeKeys(t, path, secondLine, "broken line") // refused: the second stays
	if changed, err := keys.Reload(); err == nil || changed {
		t.Fatalf("reload of a broken file: changed %v, %v", changed, err)
	}
	if _, err := keys.Authenticate(second, now); err != nil {
		t.Fatalf("after a broken file, the loaded key: %v", err)
	}
}

// Add creates the file (0600), appends each key's line, and refuses a name
// already used, leaving the file as it was.
func TestAdd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	ops, err := apikeys.Add(path, "ops", apikeys.Operator, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	mm, err := apikeys.Add(path, "mm", apikeys.Matchmaker, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apikeys.Add(path, "ops", apikeys.Viewer, time.Time{}); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("a name used twice: %v", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("a refused key changed the file:\n%s", after)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	// A file the API servers' group reads stays readable to them.
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := apikeys.Add(path, "later", apikeys.Viewer, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("after a key was added to a 0640 file: mode %v, %v; want 0640 kept", fi.Mode().Perm(), err)
	}
	keys, err := apikeys.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for secret, want := range map[string]string{ops: "ops", mm: "mm"} {
		if p, err := keys.Authenticate(secret, time.Now()); err != nil || p.Name != want {
			t.Errorf("%s's key: %+v, %v", want, p, err)
		}
	}
}
