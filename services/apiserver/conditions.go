package apiserver

import (
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// conditionStartFailing is the type of a fleet's condition whose game
// servers end before READY (docs/crash-loops.md).
const conditionStartFailing = "START_FAILING"

// fleetConditions lists a fleet's conditions, Kubernetes style: a
// condition is listed once it has been true. START_FAILING is "True" while
// the fleet's game servers fail to start, with the last failure's reason
// and error, and "False" after a server became READY again.
func fleetConditions(st *eventsv1.FleetState) []*tetherv1.FleetCondition {
	if f := st.GetStartFailing(); f != nil {
		return []*tetherv1.FleetCondition{{
			Type: conditionStartFailing, Status: "True", Reason: events.ReasonName(f.GetReason()), Message: f.GetLastError(),
			LastTransitionTime: proto.CloneOf(st.GetStartConditionTime()), BackoffUntil: proto.CloneOf(f.GetBackoffUntil()),
			ConsecutiveFailures: f.GetConsecutiveFailures(), GameServer: f.GetGameServer(),
		}}
	}
	if r := st.GetStartRecovered(); r != nil {
		return []*tetherv1.FleetCondition{{
			Type: conditionStartFailing, Status: "False", Reason: "READY", Message: r.GetGameServer() + " became READY",
			LastTransitionTime: proto.CloneOf(st.GetStartConditionTime()), GameServer: r.GetGameServer(),
		}}
	}
	return nil
}
