package events

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// ApplyHost folds one event into a host's state and returns the new state;
// the input is not modified. Events the host's status does not allow are
// errors. A registered host may register again (an agent restart): the
// registration's stream sequence is kept (RegisteredSequence), so a live
// game server whose last event is older is known to belong to an earlier
// agent of the host, which the new one does not supervise.
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
		next.AgentIncarnation, next.RegisteredSequence = d.GetAgentIncarnation(), e.Sequence
		next.GamePorts = d.GetGamePorts()
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

// HostCommand is a command on a host: a liveness verdict of the controller.
type HostCommand interface{ hostCommand() }

// MarkHostUnreachable records that the host's heartbeat stopped past the
// short grace. Its game servers keep running; nothing is replaced.
type MarkHostUnreachable struct {
	// LastHeartbeat is the last heartbeat seen.
	LastHeartbeat time.Time
}

// MarkHostLost records that the heartbeat stayed away past the long grace;
// its game servers are then replaced elsewhere.
type MarkHostLost struct {
	// LastHeartbeat is the last heartbeat seen.
	LastHeartbeat time.Time
}

// MarkHostOnline records that the heartbeat is back.
type MarkHostOnline struct {
	// LastHeartbeat is the heartbeat that came back.
	LastHeartbeat time.Time
}

func (MarkHostUnreachable) hostCommand() {}
func (MarkHostLost) hostCommand()        {}
func (MarkHostOnline) hostCommand()      {}

// DecideHost returns the events a command produces on a host, checked
// against ApplyHost's rules, or why it is refused. A verdict that matches
// the host's status already produces no event.
func DecideHost(name string, state *eventsv1.HostState, cmd HostCommand) ([]proto.Message, error) {
	var out proto.Message
	switch c := cmd.(type) {
	case MarkHostUnreachable:
		if state.GetStatus() == eventsv1.HostStatus_HOST_STATUS_UNREACHABLE || state.GetStatus() == eventsv1.HostStatus_HOST_STATUS_LOST {
			return nil, nil
		}
		out = &eventsv1.HostUnreachable{LastHeartbeatTime: timestamppb.New(c.LastHeartbeat)}
	case MarkHostLost:
		if state.GetStatus() == eventsv1.HostStatus_HOST_STATUS_LOST {
			return nil, nil
		}
		out = &eventsv1.HostLost{LastHeartbeatTime: timestamppb.New(c.LastHeartbeat)}
	case MarkHostOnline:
		switch state.GetStatus() {
		case eventsv1.HostStatus_HOST_STATUS_UNREACHABLE, eventsv1.HostStatus_HOST_STATUS_LOST:
		default:
			return nil, nil
		}
		out = &eventsv1.HostOnline{LastHeartbeatTime: timestamppb.New(c.LastHeartbeat)}
	default:
		return nil, fmt.Errorf("events: unknown host command %T", cmd)
	}
	if _, err := ApplyHost(state, Envelope{Aggregate: name, Type: TypeOf(out), Data: out}); err != nil {
		return nil, err
	}
	return []proto.Message{out}, nil
}
