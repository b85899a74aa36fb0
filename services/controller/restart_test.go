package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// TestServersOfARestartedAgentAreReplaced: a host's agent registers again
// (it restarted; its heartbeat never stopped, so the host never left
// ONLINE). Its live servers whose last event precedes the registration are
// terminated with AGENT_RESTARTED and the evidence, and replaced; a server
// that heard from the new agent since, and one still SCHEDULED, are left
// alone.
func TestServersOfARestartedAgentAreReplaced(t *testing.T) {
	w := newWorld(t)
	w.host("h1", 10)
	w.agent("h1", 10)
	w.beat("h1")
	// No start is sent again within the test: the SCHEDULED server below stays so.
	c := w.controller("c1", func(o *controller.Options) { o.StartTimeout = time.Minute })
	w.fleet("arena", testSpec(3, eventsv1.Scheduling_SCHEDULING_PACKED))
	wait.For(t, 10*time.Second, "3 READY servers", func() bool {
		return w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 3
	})
	rows := w.rows("arena")
	kept := rows[0].State.GetName()
	// What follows happens while no controller looks (the test's premise:
	// the new agent takes kept back before a controller sees the
	// registration); a controller that looked in between ended kept, and
	// the test's own event for it was refused.
	c.stop()
	// A server scheduled on h1 whose start the old agent never acted on (the
	// new agent gets it from the command stream, or the controller sends it
	// again): SCHEDULED is left alone. It is its fleet's one replica.
	pending := events.GameServerName("spare", "gs-pending")
	w.append(pending, 0, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: testSpec(1, 0).GetTemplate()})
	w.fleet("spare", testSpec(1, eventsv1.Scheduling_SCHEDULING_PACKED))

	w.append(events.HostName("h1"), events.AnySequence, &eventsv1.HostRegistered{Capacity: 10, Address: "127.0.0.1", AgentIncarnation: "second"})
	// The new agent took kept back (it was in its records) before the
	// controller looked: an event after the registration.
	if err := w.gameServerEvent(kept, "hosts/h1", &eventsv1.LabelsChanged{Set: map[string]string{"agent": "second"}}); err != nil {
		t.Fatal(err)
	}
	c = w.controller("c2", func(o *controller.Options) { o.StartTimeout = time.Minute })

	wait.For(t, 10*time.Second, "the other two terminated and replaced", func() bool {
		st := w.states("arena")
		return st[rows[1].State.GetName()] == eventsv1.Lifecycle_LIFECYCLE_TERMINATED &&
			st[rows[2].State.GetName()] == eventsv1.Lifecycle_LIFECYCLE_TERMINATED &&
			w.countStates("arena", eventsv1.Lifecycle_LIFECYCLE_READY) == 3
	})
	c.passes(t, 2)
	for _, r := range rows[1:] {
		h := w.history(r.State.GetName())
		term, ok := h[len(h)-1].Data.(*eventsv1.GameServerTerminated)
		if !ok || term.GetReason() != eventsv1.Reason_REASON_AGENT_RESTARTED ||
			!strings.HasPrefix(term.GetEvidence().GetDetail(), "its host's agent restarted: hosts/h1 registered again") ||
			term.GetEvidence().GetRequestedBy() != "controllers/c2" {
			t.Fatalf("%s ended with %s %v", r.State.GetName(), h[len(h)-1].Type, h[len(h)-1].Data)
		}
	}
	st := w.states("arena")
	if l := w.states("spare")[pending]; l != eventsv1.Lifecycle_LIFECYCLE_SCHEDULED {
		t.Errorf("the SCHEDULED server is %v; its start may still come", l)
	}
	if st[kept] != eventsv1.Lifecycle_LIFECYCLE_READY {
		t.Errorf("the server the new agent took back is %v, want READY", st[kept])
	}
}
