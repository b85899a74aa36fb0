package stack_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Without options the stack is NATS and the event store only.
func TestBareStackIsNATSOnly(t *testing.T) {
	s := stack.New(t)
	if s.Store == nil || s.JS == nil || s.Pool != nil || s.Commands != nil || len(s.APIs) != 0 {
		t.Fatalf("bare stack: store %v, pool %v, commands %v, %d APIs", s.Store, s.Pool, s.Commands, len(s.APIs))
	}
}

// API replicas answer, and a projector started late, stopped and started
// again resumes from the views' checkpoint.
func TestAPIsAndAProjectorStartedLate(t *testing.T) {
	s := stack.New(t, stack.WithAPI(2))
	if len(s.APIs) != 2 || s.Commands == nil || s.Tokens == nil || s.ProjectorRunning() {
		t.Fatalf("%d APIs, commands %v, tokens %v, projector running %v", len(s.APIs), s.Commands, s.Tokens, s.ProjectorRunning())
	}
	for _, api := range s.APIs {
		resp, err := http.Get("http://" + api.HTTPAddr() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: /healthz %d", api.HTTPAddr(), resp.StatusCode)
		}
	}
	appendFleet := func(id string) uint64 {
		name := events.FleetName(id)
		seq, err := s.Store.Append(s.Ctx, events.MustSubject(name), 0, events.New(name, time.Now(), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{}}))
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	caughtUp := func(seq uint64) func() error {
		return func() error {
			cp, err := s.Views.Checkpoint(s.Ctx)
			if err == nil && cp < seq {
				err = fmt.Errorf("checkpoint %d, want %d", cp, seq)
			}
			return err
		}
	}
	s.StartProjector()
	wait.Until(t, 10*time.Second, "the views to show the first fleet", caughtUp(appendFleet("one")))
	s.StopProjector()
	seq := appendFleet("two")
	s.StartProjector()
	wait.Until(t, 10*time.Second, "the views to show the second fleet", caughtUp(seq))
}
