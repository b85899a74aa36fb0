package controller

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/controller/plan"
)

// BenchmarkSteadyPass measures the CPU of one pass's work on what it read
// at the scale run's size: 100,000 READY servers of 10 fleets on 10,000
// hosts, every fleet at its size and every host heard of, so the pass
// decides nothing. It is the part of a pass that grows with the servers
// (the views' reads and the appends are not in it): counting each host's
// servers, finding the fleets of servers outside the live fleets, and
// planning. "steady" has every host registered before the servers' last
// events; "a host lost, one registered since" has one more host LOST
// (with no servers left) and one more registered after every server's
// last event (with none yet), which turn off the pass's shortcuts for
// LOST hosts and orphans.
func BenchmarkSteadyPass(b *testing.B) {
	b.Run("steady", func(b *testing.B) { benchmarkPass(b, false) })
	b.Run("a host lost, one registered since", func(b *testing.B) { benchmarkPass(b, true) })
}

func benchmarkPass(b *testing.B, lostAndRegistered bool) {
	const fleets, hosts, perHost = 10, 10_000, 10
	s := plan.Snapshot{Now: t0, Heard: map[string]time.Time{}, Beats: map[string]plan.Beat{}}
	var hostRows []projections.Row[*eventsv1.HostState]
	for h := range hosts {
		id := fmt.Sprintf("h%d", h)
		hostRows = append(hostRows, projections.Row[*eventsv1.HostState]{State: &eventsv1.HostState{
			Name: events.HostName(id), Status: eventsv1.HostStatus_HOST_STATUS_ONLINE, Capacity: perHost, RegisteredSequence: 1,
		}, Sequence: 1})
		s.Heard[id] = t0
	}
	if lostAndRegistered {
		hostRows = append(hostRows, projections.Row[*eventsv1.HostState]{State: &eventsv1.HostState{
			Name: events.HostName("lost"), Status: eventsv1.HostStatus_HOST_STATUS_LOST, Capacity: perHost, RegisteredSequence: 1,
		}, Sequence: 2})
		s.Heard["lost"] = t0.Add(-time.Hour)
		hostRows = append(hostRows, projections.Row[*eventsv1.HostState]{State: &eventsv1.HostState{ // a new host: no servers yet
			Name: events.HostName("fresh"), Status: eventsv1.HostStatus_HOST_STATUS_ONLINE, Capacity: perHost, RegisteredSequence: 1 << 40,
		}, Sequence: 1 << 40})
		s.Heard["fresh"] = t0
	}
	for f := range fleets {
		st := fleetState(time.Time{})
		st.Name = events.FleetName(fmt.Sprintf("f%d", f))
		st.Spec.Replicas = hosts * perHost / fleets
		s.Fleets = append(s.Fleets, projections.FleetRow{Row: projections.Row[*eventsv1.FleetState]{State: st, Sequence: 1}})
	}
	for i := range hosts * perHost {
		fleet := fmt.Sprintf("f%d", i%fleets)
		s.Servers = append(s.Servers, projections.Row[*eventsv1.GameServerState]{State: &eventsv1.GameServerState{
			Name: events.GameServerName(fleet, fmt.Sprintf("gs-%07d", i)), Host: events.HostName(fmt.Sprintf("h%d", i/perHost)),
			Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY, EverReady: true,
			Template: proto.CloneOf(template), HealthPolicy: proto.CloneOf(health), CreateTime: timestamppb.New(t0),
		}, Sequence: uint64(10 + i)})
	}
	slices.SortFunc(s.Servers, byName) // as the pass reads them
	c := &Controller{}
	p := plan.Planner{Producer: "controllers/test", ShutdownGrace: DefaultShutdownGrace, ShutdownSettle: DefaultShutdownSettle,
		StartTimeout: DefaultStartTimeout, UnreachableAfter: DefaultUnreachableAfter, LostAfter: DefaultLostAfter,
		Backoff: events.StartBackoff{Base: DefaultStartBackoffBase, Cap: DefaultStartBackoffCap}, NewID: func() string { return events.NewID("gs") }}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		pass := s
		pass.Hosts = withUse(hostRows, pass.Servers)
		pass.ByFleet, pass.Misnamed = plan.GroupByFleet(pass.Servers)
		pass.DeletedFleets = c.readDeletedFleets(b.Context(), pass.Fleets, pass.ByFleet)
		if out := p.Plan(pass); len(out.Decisions) != 0 || len(out.Refused) != 0 {
			b.Fatalf("a steady pass decided %d and refused %d: %v", len(out.Decisions), len(out.Refused), out.Decisions)
		}
	}
}
