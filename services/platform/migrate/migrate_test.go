package migrate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/nats/lease"
	apireplicas "github.com/tetherhq/tether/services/nats/replicas"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// streams are the stream behind every stream and bucket migrate sets up.
var streams = []string{events.StreamName, commands.StreamName, "KV_" + hostbeat.Bucket, "KV_" + lease.Bucket, "KV_" + apireplicas.Bucket}

// replicas returns each stream's configured replicas.
func replicas(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, name := range streams {
		s, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		out[name] = s.CachedInfo().Config.Replicas
	}
	return out
}

func TestValidate(t *testing.T) {
	for _, n := range []int{2, 4, 6, -1} {
		o := migrate.Options{Replicas: n}
		if err := o.Validate(); err == nil {
			t.Errorf("%d replicas accepted", n)
		}
	}
	for _, n := range []int{0, 1, 3, 5} {
		o := migrate.Options{Replicas: n}
		if err := o.Validate(); err != nil {
			t.Errorf("%d replicas: %v", n, err)
		}
	}
}

// Everything is created, the lease TTL is the bucket's, and a second run
// changes nothing (the services open what it made).
func TestSetsUpEveryStreamAndBucket(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	ctx := t.Context()
	opts := migrate.Options{LeaseTTL: 7 * time.Second}
	if err := migrate.NATS(ctx, js, opts); err != nil {
		t.Fatal(err)
	}
	before := map[string]time.Time{}
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("%s not created: %v", name, err)
		}
		before[name] = s.CachedInfo().Created
	}
	if err := migrate.NATS(ctx, js, opts); err != nil {
		t.Fatal(err)
	}
	for name, created := range before {
		s, err := js.Stream(ctx, name)
		if err != nil || !s.CachedInfo().Created.Equal(created) {
			t.Fatalf("%s recreated by a second run: %v", name, err)
		}
	}
	if _, err := natsjs.New(ctx, js, natsjs.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := commands.New(ctx, js); err != nil {
		t.Fatal(err)
	}
	if _, err := hostbeat.Open(ctx, js); err != nil {
		t.Fatal(err)
	}
	l, err := lease.Open(ctx, js, "controller", "c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 7*time.Second {
		t.Fatalf("lease TTL %s, want the 7s migrate was given", l.TTL())
	}
	if err := migrate.NATS(ctx, js, migrate.Options{Replicas: 3}); err == nil {
		t.Fatal("3 replicas on a single server: no error")
	}
}

// On a three-node cluster, an R1 deployment becomes R3 in place, its
// events kept, and then survives the loss of any one node.
func TestReplicasChangeInPlaceAndSurviveANode(t *testing.T) {
	nodes := natstest.StartCluster(t, 3)
	_, js := natstest.ConnectAll(t, nodes)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if err := migrate.NATS(ctx, js, migrate.Options{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	for name, n := range replicas(t, js) {
		if n != 1 {
			t.Fatalf("%s has %d replicas after --stream-replicas 1", name, n)
		}
	}
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendFleet := func(name string) {
		t.Helper()
		// A stream whose leader was lost elects another first: seconds,
		// more on a machine busy with other tests' clusters.
		wait.Until(t, 90*time.Second, "append "+name, func() error {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second) // try again rather than wait on a gone leader
			defer cancel()
			_, err := store.Append(actx, events.MustSubject("fleets/"+name), 0, events.New("fleets/"+name, time.Now(), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 1}}))
			if errors.Is(err, events.ErrConflict) {
				return nil // an earlier try landed
			}
			return err
		})
	}
	appendFleet("before")

	if err := migrate.NATS(ctx, js, migrate.Options{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for name, n := range replicas(t, js) {
		if n != 3 {
			t.Fatalf("%s has %d replicas after --stream-replicas 3", name, n)
		}
	}
	// Every replica has caught up before a node goes.
	wait.Until(t, 60*time.Second, "the events stream's replicas to be current", func() error {
		s, err := js.Stream(ctx, events.StreamName)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			return errors.New("not yet 3 peers")
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current {
				return errors.New(r.Name + " not current")
			}
		}
		return nil
	})

	// Lose the node that leads the events stream.
	s, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if n.Name() == info.Cluster.Leader {
			nodes[i].Shutdown()
		}
	}
	appendFleet("after")
	wait.Until(t, 60*time.Second, "both fleets in the stream", func() error {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second) // a read stuck on the lost node is tried again
		defer cancel()
		hist, err := store.History(actx, events.SubjectPrefix+"."+events.KindFleet+".>", 0)
		if err != nil {
			return err
		}
		if len(hist) != 2 {
			return errors.New("not 2 events yet")
		}
		return nil
	})
}

// A JetStream API reply lost on the way (as while a new cluster settles)
// costs one try of a step, not the migration: the requests go through a
// relay that drops the first and the fifth, and the migration, whose own
// context is far shorter than a reply-less wait would need without a bound
// per try, completes.
func TestALostReplyIsTriedAgain(t *testing.T) {
	url := natstest.Start(t)
	nc, _ := natstest.Connect(t, url)
	relay, _ := natstest.Connect(t, url)
	var mu sync.Mutex
	seen, dropped := 0, 0
	sub, err := relay.Subscribe("LOSSY.API.>", func(m *nats.Msg) {
		mu.Lock()
		seen++
		drop := seen == 1 || seen == 5
		if drop {
			dropped++
		}
		mu.Unlock()
		if drop {
			return
		}
		fwd := &nats.Msg{Subject: "$JS.API." + strings.TrimPrefix(m.Subject, "LOSSY.API."), Data: m.Data, Header: m.Header}
		resp, err := relay.RequestMsg(fwd, 5*time.Second)
		if err != nil {
			t.Errorf("relay %s: %v", fwd.Subject, err)
			return
		}
		if err := m.RespondMsg(resp); err != nil {
			t.Errorf("relay the reply to %s: %v", fwd.Subject, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := relay.Flush(); err != nil { // the relay is subscribed before the first request
		t.Fatal(err)
	}
	js, err := jetstream.NewWithAPIPrefix(nc, "LOSSY.API")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := migrate.NATS(ctx, js, migrate.Options{AttemptTimeout: 500 * time.Millisecond}); err != nil {
		t.Fatalf("migrate through a relay that lost two replies: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if dropped != 2 {
		t.Fatalf("%d requests dropped of %d; want 2", dropped, seen)
	}
	_, direct := natstest.Connect(t, url)
	if got := replicas(t, direct); len(got) != len(streams) {
		t.Fatalf("streams after the migration: %v", got)
	}
}
