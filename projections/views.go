package projections

import (
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// The views' rows and queries: what readers (the API, the controller, the
// allocator) ask of the views and get back. projections/postgres
// implements them.

// Row is a view row: the folded state and the stream sequence of the last
// event applied to it.
type Row[S proto.Message] struct {
	// State is the folded aggregate.
	State S
	// Sequence is the stream sequence of its last event.
	Sequence uint64
}

// RevisionCount counts a fleet's live game servers of one revision.
type RevisionCount struct {
	Revision               int64
	Live, Ready, Allocated int32
}

// FleetCounts counts a fleet's game servers by lifecycle state.
type FleetCounts struct {
	// Ready, Reserved, Allocated and Unhealthy count servers in those states.
	Ready, Reserved, Allocated, Unhealthy int32
	// Live counts servers not yet TERMINATED.
	Live int32
}

// FleetRow is a fleet with its game server counts.
type FleetRow struct {
	Row[*eventsv1.FleetState]
	// Counts of its game servers.
	Counts FleetCounts
}

// GameServerQuery selects game servers. Empty fields match everything.
type GameServerQuery struct {
	// Fleet is a fleet resource name.
	Fleet string
	// State is a lifecycle state name, e.g. "READY".
	State string
	// Host is a host resource name.
	Host string
	// Health is a health state name, e.g. "DEGRADED".
	Health string
	// Connection is a connection state name, e.g. "DISCONNECTED".
	Connection string
	// ID is a game server's id (the name's last part), in any fleet.
	ID string
	// Live leaves out the ended (TERMINATED) servers.
	Live bool
	// After is the name to page after.
	After string
	// Limit bounds the rows returned.
	Limit int
}

// HostRow is a host with the number of its live game servers.
type HostRow struct {
	Row[*eventsv1.HostState]
	// Used counts its game servers not yet TERMINATED.
	Used int32
}

// GameSessionQuery selects game sessions. Empty fields match everything.
type GameSessionQuery struct {
	// State is "ACTIVE" or "ENDED".
	State string
	// GameServer is a game server resource name.
	GameServer string
	// Fleet is a fleet resource name.
	Fleet string
	// After pages after this (create_time, name) position.
	AfterTime time.Time
	// AfterName is the name part of the paging position.
	AfterName string
	// Limit bounds the rows returned.
	Limit int
}

// AllocationQuery selects game servers to allocate (allocation.go says
// what each field matches and how servers are ranked).
type AllocationQuery struct {
	// Fleet is a fleet resource name; empty for every fleet.
	Fleet string
	// MatchLabels must all be present with these values.
	MatchLabels map[string]string
	// Allocated selects ALLOCATED servers (another match on a running
	// server) instead of READY ones.
	Allocated bool `json:",omitempty"`
	// Counters bound the counters a server must have, by name.
	Counters map[string]CounterBounds `json:",omitempty"`
	// Lists bound the lists a server must have, by name.
	Lists map[string]ListBounds `json:",omitempty"`
	// Players bounds the room for players a server's game tracks (its
	// player capacity less the players connected); nil: any.
	Players *PlayerBounds `json:",omitempty"`
	// Priorities rank the servers that match, most important first, before
	// the hosts are.
	Priorities []Priority `json:",omitempty"`
	// Distributed prefers hosts with the fewest allocated servers; the
	// default (packed) prefers the busiest hosts, to keep others free.
	Distributed bool
	// Limit bounds the rows returned; fewer than Limit are every candidate
	// (the allocator concludes there is no matching server from it).
	Limit int
}
