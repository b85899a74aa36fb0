package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// The planner's rules, as tables: a snapshot in, decisions out, with no
// NATS, PostgreSQL or clock. The controller's end-to-end tests
// (services/controller/world_test.go and the files that use it) keep the
// executor and the reads honest.

const (
	online      = eventsv1.HostStatus_HOST_STATUS_ONLINE
	unreachable = eventsv1.HostStatus_HOST_STATUS_UNREACHABLE
	draining    = eventsv1.HostStatus_HOST_STATUS_DRAINING
	allocated   = eventsv1.Lifecycle_LIFECYCLE_ALLOCATED
	reserved    = eventsv1.Lifecycle_LIFECYCLE_RESERVED
	shutting    = eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN
)

// The controller's default timings (its Options' Default… constants),
// which the tables are written for.
const (
	defaultShutdownGrace    = 30 * time.Second
	defaultShutdownSettle   = 30 * time.Second
	defaultUnreachableAfter = 10 * time.Second
	defaultLostAfter        = time.Minute
	defaultStartTimeout     = 10 * time.Second
	defaultStartBackoffBase = time.Second
	defaultStartBackoffCap  = 5 * time.Minute
)

// testPlanner has the controller's default timings and names new game
// servers new-1, new-2, ….
func testPlanner() Planner {
	n := 0
	return Planner{
		Producer: "controllers/test", ShutdownGrace: defaultShutdownGrace, ShutdownSettle: defaultShutdownSettle, StartTimeout: defaultStartTimeout,
		UnreachableAfter: defaultUnreachableAfter, LostAfter: defaultLostAfter,
		Backoff: events.StartBackoff{Base: defaultStartBackoffBase, Cap: defaultStartBackoffCap},
		NewID:   func() string { n++; return fmt.Sprintf("new-%d", n) },
	}
}

// hostRow is host id, heard of `silent` before t0 (see heardAt).
func hostRow(id string, status eventsv1.HostStatus, capacity, used int32, seq uint64) projections.HostRow {
	return projections.HostRow{Row: projections.Row[*eventsv1.HostState]{State: &eventsv1.HostState{Name: events.HostName(id), Status: status, Capacity: capacity}, Sequence: seq}, Used: used}
}

// labelled is h with a label.
func labelled(h projections.HostRow, k, v string) projections.HostRow {
	h.State.Labels = map[string]string{k: v}
	return h
}

// cordoned is h cordoned, and asked to drain if drain.
func cordoned(h projections.HostRow, drain bool) projections.HostRow {
	h.State.Cordoned, h.State.Draining = true, drain
	return h
}

// on is game server id of fleet arena on host, at sequence seq.
func on(id string, l eventsv1.Lifecycle, host string, seq uint64) projections.Row[*eventsv1.GameServerState] {
	s := server(id, l, eventsv1.Reason_REASON_UNSPECIFIED, l != scheduled && l != starting, -int(seq))
	s.Host = events.HostName(host)
	return projections.Row[*eventsv1.GameServerState]{State: s, Sequence: seq}
}

// withRooms is r with a counter rooms of 4 from its template's 0, inUse
// of them taken.
func withRooms(r projections.Row[*eventsv1.GameServerState], inUse int64) projections.Row[*eventsv1.GameServerState] {
	r.State.Template = &eventsv1.GameServerTemplate{Command: "/bin/game", Counters: map[string]*eventsv1.Counter{"rooms": {Capacity: 4}}}
	r.State.Counters = map[string]*eventsv1.Counter{"rooms": {Count: inUse, Capacity: 4}}
	return r
}

// unfinished is game server id of fleet arena on host, SHUTTING_DOWN
// (HEALTH_CHECK_FAILED) with a deadline, at sequence seq.
func unfinished(id, host string, seq uint64, deadline time.Time) projections.Row[*eventsv1.GameServerState] {
	r := on(id, shutting, host, seq)
	r.State.Reason, r.State.ShutdownDeadline = eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, timestamppb.New(deadline)
	return r
}

// listing is an inventory of game servers (full names), with queued
// events.
func listing(queued int, names ...string) *Inventory {
	return &Inventory{Servers: append([]string{}, names...), Queued: queued}
}

// beatAt is a beat its agent wrote at t, with inventory inv (nil: none).
func beatAt(t time.Time, inv *Inventory) Beat {
	return Beat{Report: func() Report { return Report{Written: t, Inventory: inv} }}
}

// fleetRow is fleet arena with replicas and scheduling.
func fleetRow(replicas int32, scheduling eventsv1.Scheduling) projections.FleetRow {
	f := fleetState(time.Time{})
	f.Spec.Replicas, f.Spec.Scheduling = replicas, scheduling
	return projections.FleetRow{Row: projections.Row[*eventsv1.FleetState]{State: f, Sequence: 1}}
}

