package natsauth_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/migrate"
)

// startAuthServer makes a credentials directory for hosts and starts an
// embedded server that takes it.
func startAuthServer(t *testing.T, hosts ...string) (dir string, srv *natsembed.Server) {
	t.Helper()
	dir = t.TempDir()
	if err := natsauth.Init(dir, hosts); err != nil {
		t.Fatal(err)
	}
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), AuthConfig: filepath.Join(dir, natsauth.ServerConf)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return dir, srv
}

// connectAs connects to srv as principal.
func connectAs(t *testing.T, dir string, srv *natsembed.Server, principal string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	creds, err := natsauth.LoadCredentials(natsauth.CredsPath(dir, principal), nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), append(creds.NATSOptions(), nats.Name(principal))...)
	if err != nil {
		t.Fatalf("connect as %s: %v", principal, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func TestOnlyAdminChangesStreams(t *testing.T) {
	dir, srv := startAuthServer(t, "h1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, admin := connectAs(t, dir, srv, natsauth.Admin)
	if err := migrate.NATS(ctx, admin, migrate.Options{}); err != nil {
		t.Fatalf("admin sets up the streams: %v", err)
	}
	if _, err := nats.Connect(srv.ClientURL()); err == nil {
		t.Fatal("a client without credentials connected")
	}
	for _, p := range []string{natsauth.APIServer, natsauth.Controller, natsauth.Projector, natsauth.HostPrincipal("h1")} {
		_, js := connectAs(t, dir, srv, p)
		if _, err := js.Stream(ctx, "TETHER_EVENTS"); err != nil {
			t.Errorf("%s cannot read the events stream: %v", p, err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		if err := js.DeleteStream(rctx, "TETHER_EVENTS"); err == nil {
			t.Errorf("%s deleted the events stream", p)
		}
		if _, err := js.UpdateStream(rctx, jetstream.StreamConfig{Name: "TETHER_EVENTS", Subjects: []string{"tether.ev.>"}, DenyDelete: false}); err == nil {
			t.Errorf("%s reconfigured the events stream", p)
		}
		rcancel()
	}
	if _, err := admin.Stream(ctx, "TETHER_EVENTS"); err != nil {
		t.Fatalf("the events stream is gone: %v", err)
	}
}
