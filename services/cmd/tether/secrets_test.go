package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// buildTether builds this command into a temporary directory.
func buildTether(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tether")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// assertNoSecret fails for each secret that text holds.
func assertNoSecret(t *testing.T, where, text string, secrets map[string]string) {
	t.Helper()
	for name, secret := range secrets {
		if secret != "" && strings.Contains(text, secret) {
			t.Errorf("%s shows %s", where, name)
		}
	}
}

// TestNoSecretInLogsBannerOrCommandLine runs `tether dev` and the
// production commands with every kind of secret Tether handles, and greps
// what they print and their command lines: API keys, player-token keys,
// NATS seeds, database and NATS passwords.
func TestNoSecretInLogsBannerOrCommandLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs tether dev")
	}
	bin := buildTether(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// tether dev, with its player-token key given by the environment.
	tokenSpec := playertoken.NewKeySpec("k1")
	_, tokenSecret, _ := strings.Cut(tokenSpec, ":")
	data := filepath.Join(os.TempDir(), "tether-secrets-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(data) })
	out := &syncbuf.Buffer{}
	cmd := exec.CommandContext(ctx, bin, "dev", "--data-dir", data, "--log-level", "debug", "--hosts", "1",
		"--nats-port", "-1", "--rest-port", "-1", "--grpc-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1")
	cmd.Env = append(os.Environ(), "TETHER_PLAYER_TOKEN_KEYS="+tokenSpec)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 90*time.Second, "tether dev's banner", func() bool { return strings.Contains(out.String(), "Press Ctrl-C to stop.") })
	secrets := map[string]string{"the player-token key": tokenSecret}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for _, role := range []string{"admin", "operator", "matchmaker", "viewer", "auditor"} {
		secrets["the "+role+" API key"] = read(filepath.Join(dev.KeysDir(data), role+".key"))
	}
	dbURL := read(dev.DatabaseURLFile(data))
	if at := strings.Index(dbURL, "@"); at > 0 {
		_, pw, _ := strings.Cut(dbURL[:at], "postgres://postgres:")
		secrets["the database password"] = pw
	}
	for _, p := range append(natsauth.Components(), natsauth.HostPrincipal("h1")) {
		c, err := natsauth.ReadCreds(natsauth.CredsPath(dev.NATSAuthDir(data), p))
		if err != nil {
			t.Fatal(err)
		}
		seed, err := c.Key.Seed()
		if err != nil {
			t.Fatal(err)
		}
		secrets["the NATS seed of "+p] = string(seed)
	}
	for name, secret := range secrets {
		if len(secret) < 16 {
			t.Fatalf("%s is %q: the test would grep for nothing", name, secret)
		}
	}
	// Calls that log: a wrong key, and a right one.
	rest := ""
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "REST" {
			rest = f[1]
		}
	}
	for _, key := range []string{"wrong-key", secrets["the admin API key"]} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, rest+"/v1/fleets", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, "tether dev's command line", string(cmdline), secrets)
	if err := cmd.Cancel(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // stopped by a signal
	assertNoSecret(t, "tether dev's banner and logs", out.String(), secrets)
	if !strings.Contains(out.String(), "call refused: bad credentials") {
		t.Errorf("the wrong key's call was not logged; the test checks nothing there:\n%s", out.String())
	}

	// Start-up errors that name a URL with its password or token.
	natsURL := natstest.Start(t).ClientURL()
	for _, tc := range []struct{ args []string }{
		{[]string{"migrate", "--skip-database", "--nats-url", "nats://tether:nats-PASSWORD-1@127.0.0.1:1"}},
		{[]string{"migrate", "--skip-database", "--nats-url", "nats://nats-TOKEN-2@127.0.0.1:1"}},
		{[]string{"migrate", "--nats-url", natsURL, "--database-url", "postgres://tether:db-PASSWORD-3@127.0.0.1:1/tether"}},
		{[]string{"apiserver", "--nats-url", natsURL, "--database-url", "postgres://tether:db-PASSWORD-3@127.0.0.1:1/tether",
			"--player-token-keys-file", "/nonexistent"}},
	} {
		got, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
		if err == nil {
			t.Fatalf("%v succeeded", tc.args)
		}
		assertNoSecret(t, strings.Join(tc.args[:1], " ")+"'s error", string(got), map[string]string{
			"a NATS password": "nats-PASSWORD-1", "a NATS token": "nats-TOKEN-2", "a database password": "db-PASSWORD-3"})
	}
}
