package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/apikeys"
	kit "github.com/tetherhq/tether/services/testkit/stack"
)

// A context made with set-context calls an API that authenticates
// callers (as `tether dev` does) with the key of its tokenFile; with a
// wrong key the API refuses it UNAUTHENTICATED, and the error says where
// the key came from without showing it.
func TestContextCallsTheAPI(t *testing.T) {
	dir := t.TempDir()
	keysFile := filepath.Join(dir, "api-keys")
	viewer, err := apikeys.Add(keysFile, "ci-viewer", apikeys.Viewer, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Load(keysFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithAPI(1, func(_ *kit.Stack, o *apiserver.Options) { o.Keys = keys }))
	addr := k.APIs[0].GRPCAddr()
	isolate(t, filepath.Join(dir, "config", "config.yaml"))
	good := writeMode(t, dir, "dev.token", viewer+"\n", 0o600)
	const wrongKey = "tk_not-a-key-of-this-api"
	wrong := writeMode(t, dir, "wrong.token", wrongKey, 0o600)
	for _, args := range [][]string{
		{"config", "set-context", "dev", "--server", addr, "--token-file", good},
		{"config", "set-context", "wrong", "--server", addr, "--token-file", wrong},
	} {
		if r := ctl(t, args...); r.code != 0 {
			t.Fatalf("tetherctl %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}

	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr []string
	}{
		{"--context dev", []string{"--context", "dev", "fleets", "list"}, 0, nil},
		{"--context wrong", []string{"--context", "wrong", "fleets", "list"}, 1,
			[]string{"UNAUTHENTICATED", "not known", "the API key came from the tokenFile " + wrong + ` of context "wrong"`}},
		{"--token beats the context's", []string{"--context", "wrong", "--token", viewer, "fleets", "list"}, 0, nil},
		{"use-context", []string{"config", "use-context", "dev"}, 0, nil},
		{"the current context", []string{"fleets", "list"}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ctl(t, tc.args...)
			if r.code != tc.wantCode {
				t.Fatalf("exit %d, want %d\n%s%s", r.code, tc.wantCode, r.stdout, r.stderr)
			}
			for _, w := range tc.wantStderr {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q lacks %q", r.stderr, w)
				}
			}
			if strings.Contains(r.stdout+r.stderr, wrongKey) || strings.Contains(r.stdout+r.stderr, viewer) {
				t.Error("tetherctl printed a key")
			}
		})
	}
}
