package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/apikeys"
	kit "github.com/tetherhq/tether/services/testkit/stack"
)

// Against an API that authenticates callers, tetherctl sends the key of
// --token, or of $TETHER_TOKEN; without one it is refused, and the error
// says why.
func TestTokenAuthenticatesTetherctl(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	viewer, err := apikeys.Add(file, "ci-viewer", apikeys.Viewer, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithAPI(1, func(_ *kit.Stack, o *apiserver.Options) { o.Keys = keys }))
	addr := k.APIs[0].GRPCAddr()
	ctx := context.Background()

	t.Setenv(tokenEnv, "")
	if r := runCLI(ctx, addr, nil, "fleets", "list"); r.code == 0 || !strings.Contains(r.stderr, "no API key") {
		t.Errorf("no token: exit %d, stderr %q; want a refusal that says no API key", r.code, r.stderr)
	}
	if r := runCLI(ctx, addr, nil, "--token", viewer, "fleets", "list"); r.code != 0 {
		t.Errorf("--token: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(ctx, addr, nil, "--token", viewer, "fleets", "delete", "arena"); r.code == 0 || !strings.Contains(r.stderr, "may not call") {
		t.Errorf("viewer deletes a fleet: exit %d, stderr %q; want a refusal", r.code, r.stderr)
	}
	t.Setenv(tokenEnv, viewer)
	if r := runCLI(ctx, addr, nil, "fleets", "list"); r.code != 0 {
		t.Errorf("$%s: exit %d\n%s", tokenEnv, r.code, r.stderr)
	}
	if r := runCLI(ctx, addr, nil, "--help"); strings.Contains(r.stdout, viewer) {
		t.Errorf("--help prints the key of $%s", tokenEnv)
	}
}