// snap is a snapshot at t0 of fleets, hosts (each heard of at t0 unless
// heard says otherwise) and servers.
func snap(fleets []projections.FleetRow, hosts []projections.HostRow, servers ...projections.Row[*eventsv1.GameServerState]) Snapshot {
	s := Snapshot{Now: t0, Fleets: fleets, Hosts: hosts, Servers: servers, Heard: map[string]time.Time{}, Beats: map[string]Beat{}}
	s.ByFleet, s.Misnamed = GroupByFleet(servers)
	for _, h := range hosts {
		id, _ := events.ParseHostName(h.State.GetName())
		s.Heard[id] = t0
	}
	return s
}

// lines lists a plan's decisions, follow-ups indented.
func lines(p Plan) []string {
	var out []string
	var add func(ds []Decision, indent string)
	add = func(ds []Decision, indent string) {
		for _, d := range ds {
			out = append(out, indent+d.String())
			add(d.Then, indent+"  ")
		}
	}
	add(p.Decisions, "")
	return out
}

// cloneSnapshot deep-copies the states a snapshot holds, to check that
// planning leaves them as they were.
func cloneSnapshot(s Snapshot) Snapshot {
	c := s
	c.Fleets = slices.Clone(s.Fleets)
	for i := range c.Fleets {
		c.Fleets[i].State = proto.CloneOf(s.Fleets[i].State)
	}
	c.Hosts = slices.Clone(s.Hosts)
	for i := range c.Hosts {
		c.Hosts[i].State = proto.CloneOf(s.Hosts[i].State)
	}
	c.Servers = slices.Clone(s.Servers)
	for i := range c.Servers {
		c.Servers[i].State = proto.CloneOf(s.Servers[i].State)
	}
	c.ByFleet, c.Misnamed = GroupByFleet(c.Servers)
	return c
}

// sameStates reports whether two snapshots hold equal states.
func sameStates(a, b Snapshot) bool {
	if len(a.Fleets) != len(b.Fleets) || len(a.Hosts) != len(b.Hosts) || len(a.Servers) != len(b.Servers) {
		return false
	}
	for _, s := range []Snapshot{a, b} { // the groups still those of the servers
		groups, _ := GroupByFleet(s.Servers)
		if len(groups) != len(s.ByFleet) {
			return false
		}
		for fleet, rows := range groups {
			if !slices.Equal(rows, s.ByFleet[fleet]) {
				return false
			}
		}
	}
	for i := range a.Fleets {
		if !proto.Equal(a.Fleets[i].State, b.Fleets[i].State) {
			return false
		}
	}
	for i := range a.Hosts {
		if !proto.Equal(a.Hosts[i].State, b.Hosts[i].State) {
			return false
		}
	}
	for i := range a.Servers {
		if !proto.Equal(a.Servers[i].State, b.Servers[i].State) {
			return false
		}
	}
	return true
}

const gsPrefix = "fleets/arena/gameServers/"

