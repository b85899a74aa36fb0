package apiserver_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// A host written by an operator's command (cordon, drain, uncordon) comes
// back with its last heartbeat from its live beat, as a read shows it,
// not the older one of the views: `tetherctl hosts drain h1` printed a
// heartbeat 50 s old while `hosts list` said 1 s.
func TestHostWritesShowTheLiveHeartbeat(t *testing.T) {
	s := newStack(t, stackOptions{jetStream: true})
	registered := time.Now().Add(-time.Minute)
	reg := events.New(events.HostName("h1"), registered, &eventsv1.HostRegistered{Capacity: 10, Address: "127.0.0.1"})
	reg.Producer = "hosts/h1"
	if _, err := s.Store.Append(s.Ctx, events.MustSubject(events.HostName("h1")), 0, reg); err != nil {
		t.Fatal(err)
	}
	kv, err := hostbeat.Open(s.Ctx, s.JS)
	if err != nil {
		t.Fatal(err)
	}
	if err := hostbeat.Put(s.Ctx, kv, "h1", hostbeat.Beat{Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var live time.Time
	wait.Until(t, 10*time.Second, "a read of h1 to show its live beat", func() error {
		r := s.do("GET", "/v1/hosts/h1", nil)
		if r.status != http.StatusOK {
			return fmt.Errorf("status %d: %v", r.status, r.body)
		}
		got, _ := r.body["lastHeartbeatTime"].(string)
		at, err := time.Parse(time.RFC3339Nano, got)
		if err != nil || !at.After(registered.Add(30*time.Second)) {
			return fmt.Errorf("last heartbeat %q, the views' (%v)", got, err)
		}
		live = at
		return nil
	})
	for _, verb := range []string{"cordon", "drain", "uncordon"} {
		r := s.do("POST", "/v1/hosts/h1:"+verb, map[string]any{})
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %v", verb, r.status, r.body)
		}
		got, _ := r.body["lastHeartbeatTime"].(string)
		if at, err := time.Parse(time.RFC3339Nano, got); err != nil || at.Before(live) {
			t.Errorf("%s answered last heartbeat %q, older than the live %s a read showed", verb, got, live.Format(time.RFC3339Nano))
		}
	}
}
