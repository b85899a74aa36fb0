package hostbeat_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

func TestReadBeats(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	kv, err := setUp(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 5, time.UTC)
	inv := &hostbeat.Inventory{Servers: []hostbeat.Server{{Name: "fleets/a/gameServers/gs-1", Pid: 42}, {Name: "fleets/a/gameServers/gs-2"}}, Queued: 3}
	if err := hostbeat.Put(t.Context(), kv, "h1", hostbeat.Beat{Time: at, Inventory: inv}); err != nil {
		t.Fatal(err)
	}
	if err := hostbeat.Put(t.Context(), kv, "h2", hostbeat.Beat{Time: at, Inventory: &hostbeat.Inventory{}}); err != nil {
		t.Fatal(err)
	}
	// What older agents wrote: a bare timestamp. And a value nobody wrote.
	if _, err := kv.Put(t.Context(), "h3", []byte(at.Format(time.RFC3339Nano))); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "h4", []byte("{not json")); err != nil {
		t.Fatal(err)
	}

	beats, err := hostbeat.Read(t.Context(), kv)
	if err != nil {
		t.Fatal(err)
	}
	last, err := hostbeat.Last(t.Context(), kv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		want hostbeat.Beat
	}{
		{"h1", hostbeat.Beat{Time: at, Inventory: inv}},
		{"h2", hostbeat.Beat{Time: at, Inventory: &hostbeat.Inventory{}}},
		{"h3", hostbeat.Beat{Time: at}},
		{"h4", hostbeat.Beat{}},
	} {
		t.Run(tc.host, func(t *testing.T) {
			got, ok := beats[tc.host]
			if !ok {
				t.Fatalf("no beat read: %v", beats)
			}
			// Every value is a beat: liveness goes by when it was stored.
			if got.Stored.IsZero() || time.Since(got.Stored) > time.Minute || !last[tc.host].Equal(got.Stored) {
				t.Fatalf("stored at %s, Last says %s", got.Stored, last[tc.host])
			}
			if !got.WrittenAt().Equal(tc.want.Time) || !reflect.DeepEqual(got.Inv(), tc.want.Inventory) {
				t.Fatalf("beat %v %+v, want %v %+v", got.WrittenAt(), got.Inv(), tc.want.Time, tc.want.Inventory)
			}
		})
	}
	if !inv.Has("fleets/a/gameServers/gs-2") || inv.Has("fleets/a/gameServers/gs-3") {
		t.Fatal("Has")
	}
}

// setUp creates the bucket, as `tether migrate` does, and opens it.
func setUp(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	if err := hostbeat.Setup(ctx, js, 1); err != nil {
		return nil, err
	}
	return hostbeat.Open(ctx, js)
}

// TestOpenWithoutSetup: an agent never creates the bucket; it says to run
// `tether migrate`.
func TestOpenWithoutSetup(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	if _, err := hostbeat.Open(t.Context(), js); !errors.Is(err, jsclient.ErrNotSetUp) {
		t.Fatalf("Open without the bucket: %v, want ErrNotSetUp", err)
	}
}