func TestPlan(t *testing.T) {
	distributed := eventsv1.Scheduling_SCHEDULING_DISTRIBUTED
	tests := []struct {
		name       string
		snapshot   func() Snapshot
		want       []string
		wantNoRoom []NoRoom
	}{
		{
			name: "scales up packed: the fullest host with room first",
			snapshot: func() Snapshot {
				return snap(arena(3), []projections.HostRow{hostRow("a", online, 2, 1, 5), hostRow("b", online, 10, 0, 6)},
					on("gs-1", ready, "a", 7))
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-2 GameServerScheduled → b",
			},
		},
		{
			name: "scales up distributed: the emptiest host first",
			snapshot: func() Snapshot {
				return snap([]projections.FleetRow{fleetRow(2, distributed)},
					[]projections.HostRow{hostRow("a", online, 10, 3, 5), hostRow("b", online, 10, 1, 6)})
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → b",
				"schedule " + gsPrefix + "new-2 GameServerScheduled → b",
			},
		},
		{
			name: "packed keeps a small fleet on one host",
			snapshot: func() Snapshot {
				return snap(arena(2), []projections.HostRow{hostRow("a", online, 2, 0, 5), hostRow("b", online, 2, 0, 6)})
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-2 GameServerScheduled → a",
			},
		},
		{
			name: "distributed puts a small fleet on every host, ties by name",
			snapshot: func() Snapshot {
				return snap([]projections.FleetRow{fleetRow(2, distributed)},
					[]projections.HostRow{hostRow("a", online, 2, 0, 5), hostRow("b", online, 2, 0, 6)})
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"schedule " + gsPrefix + "new-2 GameServerScheduled → b",
			},
		},
		{
			name: "no room: schedules what fits and reports what is missing",
			snapshot: func() Snapshot {
				return snap(arena(3), []projections.HostRow{hostRow("a", online, 1, 0, 5)})
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"placement fleets/arena@1 FleetPlacementBlocked",
			},
			wantNoRoom: []NoRoom{{Fleet: "fleets/arena", Missing: 2, Reason: events.NoHostWithRoom,
				Message: "2 game servers wait: all 1 ONLINE, uncordoned hosts are full"}},
		},
		{
			name: "scales down READY servers newest first, never ALLOCATED or RESERVED",
			snapshot: func() Snapshot {
				return snap(arena(1), []projections.HostRow{hostRow("a", online, 10, 5, 5)},
					on("gs-1", allocated, "a", 10), on("gs-2", reserved, "a", 11), on("gs-3", ready, "a", 12),
					on("gs-4", ready, "a", 13), on("gs-5", starting, "a", 14))
			},
			// Five live, one wanted: four may go, but only three may be
			// touched: READY newest first (gs-3 is older than gs-4), then
			// the one still starting. gs-2's reservation has no end (Agones'
			// Reserve(0)): it stays RESERVED.
			want: []string{
				"shutdown " + gsPrefix + "gs-3@12 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-4@13 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-5@14 ShutdownRequested → a",
			},
		},
		{
			name: "a host selector places only on matching hosts, PACKED among them",
			snapshot: func() Snapshot {
				f := arena(2)
				f[0].State = proto.CloneOf(f[0].State)
				f[0].State.Spec.Template.HostSelector = map[string]string{"zone": "b"}
				return snap(f, []projections.HostRow{labelled(hostRow("a", online, 10, 5, 5), "zone", "a"),
					labelled(hostRow("b", online, 10, 0, 6), "zone", "b"), labelled(hostRow("c", online, 10, 1, 7), "zone", "b")})
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → c",
				"schedule " + gsPrefix + "new-2 GameServerScheduled → c",
			},
		},
		{
			name: "no matching host with room: NO_MATCHING_HOST",
			snapshot: func() Snapshot {
				f := arena(3)
				f[0].State = proto.CloneOf(f[0].State)
				f[0].State.Spec.Template.HostSelector = map[string]string{"zone": "b"}
				return snap(f, []projections.HostRow{labelled(hostRow("a", online, 10, 0, 5), "zone", "a"),
					labelled(hostRow("b", online, 2, 1, 6), "zone", "b")})
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → b",
				"placement fleets/arena@1 FleetPlacementBlocked",
			},
			wantNoRoom: []NoRoom{{Fleet: "fleets/arena", Missing: 2, Reason: events.NoMatchingHost,
				Message: "2 game servers wait: no ONLINE, uncordoned host with labels zone=b has room (1 match, all full)"}},
		},
		{
			name: "a blocked fleet that has its servers again is unblocked",
			snapshot: func() Snapshot {
				f := arena(1)
				f[0].State = proto.CloneOf(f[0].State)
				f[0].State.PlacementBlocked = &eventsv1.FleetPlacementBlocked{Waiting: 1, Reason: events.NoMatchingHost}
				return snap(f, []projections.HostRow{hostRow("a", online, 10, 0, 5)})
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → a",
				"placement fleets/arena@1 FleetPlacementUnblocked",
			},
		},
		{
			name: "a cordoned host takes no new server",
			snapshot: func() Snapshot {
				return snap(arena(2), []projections.HostRow{cordoned(hostRow("a", online, 10, 1, 5), false), hostRow("b", online, 10, 0, 6)},
					on("gs-1", ready, "a", 10))
			},
			want: []string{"schedule " + gsPrefix + "new-1 GameServerScheduled → b"},
		},
		{
			name: "draining: replacements first, the READY servers stay until they serve",
			snapshot: func() Snapshot {
				return snap(arena(3), []projections.HostRow{cordoned(hostRow("a", draining, 10, 3, 5), true), hostRow("b", online, 10, 0, 6)},
					on("gs-1", ready, "a", 10), on("gs-2", ready, "a", 11), on("gs-3", allocated, "a", 12))
			},
			// gs-3 holds a match and stays; gs-1 and gs-2 are replaced on
			// b and kept while their replacements start.
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → b",
				"schedule " + gsPrefix + "new-2 GameServerScheduled → b",
			},
		},
		{
			name: "draining: a server leaves once its replacement serves",
			snapshot: func() Snapshot {
				return snap(arena(3), []projections.HostRow{cordoned(hostRow("a", draining, 10, 3, 5), true), hostRow("b", online, 10, 2, 6)},
					on("gs-1", ready, "a", 10), on("gs-2", ready, "a", 11), on("gs-3", allocated, "a", 12),
					on("gs-4", ready, "b", 13), on("gs-5", starting, "b", 14))
			},
			want: []string{"shutdown " + gsPrefix + "gs-2@11 ShutdownRequested → a"},
		},
		{
			name: "draining: a READY server with rooms in use finishes them, as an ALLOCATED one does",
			snapshot: func() Snapshot {
				return snap(arena(3), []projections.HostRow{cordoned(hostRow("a", draining, 10, 3, 5), true), hostRow("b", online, 10, 2, 6)},
					withRooms(on("gs-1", ready, "a", 10), 1), on("gs-2", ready, "a", 11), on("gs-3", allocated, "a", 12),
					on("gs-4", ready, "b", 13), on("gs-5", starting, "b", 14))
			},
			// gs-1 holds a room: like gs-3 it stays, and counts as serving;
			// gs-2 leaves. With gs-1 and gs-3 busy and gs-4 READY the fleet
			// has its 3, and gs-5 starting is one too many: a READY server
			// goes first (gs-4), never gs-1.
			want: []string{
				"shutdown " + gsPrefix + "gs-2@11 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-4@13 ShutdownRequested → b",
			},
		},
		{
			name: "scales down: a READY server with rooms in use is not taken",
			snapshot: func() Snapshot {
				return snap(arena(1), []projections.HostRow{hostRow("a", online, 10, 3, 5)},
					withRooms(on("gs-1", ready, "a", 10), 2), withRooms(on("gs-2", ready, "a", 11), 0), on("gs-3", ready, "a", 12))
			},
			// Replicas 1, and gs-1 holds rooms: the two idle ones go,
			// though gs-1 is the newest, which would go first.
			want: []string{
				"shutdown " + gsPrefix + "gs-2@11 ShutdownRequested → a",
				"shutdown " + gsPrefix + "gs-3@12 ShutdownRequested → a",
			},
		},
		{
			name: "draining with no room elsewhere: the servers stay and the fleet says why",
			snapshot: func() Snapshot {
				return snap(arena(2), []projections.HostRow{cordoned(hostRow("a", draining, 10, 2, 5), true)},
					on("gs-1", ready, "a", 10), on("gs-2", ready, "a", 11))
			},
			want: []string{"placement fleets/arena@1 FleetPlacementBlocked"},
			wantNoRoom: []NoRoom{{Fleet: "fleets/arena", Missing: 2, Reason: events.NoHostWithRoom,
				Message: "2 game servers wait: no host is ONLINE and uncordoned"}},
		},
		{
			name: "a silent DRAINED host becomes UNREACHABLE",
			snapshot: func() Snapshot {
				h := cordoned(hostRow("a", eventsv1.HostStatus_HOST_STATUS_DRAINED, 10, 0, 5), true)
				h.State.Drained = true
				s := snap(arena(0), []projections.HostRow{h})
				s.Heard["a"] = t0.Add(-defaultUnreachableAfter - time.Second)
				return s
			},
			want: []string{"host hosts/a@5 HostUnreachable"},
		},
		{
			name: "draining: the servers not ready yet go at once, the READY one stays until replaced",
			snapshot: func() Snapshot {
				return snap(arena(2), []projections.HostRow{cordoned(hostRow("a", draining, 10, 2, 5), true), hostRow("b", online, 10, 1, 6)},
					on("gs-1", starting, "a", 10), on("gs-2", ready, "a", 11), on("gs-3", ready, "b", 12))
			},
			want: []string{
				"schedule " + gsPrefix + "new-1 GameServerScheduled → b",
				"shutdown " + gsPrefix + "gs-1@10 ShutdownRequested → a",
			},
		},
		{
			name: "a draining host with no game server left is drained",
			snapshot: func() Snapshot {
				return snap(arena(1), []projections.HostRow{cordoned(hostRow("a", draining, 10, 0, 5), true), hostRow("b", online, 10, 1, 6)},
					on("gs-1", ready, "b", 10))
			},
			want: []string{"host hosts/a@5 HostDrained"},
		},
		{
			name: "an unhealthy server is shut down and replaced",
			snapshot: func() Snapshot {
				return snap(arena(2), []projections.HostRow{hostRow("a", online, 10, 2, 5)},
					on("gs-1", ready, "a", 10), on("gs-2", unhealthy, "a", 11))
			},
			want: []string{
				"shutdown " + gsPrefix + "gs-2@11 ShutdownRequested → a",
				"schedule " + gsPrefix + "new-1 GameServerScheduled → a",
			},
		},
		{
			name: "a SCHEDULED server past its start timeout gets its start command again",
			snapshot: func() Snapshot {
				s := snap(arena(3), []projections.HostRow{hostRow("a", online, 10, 3, 5)},
					on("gs-1", scheduled, "a", 11), on("gs-2", scheduled, "a", 3), on("gs-3", scheduled, "a", 20))
				// gs-1 was scheduled 11 s ago; gs-2 3 s ago; gs-3 20 s ago,
				// but its start was re-sent 2 s ago.
				s.StartResent = map[string]time.Time{gsPrefix + "gs-3": t0.Add(-2 * time.Second)}
				return s
			},
			want: []string{"resend " + gsPrefix + "gs-1 → a"},
		},
		{
			name: "a silent host becomes UNREACHABLE and takes no new servers; its servers stay",
			snapshot: func() Snapshot {
				s := snap(arena(2), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0.Add(-defaultUnreachableAfter - time.Second)
				return s
			},
			want: []string{"host hosts/a@5 HostUnreachable", "placement fleets/arena@1 FleetPlacementBlocked"},
			wantNoRoom: []NoRoom{{Fleet: "fleets/arena", Missing: 1, Reason: events.NoHostWithRoom,
				Message: "1 game servers wait: no host is ONLINE and uncordoned"}},
		},
		{
			name: "a host silent since before the heartbeat bucket's election stays ONLINE until UnreachableAfter past it",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0.Add(-defaultUnreachableAfter - time.Second)
				s.BeatsSince = t0.Add(-defaultUnreachableAfter + time.Second)
				return s
			},
			want: nil,
		},
		{
			name: "a host silent for UnreachableAfter past the heartbeat bucket's election is UNREACHABLE",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0.Add(-defaultLostAfter)
				s.BeatsSince = t0.Add(-defaultUnreachableAfter - time.Second)
				return s
			},
			want: []string{"host hosts/a@5 HostUnreachable"},
		},
		{
			name: "an UNREACHABLE host is neither LOST nor back ONLINE within LostAfter of the heartbeat bucket's election",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", unreachable, 10, 1, 5), hostRow("b", online, 10, 0, 6)},
					on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0.Add(-defaultLostAfter - time.Second)
				s.BeatsSince = t0.Add(-time.Second)
				return s
			},
			want: nil,
		},
		{
			name: "an election gives back at most electionCredit of a longer silence",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0.Add(-defaultUnreachableAfter - electionCredit - time.Second)
				s.BeatsSince = t0.Add(-time.Second)
				return s
			},
			want: []string{"host hosts/a@5 HostUnreachable"},
		},
		{
			name: "a host that beat since the heartbeat bucket's election is judged on its beat",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0.Add(-defaultUnreachableAfter - time.Second)
				s.BeatsSince = t0.Add(-defaultUnreachableAfter - 2*time.Second)
				return s
			},
			want: []string{"host hosts/a@5 HostUnreachable"},
		},
		{
			name: "an UNREACHABLE host that beats again after an election is back ONLINE",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", unreachable, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0
				s.BeatsSince = t0.Add(-time.Second)
				return s
			},
			want: []string{"host hosts/a@5 HostOnline"},
		},
		{
			name: "an UNREACHABLE host is LOST LostAfter past the heartbeat bucket's election",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", unreachable, 10, 1, 5), hostRow("b", online, 10, 0, 6)},
					on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0.Add(-defaultLostAfter - 5*time.Second)
				s.BeatsSince = t0.Add(-defaultLostAfter - time.Second)
				return s
			},
			want: []string{
				"host hosts/a@5 HostLost",
				"  terminate " + gsPrefix + "gs-1@10 GameServerTerminated",
				"schedule " + gsPrefix + "new-1 GameServerScheduled → b",
			},
		},
		{
			name: "an UNREACHABLE host silent for LostAfter is LOST: its servers end and are replaced elsewhere",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", unreachable, 10, 1, 5), hostRow("b", online, 10, 0, 6)},
					on("gs-1", ready, "a", 10))
				s.Heard["a"] = t0.Add(-defaultLostAfter - time.Second)
				return s
			},
			want: []string{
				"host hosts/a@5 HostLost",
				"  terminate " + gsPrefix + "gs-1@10 GameServerTerminated",
				"schedule " + gsPrefix + "new-1 GameServerScheduled → b",
			},
		},
		{
			name: "a server still live on a host already LOST (its termination lost a race with a shutdown) is terminated",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", eventsv1.HostStatus_HOST_STATUS_LOST, 10, 1, 5), hostRow("b", online, 10, 1, 6)},
					on("gs-1", shutting, "a", 10), on("gs-2", ready, "b", 11))
				s.Heard["a"] = t0.Add(-defaultLostAfter - time.Minute)
				return s
			},
			want: []string{"terminate " + gsPrefix + "gs-1@10 GameServerTerminated"},
		},
		{
			name: "a host that beats again with events still queued stays UNREACHABLE",
			snapshot: func() Snapshot {
				s := snap(arena(1), []projections.HostRow{hostRow("a", unreachable, 10, 1, 5)}, on("gs-1", ready, "a", 10))
				s.Beats["a"] = beatAt(t0, &Inventory{Queued: 2})
				return s
			},
			want: nil,
		},
		{
			name: "a host back without a server in its inventory: the server is terminated",
			snapshot: func() Snapshot {
				s := snap(arena(3), []projections.HostRow{hostRow("a", unreachable, 10, 3, 5)},
					on("gs-1", ready, "a", 10), on("gs-2", ready, "a", 11), on("gs-3", scheduled, "a", 12))
				s.Beats["a"] = beatAt(t0.Add(-time.Second), listing(0, gsPrefix+"gs-1"))
				return s
			},
			// gs-3 is SCHEDULED: its start may still be on its way (and,
			// 12 s after it was scheduled, it is sent again).
			want: []string{
				"host hosts/a@5 HostOnline",
				"  terminate " + gsPrefix + "gs-2@11 GameServerTerminated",
				"resend " + gsPrefix + "gs-3 → a",
			},
		},
		{
			name: "a SHUTTING_DOWN server its agent no longer lists, ShutdownSettle past its deadline, is terminated with its shutdown's reason",
			snapshot: func() Snapshot {
				s := snap(arena(2), []projections.HostRow{hostRow("a", online, 2, 2, 5)},
					unfinished("gs-1", "a", 10, t0.Add(-defaultShutdownSettle-time.Second)), on("gs-2", ready, "a", 11))
				s.Beats["a"] = beatAt(t0, listing(0, gsPrefix+"gs-2"))
				return s
			},
			// Its slot frees only when the views show it TERMINATED: the
			// replacement waits for the next pass.
			want: []string{
				"terminate " + gsPrefix + "gs-1@10 GameServerTerminated",
				"placement fleets/arena@1 FleetPlacementBlocked",
			},
			wantNoRoom: []NoRoom{{Fleet: "fleets/arena", Missing: 1, Reason: events.NoHostWithRoom, Message: "1 game servers wait: all 1 ONLINE, uncordoned hosts are full"}},
		},
		{
			name: "a SHUTTING_DOWN server still in its host's inventory, or not yet ShutdownSettle past its deadline, or with its agent's events queued, is left to its agent",
			snapshot: func() Snapshot {
				s := snap(arena(3), []projections.HostRow{hostRow("a", online, 3, 3, 5), hostRow("b", online, 3, 3, 6), hostRow("c", online, 3, 3, 7)},
					unfinished("gs-1", "a", 10, t0.Add(-time.Hour)),
					unfinished("gs-2", "b", 11, t0.Add(-defaultShutdownSettle+time.Second)),
					unfinished("gs-3", "c", 12, t0.Add(-time.Hour)))
				s.Beats["a"] = beatAt(t0, listing(0, gsPrefix+"gs-1"))
				s.Beats["b"] = beatAt(t0, listing(0))
				s.Beats["c"] = beatAt(t0, listing(1))
				return s
			},
			want:       []string{"placement fleets/arena@1 FleetPlacementBlocked"},
			wantNoRoom: []NoRoom{{Fleet: "fleets/arena", Missing: 3, Reason: events.NoHostWithRoom, Message: "3 game servers wait: all 3 ONLINE, uncordoned hosts are full"}},
		},
		{
			name: "a SHUTTING_DOWN server left by its agent, changed since the beat or on a host with an older agent (no inventory) is left alone",
			snapshot: func() Snapshot {
				changed := unfinished("gs-1", "a", 10, t0.Add(-time.Hour))
				changed.State.UpdateTime = timestamppb.New(t0.Add(time.Second))
				s := snap(arena(2), []projections.HostRow{hostRow("a", online, 1, 1, 5), hostRow("b", online, 1, 1, 6)},
					changed, unfinished("gs-2", "b", 11, t0.Add(-time.Hour)))
				s.Beats["a"] = beatAt(t0, listing(0))
				s.Beats["b"] = beatAt(t0, nil)
				return s
			},
			want:       []string{"placement fleets/arena@1 FleetPlacementBlocked"},
			wantNoRoom: []NoRoom{{Fleet: "fleets/arena", Missing: 2, Reason: events.NoHostWithRoom, Message: "2 game servers wait: all 2 ONLINE, uncordoned hosts are full"}},
		},
		{
			name: "a SHUTTING_DOWN server missing from the inventory of a host that comes back is ended once, with the host's verdict; one on an UNREACHABLE host is not judged",
			snapshot: func() Snapshot {
				s := snap(arena(2), []projections.HostRow{hostRow("a", unreachable, 1, 1, 5), hostRow("b", unreachable, 1, 1, 6)},
					unfinished("gs-1", "a", 10, t0.Add(-time.Hour)), unfinished("gs-2", "b", 11, t0.Add(-time.Hour)))
				s.Beats["a"] = beatAt(t0, listing(0))
				s.Heard["b"] = t0.Add(-20 * time.Second) // still silent
				s.Beats["b"] = beatAt(t0.Add(-20*time.Second), listing(0))
				return s
			},
			want: []string{
				"host hosts/a@5 HostOnline",
				"  terminate " + gsPrefix + "gs-1@10 GameServerTerminated",
				"placement fleets/arena@1 FleetPlacementBlocked",
			},
			wantNoRoom: []NoRoom{{Fleet: "fleets/arena", Missing: 2, Reason: events.NoHostWithRoom, Message: "2 game servers wait: all 1 ONLINE, uncordoned hosts are full"}},
		},
		{
			name: "servers whose last event precedes their host's registration are orphans",
			snapshot: func() Snapshot {
				h := hostRow("a", online, 10, 3, 100)
				h.State.RegisteredSequence = 100
				return snap(arena(3), []projections.HostRow{h},
					on("gs-1", ready, "a", 90), on("gs-2", scheduled, "a", 80), on("gs-3", ready, "a", 120))
			},
			// gs-2 is SCHEDULED: the new agent will run it when its start
			// comes (sent again, 80 s after it was scheduled).
			want: []string{
				"terminate " + gsPrefix + "gs-1@90 GameServerTerminated",
				"resend " + gsPrefix + "gs-2 → a",
			},
		},
		{
			name: "a failing fleet within its backoff starts nothing",
			snapshot: func() Snapshot {
				f := projections.FleetRow{Row: projections.Row[*eventsv1.FleetState]{State: fleetState(t0.Add(-5 * time.Second)), Sequence: 60}}
				return snap([]projections.FleetRow{f}, []projections.HostRow{hostRow("a", online, 10, 0, 5)})
			},
			want: nil,
		},
		{
			name: "new start failures are recorded and hold this pass's starts back",
			snapshot: func() Snapshot {
				s := snap(arena(3), []projections.HostRow{hostRow("a", online, 10, 0, 5)})
				s.StartNews = map[string]*StartNews{"fleets/arena": {failures: []events.StartFailure{{
					GameServer: gsPrefix + "gs-0", Reason: eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY, Error: "exited with code 1 before Ready", Sequence: 40,
				}}}}
				return s
			},
			want: []string{"starts fleets/arena@1 FleetStartFailing"},
		},
		{
			name: "the servers of a deleted fleet are shut down; a fleet not read yet is left alone",
			snapshot: func() Snapshot {
				old := func(fleet, id string, l eventsv1.Lifecycle, seq uint64) projections.Row[*eventsv1.GameServerState] {
					r := on(id, l, "a", seq)
					r.State.Name = "fleets/" + fleet + "/gameServers/" + id
					return r
				}
				s := snap(nil, []projections.HostRow{hostRow("a", online, 10, 3, 5)},
					old("old", "gs-1", ready, 10), old("old", "gs-2", shutting, 11), old("new", "gs-3", ready, 12))
				s.DeletedFleets = map[string]bool{"fleets/old": true, "fleets/new": false}
				return s
			},
			want: []string{"shutdown fleets/old/gameServers/gs-1@10 ShutdownRequested → a"},
		},
		{
			name: "on stale views only host liveness is judged",
			snapshot: func() Snapshot {
				s := snap(arena(3), []projections.HostRow{hostRow("a", online, 10, 0, 5), hostRow("b", online, 10, 0, 6)},
					on("gs-1", unhealthy, "b", 10))
				s.Heard["a"] = t0.Add(-defaultUnreachableAfter - time.Second)
				s.Stale = true
				return s
			},
			want: []string{"host hosts/a@5 HostUnreachable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.snapshot()
			before := cloneSnapshot(s)
			p := testPlanner().Plan(s)
			if len(p.Refused) > 0 {
				t.Fatalf("refused: %v", p.Refused)
			}
			if got := lines(p); !slices.Equal(got, tt.want) {
				t.Errorf("decisions:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
			if !slices.Equal(p.NoRoom, tt.wantNoRoom) {
				t.Errorf("no room %v, want %v", p.NoRoom, tt.wantNoRoom)
			}
			if !sameStates(s, before) {
				t.Error("planning changed the snapshot's states")
			}
		})
	}
}

