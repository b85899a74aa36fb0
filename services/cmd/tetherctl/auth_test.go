package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/dev/devkeys"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/tlsfiles"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/testcerts"
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
	operator, err := apikeys.Add(file, "ci-operator", apikeys.Operator, time.Time{})
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
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // no tether dev keys of this machine's
	if r := runCLI(ctx, addr, nil, "fleets", "list"); r.code == 0 || !strings.Contains(r.stderr, "no API key") {
		t.Errorf("no token: exit %d, stderr %q; want a refusal that says no API key", r.code, r.stderr)
	}
	if r := runCLI(ctx, addr, nil, "--token", viewer, "fleets", "list"); r.code != 0 {
		t.Errorf("--token: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(ctx, addr, nil, "--token", viewer, "fleets", "delete", "arena"); r.code == 0 || !strings.Contains(r.stderr, "may not call") {
		t.Errorf("viewer deletes a fleet: exit %d, stderr %q; want a refusal", r.code, r.stderr)
	}
	// Who did it: the history shows the key that created the fleet.
	if r := runCLI(ctx, addr, nil, "--token", operator, "fleets", "create", "-f", "../../../deploy/examples/arena.yaml"); r.code != 0 {
		t.Fatalf("operator creates a fleet: exit %d\n%s", r.code, r.stderr)
	}
	r := runCLI(ctx, addr, nil, "--token", operator, "audit", "history", "fleets/arena")
	if r.code != 0 || !strings.Contains(r.stdout, "ACTOR") || !strings.Contains(r.stdout, "ci-operator (operator, api-key)") {
		t.Errorf("audit history: exit %d, want the operator key as the actor:\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Setenv(tokenEnv, viewer)
	if r := runCLI(ctx, addr, nil, "fleets", "list"); r.code != 0 {
		t.Errorf("$%s: exit %d\n%s", tokenEnv, r.code, r.stderr)
	}
	if r := runCLI(ctx, addr, nil, "--help"); strings.Contains(r.stdout, viewer) {
		t.Errorf("--help prints the key of $%s", tokenEnv)
	}
}

// Without --token or $TETHER_TOKEN, tetherctl talking to an API on this
// machine uses the admin key of `tether dev` (its default data dir), so
// the README's tour needs no step for keys; an API elsewhere never gets it.
func TestDevAdminKeyIsFoundOnThisMachineOnly(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(tokenEnv, "")
	dataDir := filepath.Join(cache, "tether", "dev")
	if err := os.MkdirAll(devkeys.Dir(dataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(devkeys.Dir(dataDir), "api-keys")
	admin, err := apikeys.Add(file, "dev-admin", apikeys.Admin, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(devkeys.File(dataDir, "admin"), []byte(admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithAPI(1, func(_ *kit.Stack, o *apiserver.Options) { o.Keys = keys }))
	if r := runCLI(context.Background(), k.APIs[0].GRPCAddr(), nil, "fleets", "list"); r.code != 0 {
		t.Fatalf("tetherctl with the dev key found: exit %d\n%s", r.code, r.stderr)
	}
	for _, addr := range []string{"10.0.0.4:7070", "api.example.com:7070", "localhost:7070", "dns:///api:7070", "127.0.0.1:7070,10.0.0.5:7070"} {
		if got := devAdminKey(addr); got != "" {
			t.Errorf("devAdminKey(%q) gave the dev key away", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:7070", "[::1]:7070"} {
		if got := devAdminKey(addr); got != admin {
			t.Errorf("devAdminKey(%q) = %q, want the dev admin key", addr, got)
		}
	}
}

// tetherctl --ca talks to an API that serves TLS; without it, it cannot.
func TestCAConnectsOverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	testcerts.Write(t, certFile, keyFile, "api")
	certs, err := tlsfiles.New(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithAPI(2, func(_ *kit.Stack, o *apiserver.Options) { o.TLS = certs.Config() }))
	addr := k.APIs[0].GRPCAddr()
	t.Setenv(caEnv, "")
	// Two replicas: each is checked against its own address.
	both := addr + "," + k.APIs[1].GRPCAddr()
	if r := runCLI(context.Background(), both, nil, "--ca", certFile, "fleets", "list"); r.code != 0 {
		t.Fatalf("--ca with two replicas: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(context.Background(), addr, nil, "--ca", certFile, "fleets", "list"); r.code != 0 {
		t.Fatalf("--ca: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(context.Background(), addr, nil, "--timeout", "3s", "fleets", "list"); r.code == 0 {
		t.Error("plain text to a TLS API: succeeded")
	}
	if r := runCLI(context.Background(), addr, nil, "--tls", "--timeout", "3s", "fleets", "list"); r.code == 0 {
		t.Error("--tls with the system's authorities, to a self-signed API: succeeded")
	}
}

// Without --server, $TETHER_SERVER or a context, tetherctl talks to the
// `tether dev` running on this machine wherever it listens, from the
// addresses it wrote to its data dir (it moves off 7070 when that is
// taken, and `tetherctl fleets list`, the tour's first command, failed
// then); a file whose stack has ended is ignored.
func TestDevServerIsFoundFromItsDataDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(xdgConfigEnv, t.TempDir()) // no contexts
	t.Setenv(configEnv, "")
	t.Setenv(serverEnv, "")
	t.Setenv(addrEnv, "")
	t.Setenv(tokenEnv, "")
	dataDir := filepath.Join(cache, "tether", "dev")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithAPI(1))
	if err := devkeys.WriteAddresses(dataDir, devkeys.Addresses{GRPC: k.APIs[0].GRPCAddr(), REST: "http://" + k.APIs[0].HTTPAddr()}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := execute(context.Background(), newRoot(&out), []string{"fleets", "list"}, &errOut); code != 0 {
		t.Fatalf("tetherctl fleets list without a server: exit %d\n%s", code, errOut.String())
	}
	if got := devServer(); got != k.APIs[0].GRPCAddr() {
		t.Errorf("devServer() = %q, want %q", got, k.APIs[0].GRPCAddr())
	}

	// The stack is gone (killed before it could remove its file): another
	// process's pid that has ended.
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(devkeys.Addresses{GRPC: k.APIs[0].GRPCAddr(), PID: ended.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(devkeys.AddressesFile(dataDir), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := devServer(); got != "" {
		t.Errorf("devServer() = %q from an ended stack's file, want none", got)
	}
	// One elsewhere is never taken for this machine's.
	if err := devkeys.WriteAddresses(dataDir, devkeys.Addresses{GRPC: "10.0.0.4:7070"}); err != nil {
		t.Fatal(err)
	}
	if got := devServer(); got != "" {
		t.Errorf("devServer() = %q, a remote address, want none", got)
	}
	if err := devkeys.RemoveAddresses(dataDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(devkeys.AddressesFile(dataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stack's addresses are still there after it removed them: %v", err)
	}
}
