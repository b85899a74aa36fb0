package plan

import (
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Snapshot is everything one pass decides from, as the controller
// observed it.
type Snapshot struct {
	// Now is the pass's time: the planner reads no clock.
	Now time.Time
	// Stale is set while the views have stopped moving (the projector is
	// behind and not catching up): the pass judges host liveness only.
	Stale bool
	// Fleets are the live fleets.
	Fleets []projections.FleetRow
	// Servers are the live game servers, ordered by name.
	Servers []projections.Row[*eventsv1.GameServerState]
	// ByFleet are the servers grouped by fleet name, and Misnamed the
	// servers whose names are not a game server's (GroupByFleet).
	ByFleet  map[string][]projections.Row[*eventsv1.GameServerState]
	Misnamed []error
	// Hosts are the registered hosts, with their used slots.
	Hosts []projections.HostRow
	// Beats are the hosts' last heartbeats, by host id.
	Beats map[string]Beat
	// Heard is, by host id, when a heartbeat was last known while this
	// instance leads (a host first seen gets the time it was first seen).
	Heard map[string]time.Time
	// BeatsSince is when the heartbeat bucket's leader was elected (zero
	// if unknown). No host could beat while the bucket had none, so a
	// host's silence counts from no earlier than this.
	BeatsSince time.Time
	// DeletedFleets are the deleted fleets that still have live servers.
	DeletedFleets map[string]bool
	// StartNews is, by fleet, what the game servers changed since the
	// last pass say about starts failing or recovering (ClassifyStarts).
	StartNews map[string]*StartNews
	// StartResent is, by SCHEDULED game server, when its start command
	// was last sent again.
	StartResent map[string]time.Time
	// DueSessions are game sessions with a deadline that has passed.
	DueSessions []projections.Row[*eventsv1.GameSessionState]
	// OrphanSessions are game sessions whose game server moved on.
	OrphanSessions []OrphanSession
	// UncreatedSessions are allocations whose game session was never
	// created.
	UncreatedSessions []UncreatedSession
	// Webhooks are, by fleet, the last answers of the webhook policies in
	// force: the controller calls them off the pass.
	Webhooks map[string]WebhookAnswer
	// load is every host's used slots, by name: set by Plan from Hosts.
	load map[string]int32
}

// GroupByFleet groups live servers by fleet name, in their order; a
// server whose name is not a game server's is left out and returned as an
// error (the planner refuses it). It runs once a pass, for the fleets of
// live servers and the plan (Snapshot.ByFleet). Servers ordered by name
// (as the pass reads them) come in one run per fleet, and each group is
// then that run of servers, not a copy (capped, so that appending to it
// copies).
func GroupByFleet(servers []projections.Row[*eventsv1.GameServerState]) (map[string][]projections.Row[*eventsv1.GameServerState], []error) {
	byFleet := map[string][]projections.Row[*eventsv1.GameServerState]{}
	var misnamed []error
	start, fleet := 0, ""
	endRun := func(end int) {
		if fleet == "" || start == end {
			return
		}
		run := servers[start:end:end]
		if prev, ok := byFleet[fleet]; ok { // not in name order
			run = append(prev, run...)
		}
		byFleet[fleet] = run
	}
	for i, r := range servers {
		name, err := events.GameServerFleetName(r.State.GetName())
		if err != nil {
			endRun(i)
			start, fleet = i+1, ""
			misnamed = append(misnamed, err)
			continue
		}
		if name != fleet {
			endRun(i)
			start, fleet = i, name
		}
	}
	endRun(len(servers))
	return byFleet, misnamed
}

// An OrphanSession is a running game session whose server no longer runs
// it.
type OrphanSession struct {
	// Session is the game session, Server its game server as it is now.
	Session projections.Row[*eventsv1.GameSessionState]
	Server  *eventsv1.GameServerState
}

// An UncreatedSession is an allocated game server whose game session was
// never created (its allocator stopped between its two appends).
type UncreatedSession struct {
	// Server is the allocated game server.
	Server *eventsv1.GameServerState
	// Policy is the player-session policy of the server's fleet.
	Policy *eventsv1.PlayerSessionPolicy
}
