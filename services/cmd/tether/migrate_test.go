package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/nats/lease"
	"github.com/tetherhq/tether/services/projector"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// tether runs the command line in this process until ctx ends and returns
// its error.
func tether(ctx context.Context, args ...string) error {
	root := rootCommand()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	return root.ExecuteContext(ctx)
}

// Services never create storage: before `tether migrate` they exit at once
// saying to run it; `tether migrate` refuses an even replica count, sets
// up NATS and PostgreSQL, and then a projector starts, serves its admin
// endpoints, and releases its lease when it is stopped.
func TestServicesNeedTetherMigrate(t *testing.T) {
	srv := natstest.Start(t)
	nats := "--nats-url=" + srv.ClientURL()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dbName := "migrate_cmd"
	if err := pgtest.Server().CreateDatabase(ctx, dbName, ""); err != nil {
		t.Fatal(err)
	}
	db := "--database-url=" + pgtest.Server().URL(dbName)

	mustSayMigrate := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "tether migrate") {
			t.Fatalf("%s before tether migrate: %v, want an error that says to run it", what, err)
		}
	}
	mustSayMigrate("the agent", tether(ctx, "agent", nats, "--host-id=h1", "--log-level=error"))
	mustSayMigrate("the controller", tether(ctx, "controller", nats, db, "--log-level=error"))

	t.Setenv("TETHER_STREAM_REPLICAS", "2")
	if err := tether(ctx, "migrate", nats, db); err == nil || !strings.Contains(err.Error(), "1, 3 or 5") {
		t.Fatalf("migrate with TETHER_STREAM_REPLICAS=2: %v", err)
	}
	t.Setenv("TETHER_STREAM_REPLICAS", "1")
	if err := tether(ctx, "migrate", nats, "--skip-database", "--lease-ttl=1m"); err != nil {
		t.Fatal(err)
	}
	mustSayMigrate("the projector on an empty database", tether(ctx, "projector", nats, db, "--log-level=error"))
	if err := tether(ctx, "migrate", nats, db, "--lease-ttl=1m", "--log-level=error"); err != nil {
		t.Fatal(err)
	}

	admin := fmt.Sprintf("127.0.0.1:%d", freeport.Block(t, 1))
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- tether(pctx, "projector", nats, db, "--admin-addr="+admin, "--id=proj-1", "--log-level=error")
	}()
	wait.Until(t, 20*time.Second, "the projector's /readyz", func() error {
		body, err := get("http://" + admin + "/readyz")
		if err != nil {
			return err
		}
		if !strings.Contains(body, "holds the projector lease") {
			return errors.New(body)
		}
		return nil
	})
	if body, err := get("http://" + admin + "/metrics"); err != nil || !strings.Contains(body, "tether_projector_lag_events") {
		t.Fatalf("/metrics: %v\n%.500s", err, body)
	}
	_, js := natstest.Connect(t, srv)
	kv, err := js.KeyValue(ctx, lease.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, projector.LeaseRole); err != nil || string(e.Value()) != "proj-1" {
		t.Fatalf("the projector lease: %v, %v", e, err)
	}
	stop() // what SIGTERM does
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, projector.LeaseRole); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the lease after the projector stopped: %v, want it released", err)
	}
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}
