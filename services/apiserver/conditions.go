package apiserver

import (
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// The types of a fleet's conditions: START_FAILING, its game servers end
// before READY (docs/crash-loops.md); PLACEMENT_BLOCKED, they wait for a
// host with room.
const (
	conditionStartFailing     = "START_FAILING"
	conditionPlacementBlocked = "PLACEMENT_BLOCKED"
	conditionAutoscaleFailed  = "AUTOSCALING_FAILED"
)

// fleetConditions lists a fleet's conditions, Kubernetes style: a
// condition is listed once it has been true. START_FAILING is "True" while
// the fleet's game servers fail to start, with the last failure's reason
// and error, and "False" after a server became READY again.
// PLACEMENT_BLOCKED is "True" while game servers of the fleet wait for a
// host with room (reason NO_MATCHING_HOST or NO_HOST_WITH_ROOM), and
// "False" once they have hosts again.
func fleetConditions(st *eventsv1.FleetState) []*tetherv1.FleetCondition {
	var out []*tetherv1.FleetCondition
	if f := st.GetStartFailing(); f != nil {
		out = append(out, &tetherv1.FleetCondition{
			Type: conditionStartFailing, Status: "True", Reason: events.ReasonName(f.GetReason()), Message: f.GetLastError(),
			LastTransitionTime: proto.CloneOf(st.GetStartConditionTime()), BackoffUntil: proto.CloneOf(f.GetBackoffUntil()),
			ConsecutiveFailures: f.GetConsecutiveFailures(), GameServer: f.GetGameServer(),
		})
	} else if r := st.GetStartRecovered(); r != nil {
		out = append(out, &tetherv1.FleetCondition{
			Type: conditionStartFailing, Status: "False", Reason: "READY", Message: r.GetGameServer() + " became READY",
			LastTransitionTime: proto.CloneOf(st.GetStartConditionTime()), GameServer: r.GetGameServer(),
		})
	}
	if b := st.GetPlacementBlocked(); b != nil {
		out = append(out, &tetherv1.FleetCondition{
			Type: conditionPlacementBlocked, Status: "True", Reason: b.GetReason(), Message: b.GetMessage(),
			LastTransitionTime: proto.CloneOf(st.GetPlacementConditionTime()),
		})
	} else if st.GetPlacementUnblocked() {
		out = append(out, &tetherv1.FleetCondition{
			Type: conditionPlacementBlocked, Status: "False", Reason: "PLACED", Message: "every game server of the fleet has a host",
			LastTransitionTime: proto.CloneOf(st.GetPlacementConditionTime()),
		})
	}
	if f := st.GetAutoscaleFailing(); f != nil {
		out = append(out, &tetherv1.FleetCondition{
			Type: conditionAutoscaleFailed, Status: "True", Reason: "POLICY_FAILED", Message: f.GetPolicy() + ": " + f.GetError(),
		})
	}
	return out
}
