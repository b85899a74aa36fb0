package plan

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
)

// An Action names what a decision does; the executor logs and counts
// decisions by it.
type Action string

// The controller's actions.
const (
	ActHost      Action = "host"      // a host liveness verdict
	ActTerminate Action = "terminate" // a game server ended by the controller (host lost, missing from the inventory, agent restarted)
	ActStarts    Action = "starts"    // a fleet's start failures or recovery recorded
	ActShutdown  Action = "shutdown"  // a game server asked to stop (unhealthy, scaled down, fleet deleted)
	ActSchedule  Action = "schedule"  // a new game server placed on a host
	ActResend    Action = "resend"    // a SCHEDULED server's start command sent again (no event)
	ActSession   Action = "session"   // a game session or reservation deadline fired, or a missing game session created
	ActPlacement Action = "placement" // a fleet's wait for a host with room recorded, or its end
	ActAutoscale Action = "autoscale" // a fleet's replicas set by its autoscaling policy (and its placement recorded)
	ActRollout   Action = "rollout"   // a fleet's rollout progressed, completed or halted
)

// A Decision is one append and the command that follows it: events
// decided on one aggregate, with the sequence they were decided on as the
// guard.
type Decision struct {
	// Action is what the decision does.
	Action Action
	// Name is the aggregate decided on.
	Name string
	// Subject is its stream subject when it is a game server
	// (events.SubjectOf); empty: events.Subject of Name.
	Subject string
	// Guard is the aggregate's sequence the decision was made on; 0 for a
	// new aggregate.
	Guard uint64
	// Events are the decided events; none for a resend.
	Events []proto.Message
	// Host (a host id) and Command, if set, are sent once the events are
	// in the stream.
	Host    string
	Command *agentv1.Command
	// Then are decisions that hold only if this one is appended.
	Then []Decision
	// News, for ActStarts: what the fleet (Name) decides again next pass
	// if the append fails.
	News *StartNews
	// Say is the log line that reports the decision, with Attrs.
	Say   string
	Attrs []any
}

// String is the decision in short, for tests and logs: the action, the
// aggregate with its guard, its event types and the host its command goes
// to.
func (d Decision) String() string {
	types := make([]string, len(d.Events))
	for i, m := range d.Events {
		types[i] = events.TypeOf(m)
	}
	s := string(d.Action) + " " + d.Name
	if d.Guard > 0 {
		s += fmt.Sprintf("@%d", d.Guard)
	}
	if len(types) > 0 {
		s += " " + strings.Join(types, ",")
	}
	if d.Command != nil {
		s += " → " + d.Host
	}
	return s
}

// A NoRoom is a fleet short of servers because no host that may take
// them has room.
type NoRoom struct {
	// Fleet is the fleet's name, Missing how many servers it lacks.
	Fleet   string
	Missing int
	// Reason is events.NoMatchingHost or events.NoHostWithRoom, and
	// Message says it for humans.
	Reason, Message string
}

// Plan is what one pass decided, in the order it is carried out: host
// verdicts, orphans, unfinished shutdowns, start failures, then each
// fleet's shutdowns, resends and schedules, the deleted fleets, and
// game-session deadlines.
type Plan struct {
	// Decisions are carried out in order, each after those before it on
	// a common aggregate.
	Decisions []Decision
	// NoRoom are the fleets no host had room for.
	NoRoom []NoRoom
	// Refused are decisions the domain refused (a bug, or views that
	// contradict themselves); the executor logs them.
	Refused []error
}
