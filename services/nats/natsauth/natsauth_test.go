package natsauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/nats/hostlogs"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/testkit/wait"
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
		// Only the controller purges the events stream: the archiver it
		// runs while it leads.
		s, err := js.Stream(ctx, "TETHER_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		if err := s.Purge(pctx, jetstream.WithPurgeSubject("tether.ev.fleet.none")); (err == nil) != (p == natsauth.Controller) {
			t.Errorf("%s purging the events stream: %v", p, err)
		}
		pcancel()
	}
	if _, err := admin.Stream(ctx, "TETHER_EVENTS"); err != nil {
		t.Fatalf("the events stream is gone: %v", err)
	}
}

// TestRotateAndRevokeWithoutARestart rotates a host's key while its
// connection runs: the connection moves to the new key when it sees the
// file change, the old key is revoked with a configuration reload, and the
// events signed by either key stay verified.
func TestRotateAndRevokeWithoutARestart(t *testing.T) {
	dir, srv := startAuthServer(t, "h1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, admin := connectAs(t, dir, srv, natsauth.Admin)
	if err := migrate.NATS(ctx, admin, migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	path := natsauth.CredsPath(dir, natsauth.HostPrincipal("h1"))
	creds, err := natsauth.LoadCredentials(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	oldFile, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), creds.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := natsjs.New(ctx, js, natsjs.Options{Signer: creds})
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go creds.Watch(watchCtx, 20*time.Millisecond, func() { _ = nc.ForceReconnect() })
	e := events.New("hosts/h1", time.Now(), &eventsv1.HostRegistered{Capacity: 1})
	if _, err := store.Append(ctx, events.MustSubject("hosts/h1"), events.AnySequence, e); err != nil {
		t.Fatalf("append as h1: %v", err)
	}

	oldKey, err := natsauth.Rotate(dir, natsauth.HostPrincipal("h1"))
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the credentials to rotate", func() bool { return creds.Current().PublicKey != oldKey })
	if err := natsauth.Revoke(dir, oldKey); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	// The running connection is on the new key: it still writes.
	wait.For(t, 10*time.Second, "a write with the new key", func() bool {
		e := events.New("hosts/h1", time.Now(), &eventsv1.HostOnline{})
		c, done := context.WithTimeout(ctx, time.Second)
		defer done()
		_, err := store.Append(c, events.MustSubject("hosts/h1"), events.AnySequence, e)
		return err == nil
	})
	// The old credentials no longer connect.
	oldPath := filepath.Join(t.TempDir(), "old.creds")
	if err := os.WriteFile(oldPath, oldFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := nats.Connect(srv.ClientURL(), nats.UserCredentials(oldPath)); err == nil {
		c.Close()
		t.Fatal("the revoked credentials connected")
	}
	// Both keys' events are verified as h1's.
	signers, err := natsauth.LoadSigners(filepath.Join(dir, natsauth.SignersFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := natsjs.New(ctx, admin, natsjs.Options{Verifier: natsjs.NewVerifier(signers)})
	if err != nil {
		t.Fatal(err)
	}
	hist, err := reader.History(ctx, events.MustSubject("hosts/h1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) < 2 {
		t.Fatalf("%d events", len(hist))
	}
	for _, e := range hist {
		if e.Writer != "hosts/h1" {
			t.Errorf("event %d (%s) was written by %q", e.Sequence, e.Type, e.Writer)
		}
	}
}

// TestInitBringsPermissionsUpToDate: credentials an earlier version made,
// without a later version's subjects (a host's logs subject, the answers
// to its log reads), are rewritten by Init with this version's
// permissions and the same key, even for a host Init is not given; those
// already current are left as they are.
func TestInitBringsPermissionsUpToDate(t *testing.T) {
	dir := t.TempDir()
	if err := natsauth.Init(dir, []string{"h1"}); err != nil {
		t.Fatal(err)
	}
	path := natsauth.CredsPath(dir, natsauth.HostPrincipal("h1"))
	current, err := natsauth.ReadCreds(path)
	if err != nil {
		t.Fatal(err)
	}
	// What an earlier version wrote: no logs subject, no answers.
	uc, err := jwt.DecodeUserClaims(current.JWT)
	if err != nil {
		t.Fatal(err)
	}
	uc.Sub.Allow.Remove(hostlogs.Subject("h1"))
	uc.Resp = nil
	seed, err := os.ReadFile(filepath.Join(dir, "keys", "account.nk"))
	if err != nil {
		t.Fatal(err)
	}
	account, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		t.Fatal(err)
	}
	token, err := uc.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	userSeed, err := current.Key.Seed()
	if err != nil {
		t.Fatal(err)
	}
	old, err := jwt.FormatUserConfig(token, userSeed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	api := natsauth.CredsPath(dir, natsauth.APIServer)
	apiBefore, err := os.ReadFile(api)
	if err != nil {
		t.Fatal(err)
	}

	if err := natsauth.Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	after, err := natsauth.ReadCreds(path)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeUserClaims(after.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if after.PublicKey != current.PublicKey {
		t.Errorf("the host's key changed: %s, was %s", after.PublicKey, current.PublicKey)
	}
	if !claims.Sub.Allow.Contains(hostlogs.Subject("h1")) || claims.Resp == nil || claims.Resp.MaxMsgs != 1 || claims.Resp.Expires != hostlogs.ReplyWindow {
		t.Errorf("the host's permissions were not brought up to date: sub %v, resp %+v", claims.Sub.Allow, claims.Resp)
	}
	if apiAfter, err := os.ReadFile(api); err != nil || !bytes.Equal(apiAfter, apiBefore) {
		t.Errorf("current credentials were rewritten: %v", err)
	}
}

// projectorConsumer is the projector's durable consumer of the events
// stream (projections/postgres).
const projectorConsumer = "tether-projector"

// Only the projector touches its consumer of the events stream. The API's,
// the controller's and a host's credentials are refused every request that
// names it: deleting it, creating or updating it (with a filter or
// without, new style or legacy durable), creating a legacy ephemeral
// consumer of the events stream (whose body names it), pulling its
// deliveries and acknowledging them. The consumer stays as the projector
// made it, and the API still reads histories and watches, whose consumers
// name themselves, and watches its buckets. Before, the API's and the
// controller's deleted it, and the views stopped.
func TestOnlyTheProjectorTouchesItsConsumer(t *testing.T) {
	dir, srv := startAuthServer(t, "h1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, admin := connectAs(t, dir, srv, natsauth.Admin)
	if err := migrate.NATS(ctx, admin, migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Publish(ctx, events.MustSubject(events.FleetName("f")), []byte("an event to pull")); err != nil {
		t.Fatal(err)
	}
	_, proj := connectAs(t, dir, srv, natsauth.Projector)
	stream, err := proj.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	made := jetstream.ConsumerConfig{Durable: projectorConsumer, AckPolicy: jetstream.AckAllPolicy, MaxAckPending: 100}
	if _, err := stream.CreateOrUpdateConsumer(ctx, made); err != nil {
		t.Fatalf("the projector makes its consumer: %v", err)
	}
	api := "$JS.API.CONSUMER."
	for _, name := range []string{natsauth.APIServer, natsauth.Controller, natsauth.HostPrincipal("h1")} {
		p := join(t, ctx, dir, srv, name, nil)
		s, err := p.js.Stream(ctx, events.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		// A refused request is not answered: the refusal is the
		// connection's asynchronous error, looked for below.
		refused := func(what string, try func(context.Context) error) {
			t.Helper()
			c, done := context.WithTimeout(ctx, 300*time.Millisecond)
			defer done()
			if err := try(c); err == nil {
				t.Errorf("%s could %s", name, what)
			}
		}
		refused("delete the projector's consumer", func(c context.Context) error { return s.DeleteConsumer(c, projectorConsumer) })
		changed := made
		changed.MaxAckPending = 1
		refused("update the projector's consumer", func(c context.Context) error { _, err := s.CreateOrUpdateConsumer(c, changed); return err })
		changed.FilterSubject = events.SubjectPrefix + ".none"
		refused("update the projector's consumer with a filter", func(c context.Context) error { _, err := s.CreateOrUpdateConsumer(c, changed); return err })
		legacy, err := json.Marshal(map[string]any{"stream_name": events.StreamName, "config": map[string]any{"name": projectorConsumer, "ack_policy": "all", "max_ack_pending": 1}})
		if err != nil {
			t.Fatal(err)
		}
		durable, err := json.Marshal(map[string]any{"stream_name": events.StreamName, "config": map[string]any{"durable_name": projectorConsumer, "ack_policy": "all", "max_ack_pending": 1}})
		if err != nil {
			t.Fatal(err)
		}
		forbidden := map[string][]byte{
			api + "CREATE." + events.StreamName:                                   legacy,
			api + "DURABLE.CREATE." + events.StreamName + "." + projectorConsumer: durable,
			api + "MSG.NEXT." + events.StreamName + "." + projectorConsumer:       []byte(`{"batch":1,"no_wait":true}`),
			api + "PAUSE." + events.StreamName + "." + projectorConsumer:          []byte(`{"pause_until":"2100-01-01T00:00:00Z"}`),
		}
		for subject, body := range forbidden {
			refused("ask "+subject, func(c context.Context) error { _, err := p.nc.RequestWithContext(c, subject, body); return err })
		}
		ack := "$JS.ACK." + events.StreamName + "." + projectorConsumer + ".1.1.1.0.0"
		if err := p.nc.Publish(ack, nil); err != nil {
			t.Fatal(err)
		}
		for _, subject := range append(slices.Collect(maps.Keys(forbidden)), ack,
			api+"DELETE."+events.StreamName+"."+projectorConsumer, api+"CREATE."+events.StreamName+"."+projectorConsumer) {
			wait.For(t, 5*time.Second, name+"'s publish to "+subject+" to be refused", func() bool {
				return strings.Contains(p.violations(), "Permissions Violation for Publish to \""+subject+"\"")
			})
		}
	}
	info, err := stream.Consumer(ctx, projectorConsumer)
	if err != nil {
		t.Fatalf("the projector's consumer: %v", err)
	}
	if c := info.CachedInfo().Config; c.MaxAckPending != made.MaxAckPending || c.FilterSubject != "" || info.CachedInfo().Delivered.Stream != 0 {
		t.Fatalf("the projector's consumer changed: max ack pending %d, filter %q, delivered %d", c.MaxAckPending, c.FilterSubject, info.CachedInfo().Delivered.Stream)
	}
	// What the API does with consumers of its own still works.
	apiServer := join(t, ctx, dir, srv, natsauth.APIServer, nil)
	if evs, err := apiServer.store.History(ctx, events.SubjectPrefix+".>", 1); err != nil || len(evs) != 1 {
		t.Fatalf("the API reads the events' history: %d events, %v", len(evs), err)
	}
	for _, err := range apiServer.store.Watch(ctx, 0, 1, nil) {
		if err != nil && !errors.Is(err, events.ErrUndecodable) {
			t.Fatalf("the API watches the events: %v", err)
		}
	}
	kv, err := apiServer.js.KeyValue(ctx, hostbeat.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatalf("the API watches the heartbeats: %v", err)
	}
	defer w.Stop()
	select {
	case <-w.Updates():
	case <-ctx.Done():
		t.Fatal("the API's watch of the heartbeats says nothing")
	}
}
