package plan

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// hostSlot is a host's room during one pass.
type hostSlot struct {
	id       string
	name     string
	labels   map[string]string
	capacity int32
	used     int32
	// hostSubjects: its agent writes host subjects (HostRegistered), so
	// the servers placed on it get theirs.
	hostSubjects bool
}

// roomOn lists the hosts that take new servers: ONLINE ones (not
// unreachable, lost, cordoned or draining), with their used slots.
func roomOn(hosts []projections.HostRow, status map[string]eventsv1.HostStatus, out *Plan) []*hostSlot {
	var slots []*hostSlot
	for _, h := range hosts {
		if status[h.State.GetName()] != eventsv1.HostStatus_HOST_STATUS_ONLINE || h.State.GetCordoned() {
			continue
		}
		id, err := events.ParseHostName(h.State.GetName())
		if err != nil {
			out.Refused = append(out.Refused, err)
			continue
		}
		slots = append(slots, &hostSlot{id: id, name: h.State.GetName(), labels: h.State.GetLabels(), capacity: h.State.GetCapacity(), used: h.Used,
			hostSubjects: h.State.GetHostSubjects()})
	}
	return slots
}

// whyNoRoom says why a fleet's missing servers found no host: its host
// selector matches none of the hosts that take new servers, or those it
// matches (all of them, without a selector) are full.
func whyNoRoom(fleet string, missing int, hosts []*hostSlot, selector map[string]string) *NoRoom {
	matching := 0
	for _, h := range hosts {
		if events.MatchesLabels(h.labels, selector) {
			matching++
		}
	}
	n := &NoRoom{Fleet: fleet, Missing: missing, Reason: events.NoHostWithRoom}
	if len(selector) > 0 {
		n.Reason = events.NoMatchingHost
		n.Message = fmt.Sprintf("%d game servers wait: no ONLINE, uncordoned host with labels %s has room (%d match, all full)",
			missing, labelList(selector), matching)
		if matching == 0 {
			n.Message = fmt.Sprintf("%d game servers wait: no ONLINE, uncordoned host has labels %s", missing, labelList(selector))
		}
		return n
	}
	n.Message = fmt.Sprintf("%d game servers wait: all %d ONLINE, uncordoned hosts are full", missing, matching)
	if matching == 0 {
		n.Message = fmt.Sprintf("%d game servers wait: no host is ONLINE and uncordoned", missing)
	}
	return n
}

// labelList is a selector as "k1=v1,k2=v2", sorted.
func labelList(labels map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k+"="+labels[k])
	}
	return strings.Join(out, ",")
}

// placementStep records a fleet's wait for a host with room (blocked)
// when it begins or changes (count or reason), or its end: the API shows
// the wait as the PLACEMENT_BLOCKED condition.
func placementStep(s Snapshot, blocked *NoRoom) events.FleetCommand {
	if blocked != nil {
		return events.RecordPlacementBlocked{Waiting: blocked.Missing, Reason: blocked.Reason, Message: blocked.Message}
	}
	return events.RecordPlacementUnblocked{At: s.Now}
}

// pickHost chooses a host with room whose labels match selector, ranked
// by events.CompareHosts on their used slots: the fullest for PACKED, the
// emptiest for DISTRIBUTED.
func pickHost(hosts []*hostSlot, s eventsv1.Scheduling, selector map[string]string) *hostSlot {
	distributed := s == eventsv1.Scheduling_SCHEDULING_DISTRIBUTED
	var best *hostSlot
	for _, h := range hosts {
		if h.used >= h.capacity || !events.MatchesLabels(h.labels, selector) {
			continue
		}
		if best == nil || events.CompareHosts(distributed, h.load(), best.load()) < 0 {
			best = h
		}
	}
	return best
}

// load is the host as placement ranks it.
func (h *hostSlot) load() events.HostLoad { return events.HostLoad{Name: h.name, Load: int(h.used)} }
