package dev_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// NATS stops for 10 s while a server crashes: afterwards every event is in
// the stream once and in order, the views are right, the crash is replaced,
// and no healthy server was terminated because of the outage.
func TestNATSOutage(t *testing.T) {
	storeDir := t.TempDir()
	ns, err := natsembed.Start(natsembed.Options{StoreDir: storeDir})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan dev.Addresses, 1)
	done := make(chan error, 1)
	go func() {
		done <- dev.Run(ctx, dev.Options{
			DataDir: t.TempDir(), GRPCPort: -1, RESTPort: -1, SDKPort: -1, NATSURL: ns.ClientURL(),
			GamePortBase: freeport.Block(t, 100), Hosts: 1, HostCapacity: 4, DatabaseURL: pgtest.NewDatabase(t),
			AllowedCommands: []string{filepath.Dir(gameServerBin)},
			Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
			Ready:           func(a dev.Addresses) { ready <- a },
		})
	}()
	var addrs dev.Addresses
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("dev stack: %v", err)
	}
	var ns2 *natsembed.Server
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev stack: %v", err)
		}
		if ns2 != nil {
			ns2.Shutdown()
		}
	}()
	s := &stack{t: t, ctx: ctx, addrs: addrs}
	s.store = storeFor(t, s)
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", fleetSpec(2, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var before []gameServer
	wait.For(t, 10*time.Second, "2 READY", func() bool {
		before = byState(s.gameServers("arena"), "READY")
		return len(before) == 2
	})
	victim, survivor := before[0], before[1]

	ns.Shutdown()
	if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.Holds(t, 10*time.Second, "the healthy server's process alive during the outage", func() bool { return alive(survivor.Pid) })
	if ns2, err = natsembed.Start(natsembed.Options{StoreDir: storeDir, Port: port}); err != nil {
		t.Fatal(err)
	}
	s.store = storeFor(t, s)

	wait.For(t, 30*time.Second, "the crash recorded and replaced, and the views right", func() bool {
		list := s.gameServers("arena")
		var victimGone bool
		for _, g := range list {
			if g.Name == victim.Name && g.State == "TERMINATED" && g.Reason == "PROCESS_EXITED" {
				victimGone = true
			}
		}
		return victimGone && len(byState(list, "READY")) == 2
	})
	var types []string
	for _, e := range s.history(victim.Name) {
		types = append(types, e.Type)
	}
	counts := map[string]int{}
	for _, typ := range types {
		counts[typ]++
	}
	if counts["ProcessExited"] != 1 || counts["GameServerTerminated"] != 1 || types[len(types)-1] != "GameServerTerminated" {
		t.Fatalf("the crash's events are not in the stream exactly once, in order: %v", types)
	}
	for _, e := range s.history(survivor.Name) {
		switch e.Type {
		case "GameServerUnhealthy", "ShutdownRequested", "GameServerTerminated":
			t.Fatalf("the healthy server got %s because of the outage", e.Type)
		}
	}
	if !alive(survivor.Pid) {
		t.Fatal("the healthy server's process is gone")
	}
}
