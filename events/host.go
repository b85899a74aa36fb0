package events

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// ApplyHost folds one event into a host's state and returns the new state;
// the input is not modified. Events the host's status does not allow are
// errors. A registered host may register again (an agent restart).
func ApplyHost(state *eventsv1.HostState, e Envelope) (*eventsv1.HostState, error) {
	next := proto.CloneOf(state)
	if next == nil {
		next = &eventsv1.HostState{}
	}
	status := next.GetStatus()
	registered := status != eventsv1.HostStatus_HOST_STATUS_UNSPECIFIED && status != eventsv1.HostStatus_HOST_STATUS_DEREGISTERED
	refuse := func() error {
		return &TransitionError{Aggregate: e.Aggregate, From: trimEnumPrefix(status.String(), "HOST_STATUS_"), Event: e.Type}
	}
	at := timestamppb.New(e.Time)
	switch d := e.Data.(type) {
	case *eventsv1.HostRegistered:
		if next.Name == "" {
			next.Name, next.CreateTime = e.Aggregate, at
		}
		next.Capacity, next.Labels, next.Address = d.GetCapacity(), cloneMap(d.GetLabels()), d.GetAddress()
		next.AgentVersion, next.SdkAddress = d.GetAgentVersion(), d.GetSdkAddress()
		next.LastHeartbeatTime = at
		next.Status = onlineStatus(next.Draining)
	case *eventsv1.HostOnline:
		if !registered {
			return nil, refuse()
		}
		next.Status, next.LastHeartbeatTime = onlineStatus(next.Draining), d.GetLastHeartbeatTime()
	case *eventsv1.HostUnreachable:
		if status != eventsv1.HostStatus_HOST_STATUS_ONLINE && status != eventsv1.HostStatus_HOST_STATUS_DRAINING {
			return nil, refuse()
		}
		next.Status, next.LastHeartbeatTime = eventsv1.HostStatus_HOST_STATUS_UNREACHABLE, d.GetLastHeartbeatTime()
	case *eventsv1.HostLost:
		if status != eventsv1.HostStatus_HOST_STATUS_UNREACHABLE {
			return nil, refuse()
		}
		next.Status, next.LastHeartbeatTime = eventsv1.HostStatus_HOST_STATUS_LOST, d.GetLastHeartbeatTime()
	case *eventsv1.HostDrainRequested:
		if !registered {
			return nil, refuse()
		}
		next.Draining = true
		if status == eventsv1.HostStatus_HOST_STATUS_ONLINE {
			next.Status = eventsv1.HostStatus_HOST_STATUS_DRAINING
		}
	case *eventsv1.HostDeregistered:
		if !registered {
			return nil, refuse()
		}
		next.Status = eventsv1.HostStatus_HOST_STATUS_DEREGISTERED
	default:
		return nil, fmt.Errorf("events: %s is not a host event", e.Type)
	}
	next.UpdateTime = at
	return next, nil
}

func onlineStatus(draining bool) eventsv1.HostStatus {
	if draining {
		return eventsv1.HostStatus_HOST_STATUS_DRAINING
	}
	return eventsv1.HostStatus_HOST_STATUS_ONLINE
}