// A shutdown carries its reason and evidence to the event and the stop
// command, with ShutdownGrace to stop; a termination names its reason.
func TestPlanDecisionsCarryTheirReasons(t *testing.T) {
	h := hostRow("a", unreachable, 10, 2, 5)
	s := snap(arena(0), []projections.HostRow{h}, on("gs-1", ready, "a", 10))
	s.Heard["a"] = t0.Add(-defaultLostAfter - time.Second)
	p := testPlanner().Plan(s)
	if len(p.Decisions) != 1 || len(p.Decisions[0].Then) != 1 {
		t.Fatalf("decisions: %v", lines(p))
	}
	term := p.Decisions[0].Then[0].Events[0].(*eventsv1.GameServerTerminated)
	if term.GetReason() != eventsv1.Reason_REASON_HOST_LOST || !strings.Contains(term.GetEvidence().GetDetail(), "host hosts/a lost") ||
		term.GetEvidence().GetRequestedBy() != "controllers/test" {
		t.Errorf("termination %v", term)
	}

	s = snap(arena(0), []projections.HostRow{hostRow("a", online, 10, 1, 5)}, on("gs-1", ready, "a", 10))
	p = testPlanner().Plan(s)
	if len(p.Decisions) != 1 {
		t.Fatalf("decisions: %v", lines(p))
	}
	d := p.Decisions[0]
	req := d.Events[0].(*eventsv1.ShutdownRequested)
	stop := d.Command.GetStop()
	if req.GetReason() != eventsv1.Reason_REASON_FLEET_SCALED_DOWN || stop.GetReason() != req.GetReason() ||
		!stop.GetDeadline().AsTime().Equal(t0.Add(defaultShutdownGrace)) || req.GetEvidence().GetDetail() != "fleet scaled from 1 to 0" {
		t.Errorf("shutdown %v, stop %v", req, stop)
	}
}

