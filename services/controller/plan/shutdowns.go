package plan

import (
	"fmt"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// unfinishedDetail opens the evidence of a server terminated because its
// agent ended it without recording the end.
const unfinishedDetail = "shutdown past its deadline and no longer in its host's inventory"

// planUnfinishedShutdowns ends the SHUTTING_DOWN servers whose agent no
// longer supervises them although nothing recorded their end: the
// server's shutdown deadline passed Planner.ShutdownSettle (the time the
// agent takes to kill the process at the deadline, see it exit and append
// its end, through its outbox) before its host's last beat was stored,
// that beat's inventory does not list it, and its agent has nothing
// queued for the stream (an end in its outbox is on its way). Without
// this such a server stayed SHUTTING_DOWN for good, its slot on the host
// taken and, in a fleet that fills its hosts, its replacement never
// placed (seen once in a 100,000-server scale run: the agent had acted
// on the stop and let the server go, and no event of its end reached the
// stream). Only hosts that beat with their servers (ONLINE, DRAINING,
// DRAINED) before and after this pass's verdicts are judged: the others
// are not heard from, and their servers are judged with them, and a host
// that comes back has its whole inventory checked with its verdict. The
// servers of an agent that restarted since their last event are
// planOrphans' to end. The server is terminated with its shutdown's
// reason (PROCESS_EXITED if it had none) and the evidence; the append is
// guarded by its sequence, so a server whose end reached the stream since
// the views were read is left alone.
func (p Planner) planUnfinishedShutdowns(s Snapshot, status map[string]eventsv1.HostStatus, out *Plan) {
	var hosts map[string]*eventsv1.HostState // by name, made for the first server past its settle
	for _, r := range s.Servers {
		gs := r.State
		if gs.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN || gs.GetShutdownDeadline() == nil {
			continue
		}
		deadline := gs.GetShutdownDeadline().AsTime()
		if s.Now.Before(deadline.Add(p.ShutdownSettle)) {
			continue // most shutdowns: in their grace, and no beat decoded for them
		}
		if hosts == nil {
			hosts = make(map[string]*eventsv1.HostState, len(s.Hosts))
			for _, h := range s.Hosts {
				hosts[h.State.GetName()] = h.State
			}
		}
		host := gs.GetHost()
		h := hosts[host]
		// Judged on the host's status in the views and after this pass's
		// verdicts both: a host that comes back this pass has its
		// inventory checked whole with its verdict (checkInventory).
		if h == nil || !beatsWithItsServers(h.GetStatus()) || !beatsWithItsServers(status[host]) {
			continue
		}
		if r.Sequence < h.GetRegisteredSequence() {
			continue // planOrphans' to end
		}
		id, err := events.ParseHostName(host)
		if err != nil {
			continue // a misnamed host: refused with the host verdicts
		}
		beat := s.Beats[id]
		// When the beat was stored, by the NATS server's clock (the
		// agent's may be off); its time as the agent wrote it if unknown.
		at := beat.Stored
		if at.IsZero() {
			at = beat.WrittenAt()
		}
		inv := beat.Inv()
		if inv == nil || inv.Queued > 0 || inv.Has(gs.GetName()) || at.Before(deadline.Add(p.ShutdownSettle)) {
			continue
		}
		if u := gs.GetUpdateTime(); u != nil && u.AsTime().After(at) {
			continue // changed since the inventory was taken
		}
		reason := gs.GetReason()
		if reason == eventsv1.Reason_REASON_UNSPECIFIED {
			reason = eventsv1.Reason_REASON_PROCESS_EXITED
		}
		detail := fmt.Sprintf("%s: deadline %s; host %s reported %d game servers at %s, not this one (last known pid %d)",
			unfinishedDetail, deadline.Format(time.RFC3339Nano), host, len(inv.Servers), at.Format(time.RFC3339Nano), gs.GetPid())
		if d := p.terminate(r, reason, detail, "game server shut down, gone from its host's inventory, its end never recorded: terminated", out); d != nil {
			out.Decisions = append(out.Decisions, *d)
		}
	}
}

// beatsWithItsServers tells the host statuses under which a host beats and
// runs its servers: ONLINE, DRAINING and DRAINED.
func beatsWithItsServers(st eventsv1.HostStatus) bool {
	switch st {
	case eventsv1.HostStatus_HOST_STATUS_ONLINE, eventsv1.HostStatus_HOST_STATUS_DRAINING, eventsv1.HostStatus_HOST_STATUS_DRAINED:
		return true
	}
	return false
}
