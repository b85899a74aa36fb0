package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/tlsfiles"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/testcerts"
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

// A context with a client certificate calls an API that authenticates by
// certificates (mutual TLS), without any key.
func TestContextWithAClientCertificate(t *testing.T) {
	dir := t.TempDir()
	apiCert, apiKey := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	testcerts.Write(t, apiCert, apiKey, "api")
	serving, err := tlsfiles.New(apiCert, apiKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "ops.crt"), filepath.Join(dir, "ops.key")
	testcerts.WriteClient(t, cert, key, "ops.example")
	cas, err := tlsfiles.LoadClientCAs(cert, nil)
	if err != nil {
		t.Fatal(err)
	}
	keysFile := writeMode(t, dir, "api-keys", "ops viewer cert:ops.example\n", 0o600)
	keys, err := apikeys.Load(keysFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithAPI(1, func(_ *kit.Stack, o *apiserver.Options) {
		o.TLS, o.ClientCAs, o.Keys = serving.Config(), cas, keys
	}))
	isolate(t, filepath.Join(dir, "config", "config.yaml"))
	if r := ctl(t, "config", "set-context", "ops", "--server", k.APIs[0].GRPCAddr(), "--ca", apiCert, "--cert", cert, "--key", key); r.code != 0 {
		t.Fatalf("set-context: %d %s", r.code, r.stderr)
	}
	if r := ctl(t, "--context", "ops", "fleets", "list"); r.code != 0 {
		t.Errorf("with the client certificate: exit %d\n%s", r.code, r.stderr)
	}
	if r := ctl(t, "--server", k.APIs[0].GRPCAddr(), "--ca", apiCert, "fleets", "list"); r.code == 0 || !strings.Contains(r.stderr, "UNAUTHENTICATED") {
		t.Errorf("without it: exit %d\n%s", r.code, r.stderr)
	}
	if r := ctl(t, "config", "get-contexts"); !strings.Contains(r.stdout, "client-cert "+cert) {
		t.Errorf("get-contexts does not say how ops authenticates:\n%s", r.stdout)
	}
}
