package postgres_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// TestAllocationSkipsServersOfARestartedAgent: once a host's agent
// registers again (it restarted and supervises none of its predecessor's
// processes), the READY servers whose last event precedes the registration
// are no allocation candidates; a server with an event after it is.
func TestAllocationSkipsServersOfARestartedAgent(t *testing.T) {
	e := newEnv(t)
	e.scenario(4) // gs-0 and gs-1 READY on hosts/h1; gs-2, gs-3 terminated
	e.append("hosts/h1", &eventsv1.HostRegistered{Capacity: 100, Address: "127.0.0.1", AgentIncarnation: "second"})
	// gs-1 hears from the new agent after the registration (say it was
	// reclaimed); gs-0 does not.
	e.append("fleets/arena/gameServers/gs-1", &eventsv1.LabelsChanged{Set: map[string]string{"seen": "again"}})
	pool := e.pool()
	e.run(e.projector(pool, "registration", time.Minute, 7))
	v := postgres.NewViews(pool)

	host, err := v.Host(e.ctx, "hosts/h1")
	if err != nil {
		t.Fatal(err)
	}
	if host.State.GetRegisteredSequence() == 0 || host.State.GetAgentIncarnation() != "second" {
		t.Fatalf("host registration not folded: sequence %d, incarnation %q", host.State.GetRegisteredSequence(), host.State.GetAgentIncarnation())
	}
	got, err := v.AllocationCandidates(e.ctx, projections.AllocationQuery{Fleet: "fleets/arena", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got {
		names = append(names, r.State.GetName())
	}
	if want := []string{"fleets/arena/gameServers/gs-1"}; !slices.Equal(names, want) {
		t.Fatalf("candidates after the agent registered again = %v, want %v", names, want)
	}
	ready, err := v.ListGameServers(e.ctx, projections.GameServerQuery{Fleet: "fleets/arena", State: "READY", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 2 {
		t.Fatalf("READY rows = %d, want 2 (the view shows them; only allocation skips one)", len(ready))
	}
}

// TestAllocationAvoidsCordonedAndDrainingHosts: a draining host's READY
// servers are never candidates (their fleet is moving them), nor are an
// UNREACHABLE or LOST host's (its agent would not hear of the allocation),
// and a cordoned host's come after every other host's, whatever its load.
func TestAllocationAvoidsCordonedAndDrainingHosts(t *testing.T) {
	e := newEnv(t)
	tmpl := &eventsv1.GameServerTemplate{Command: "/bin/game"}
	for i, h := range []string{"h1", "h2", "h3", "h4", "h5"} {
		e.append("hosts/"+h, &eventsv1.HostRegistered{Capacity: 10, Address: "127.0.0.1"})
		for j := range 2 {
			name := fmt.Sprintf("fleets/arena/gameServers/%s-%d", h, j)
			e.append(name, &eventsv1.GameServerScheduled{Host: "hosts/" + h, Template: tmpl},
				&eventsv1.ProcessStarted{Pid: int32(100*i + j + 1), Address: "127.0.0.1", Attempt: 1},
				&eventsv1.GameServerReady{})
		}
	}
	// h1 is the busiest (PACKED would pick it first), but cordoned.
	e.append("fleets/arena/gameServers/h1-1", &eventsv1.GameServerAllocated{GameSession: "gameSessions/s1"})
	e.append("hosts/h1", &eventsv1.HostCordoned{RequestedBy: "ops"})
	e.append("hosts/h2", &eventsv1.HostDrainRequested{RequestedBy: "ops"})
	e.append("hosts/h4", &eventsv1.HostUnreachable{LastHeartbeatTime: timestamppb.Now()})
	e.append("hosts/h5", &eventsv1.HostUnreachable{LastHeartbeatTime: timestamppb.Now()}, &eventsv1.HostLost{LastHeartbeatTime: timestamppb.Now()})
	pool := e.pool()
	e.run(e.projector(pool, "cordon", time.Minute, 50))
	v := postgres.NewViews(pool)
	got, err := v.AllocationCandidates(e.ctx, projections.AllocationQuery{Fleet: "fleets/arena", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got {
		names = append(names, r.State.GetName())
	}
	want := []string{"fleets/arena/gameServers/h3-0", "fleets/arena/gameServers/h3-1", "fleets/arena/gameServers/h1-0"}
	if !slices.Equal(names, want) {
		t.Fatalf("candidates = %v, want %v (h3, then cordoned h1, never draining h2, unreachable h4 or lost h5)", names, want)
	}
}

// TestAllocationPrefersTheNewestRevision: during a rollout a fleet's
// matches go to its new revision's servers, so the outdated ones are free
// to be replaced.
func TestAllocationPrefersTheNewestRevision(t *testing.T) {
	e := newEnv(t)
	tmpl := &eventsv1.GameServerTemplate{Command: "/bin/game"}
	e.append("hosts/h1", &eventsv1.HostRegistered{Capacity: 10, Address: "127.0.0.1"})
	for i, rev := range []int64{1, 2, 1} {
		e.append(fmt.Sprintf("fleets/arena/gameServers/gs-%d", i), &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: tmpl, Revision: rev},
			&eventsv1.ProcessStarted{Pid: int32(i + 1), Address: "127.0.0.1", Attempt: 1}, &eventsv1.GameServerReady{})
	}
	pool := e.pool()
	e.run(e.projector(pool, "revisions", time.Minute, 50))
	got, err := postgres.NewViews(pool).AllocationCandidates(e.ctx, projections.AllocationQuery{Fleet: "fleets/arena", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].State.GetName() != "fleets/arena/gameServers/gs-1" {
		t.Fatalf("candidates %v, want gs-1 (revision 2) first", got)
	}
}

// TestHostsChangedSince: the hosts whose last event is after a sequence, in
// sequence order; asked again from the last one, only later changes.
func TestHostsChangedSince(t *testing.T) {
	e := newEnv(t)
	e.append("hosts/h1", &eventsv1.HostRegistered{Capacity: 10, Address: "127.0.0.1"})
	e.append("hosts/h2", &eventsv1.HostRegistered{Capacity: 10, Address: "127.0.0.2"})
	e.append("hosts/h1", &eventsv1.HostRegistered{Capacity: 20, Address: "127.0.0.1", AgentIncarnation: "second"})
	pool := e.pool()
	e.run(e.projector(pool, "hosts-changed", time.Minute, 3))
	v := postgres.NewViews(pool)
	all, err := v.HostsChangedSince(e.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range all {
		names = append(names, fmt.Sprintf("%s@%d", r.State.GetName(), r.Sequence))
	}
	if want := []string{"hosts/h2@2", "hosts/h1@3"}; !slices.Equal(names, want) {
		t.Fatalf("hosts changed since 0 = %v, want %v", names, want)
	}
	if all[1].State.GetCapacity() != 20 {
		t.Fatalf("h1 read with capacity %d, want its last registration's 20", all[1].State.GetCapacity())
	}
	later, err := v.HostsChangedSince(e.ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(later) != 1 || later[0].State.GetName() != "hosts/h1" {
		t.Fatalf("hosts changed since 2 = %v, want h1 alone", later)
	}
}