// arena is fleet arena with replicas, packed.
func arena(replicas int32) []projections.FleetRow {
	return []projections.FleetRow{fleetRow(replicas, eventsv1.Scheduling_SCHEDULING_PACKED)}
}

// The controller's game-session duties: an ended reservation (not one
// that has not ended, nor one without an end), seats past
// their deadlines, a session whose server moved on, and an allocation whose
// session was never created.
func TestPlanSessions(t *testing.T) {
	res := on("gs-1", reserved, "a", 10)
	res.State.ReservedUntil = timestamppb.New(t0.Add(-time.Second))
	notYet := on("gs-2", reserved, "a", 11)
	notYet.State.ReservedUntil = timestamppb.New(t0.Add(time.Second))
	noEnd := on("gs-3", reserved, "a", 12) // Agones' Reserve(0): until the game says otherwise
	s := snap(arena(3), []projections.HostRow{hostRow("a", online, 10, 3, 5)}, res, notYet, noEnd)

	active := eventsv1.GameSessionStatus_GAME_SESSION_STATUS_ACTIVE
	s.DueSessions = []projections.Row[*eventsv1.GameSessionState]{{Sequence: 20, State: &eventsv1.GameSessionState{
		Name: "gameSessions/m1", Status: active, Players: []*eventsv1.PlayerSessionState{{
			Name: "gameSessions/m1/playerSessions/p1", Status: eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_RESERVED,
			ReservationDeadline: timestamppb.New(t0.Add(-time.Second)),
		}},
	}}}
	gone := server("gs-9", terminated, eventsv1.Reason_REASON_PROCESS_EXITED, true, 0)
	s.OrphanSessions = []OrphanSession{{
		Session: projections.Row[*eventsv1.GameSessionState]{Sequence: 21, State: &eventsv1.GameSessionState{Name: "gameSessions/m2", Status: active, GameServer: gone.GetName()}},
		Server:  gone,
	}}
	alloc := server("gs-8", allocated, eventsv1.Reason_REASON_UNSPECIFIED, true, 0)
	alloc.Allocation = &eventsv1.GameServerAllocated{GameSession: "gameSessions/m3"}
	s.UncreatedSessions = []UncreatedSession{{Server: alloc}}

	p := testPlanner().Plan(s)
	want := []string{
		"session " + gsPrefix + "gs-1@10 GameServerReady",
		"session gameSessions/m1@20 PlayerSessionTimedOut",
		"session gameSessions/m2@21 GameSessionEnded",
		"session gameSessions/m3 GameSessionCreated",
	}
	if got := lines(p); !slices.Equal(got, want) || len(p.Refused) > 0 {
		t.Fatalf("decisions:\n  %s\nwant:\n  %s\nrefused: %v", strings.Join(got, "\n  "), strings.Join(want, "\n  "), p.Refused)
	}
	ended := p.Decisions[2].Events[0].(*eventsv1.GameSessionEnded)
	if ended.GetReason() != eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED || ended.GetServerReason() != eventsv1.Reason_REASON_PROCESS_EXITED {
		t.Errorf("game session ended %v", ended)
	}
}

// Each pass names its new servers afresh, and a plan decided twice on the
// same snapshot is the same plan: planning has no hidden state.
func TestPlanIsAFunctionOfTheSnapshot(t *testing.T) {
	s := snap(arena(3), []projections.HostRow{hostRow("a", online, 2, 0, 5), hostRow("b", online, 10, 0, 6)})
	a, b := lines(testPlanner().Plan(s)), lines(testPlanner().Plan(s))
	if len(a) != 3 || !slices.Equal(a, b) {
		t.Fatalf("two plans of one snapshot:\n%v\n%v", a, b)
	}
}
