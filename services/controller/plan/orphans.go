package plan

import (
	"fmt"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// restartedDetail opens the evidence of a server terminated because its
// host's agent restarted without it.
const restartedDetail = "its host's agent restarted"

// planOrphans ends the live game servers whose host's agent restarted
// since their last event (docs/host-liveness.md, "An agent that restarts"): an agent that starts supervises
// none of its predecessor's processes. It stops those it recorded in its
// data directory and terminates them itself before it registers; the rest
// (a lost data directory, a process started in the moment before the
// crash) are found here: a server that is neither SCHEDULED (its start may
// still come from the command stream, and the new agent will run it) nor
// TERMINATED, whose last event precedes its host's last registration, has
// nobody looking after it. It is terminated with AGENT_RESTARTED and the
// evidence, and its fleet replaces it. The append is guarded by the
// server's sequence, so one that heard from anyone since is left alone.
func (p Planner) planOrphans(s Snapshot, out *Plan) {
	registered := make(map[string]*eventsv1.HostState, len(s.Hosts))
	var latest uint64 // the last registration of any host
	for _, h := range s.Hosts {
		registered[h.State.GetName()] = h.State
		latest = max(latest, h.State.GetRegisteredSequence())
	}
	for _, r := range s.Servers {
		if r.Sequence >= latest {
			continue // heard from since every host's registration: most servers, and no host to look up
		}
		h := registered[r.State.GetHost()]
		if h == nil || r.Sequence >= h.GetRegisteredSequence() {
			continue
		}
		switch r.State.GetLifecycle() {
		case eventsv1.Lifecycle_LIFECYCLE_SCHEDULED, eventsv1.Lifecycle_LIFECYCLE_TERMINATED:
			continue
		}
		detail := fmt.Sprintf(
			"%s: %s registered again at sequence %d (agent %s) after this server's last event (sequence %d, %s, pid %d); the new agent does not supervise it",
			restartedDetail, h.GetName(), h.GetRegisteredSequence(), h.GetAgentIncarnation(), r.Sequence,
			events.LifecycleName(r.State.GetLifecycle()), r.State.GetPid())
		if d := p.terminate(r, eventsv1.Reason_REASON_AGENT_RESTARTED, detail, "game server of a restarted agent terminated", out); d != nil {
			out.Decisions = append(out.Decisions, *d)
		}
	}
}
