package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/dev/pgtemp/pgtest"
	"github.com/tetherhq/tether/services/dev/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// startTether runs the whole system in-process and returns its gRPC address.
func startTether(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan dev.Addresses, 1)
	done := make(chan error, 1)
	go func() {
		done <- dev.Run(ctx, dev.Options{
			DataDir: t.TempDir(), GRPCPort: -1, RESTPort: -1, NATSPort: -1, SDKPort: -1,
			GamePortBase: 23000 + os.Getpid()%100*10, Hosts: 1, HostCapacity: 4, DatabaseURL: pgtest.NewDatabase(t),
			Ready: func(a dev.Addresses) { ready <- a },
		})
	}()
	select {
	case a := <-ready:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("tether: %v", err)
			}
		})
		return a.GRPC
	case err := <-done:
		cancel()
		t.Fatalf("tether did not start: %v", err)
	}
	return ""
}

// run executes tetherctl in-process and returns its output and error.
func run(t *testing.T, addr string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRoot(&out)
	root.SetArgs(append([]string{"--addr", addr}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func mustRun(t *testing.T, addr string, args ...string) string {
	t.Helper()
	out, err := run(t, addr, args...)
	if err != nil {
		t.Fatalf("tetherctl %v: %v\n%s", args, describe(err), out)
	}
	return out
}

// eventually retries a command until its output contains want.
func eventually(t *testing.T, addr, want string, args ...string) string {
	t.Helper()
	var out string
	wait.For(t, 10*time.Second, fmt.Sprintf("tetherctl %v to print %q", args, want), func() bool {
		out = mustRun(t, addr, args...)
		return strings.Contains(out, want)
	})
	return out
}

func TestFleetLifecycle(t *testing.T) {
	addr := startTether(t)
	file := filepath.Join(t.TempDir(), "arena.yaml")
	if err := os.WriteFile(file, []byte(`name: arena
replicas: 0
template:
  command: /bin/sleep
  args: ["600"]
  ports: [{name: game, protocol: UDP}]
scheduling: DISTRIBUTED
labels: {mode: ranked}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, addr, "fleets", "create", "-f", file)
	if !strings.Contains(out, "fleets/arena") || !strings.Contains(out, "DISTRIBUTED") {
		t.Fatalf("create printed:\n%s", out)
	}
	eventually(t, addr, "fleets/arena", "fleets", "list")

	js := mustRun(t, addr, "fleets", "get", "arena", "-o", "json")
	var f struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(js), &f); err != nil || f.Name != "fleets/arena" || f.Labels["mode"] != "ranked" {
		t.Fatalf("get -o json: %v\n%s", err, js)
	}
	if y := mustRun(t, addr, "fleets", "get", "arena", "-o", "yaml"); !strings.Contains(y, "name: fleets/arena") {
		t.Fatalf("get -o yaml:\n%s", y)
	}

	mustRun(t, addr, "fleets", "scale", "arena", "2")
	eventually(t, addr, `"replicas": 2`, "fleets", "get", "arena", "-o", "json")
	eventually(t, addr, "hosts/h1", "hosts", "list")
	eventually(t, addr, "fleets/arena/gameServers/", "gameservers", "list", "--fleet", "arena")

	mustRun(t, addr, "fleets", "delete", "arena")
	var getErr error
	wait.For(t, 10*time.Second, "the deleted fleet to be gone", func() bool {
		_, getErr = run(t, addr, "fleets", "get", "arena")
		return getErr != nil
	})
	if !strings.Contains(describe(getErr), "not found (NOT_FOUND)") {
		t.Fatalf("get after delete: %v", describe(getErr))
	}
}

func TestBadFleetFileIsRefusedClearly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(file, []byte("name: x\nreplicas: 1\ncolour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "127.0.0.1:1", "fleets", "create", "-f", file)
	if err == nil || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("unknown field: %v", err)
	}
	_, err = run(t, "127.0.0.1:1", "fleets", "get", "x", "-o", "xml")
	if err == nil || !strings.Contains(err.Error(), "--output") {
		t.Fatalf("bad output: %v", err)
	}
}

func TestNamesAcceptShortForms(t *testing.T) {
	for in, want := range map[string]string{"arena": "fleets/arena", "fleets/arena": "fleets/arena"} {
		if got := fleetName(in); got != want {
			t.Errorf("fleetName(%q) = %q", in, got)
		}
	}
	for in, want := range map[string]string{"arena/gs-1": "fleets/arena/gameServers/gs-1", "fleets/arena/gameServers/gs-1": "fleets/arena/gameServers/gs-1"} {
		if got := gameServerName(in); got != want {
			t.Errorf("gameServerName(%q) = %q", in, got)
		}
	}
}
