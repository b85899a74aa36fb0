package events

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// The host's statuses in its transition table.
const (
	hostAbsent       = eventsv1.HostStatus_HOST_STATUS_UNSPECIFIED
	hostOnline       = eventsv1.HostStatus_HOST_STATUS_ONLINE
	hostDraining     = eventsv1.HostStatus_HOST_STATUS_DRAINING
	hostUnreachable  = eventsv1.HostStatus_HOST_STATUS_UNREACHABLE
	hostLost         = eventsv1.HostStatus_HOST_STATUS_LOST
	hostDeregistered = eventsv1.HostStatus_HOST_STATUS_DEREGISTERED
)

// hostTarget is where a host's event leads. Most lead to one status; two
// depend on the host: back in service is DRAINING for a host asked to
// drain, and a drain request moves only an ONLINE host.
type hostTarget int

const (
	hostKeeps          hostTarget = iota // the status does not change
	hostToService                        // ONLINE, or DRAINING if it was asked to drain
	hostToDrain                          // DRAINING if ONLINE, else unchanged
	hostToUnreachable                    // UNREACHABLE
	hostToLost                           // LOST
	hostToDeregistered                   // DEREGISTERED
)

// status is the status a host in status from, draining or not, moves to.
func (t hostTarget) status(from eventsv1.HostStatus, draining bool) eventsv1.HostStatus {
	switch t {
	case hostToService:
		return onlineStatus(draining)
	case hostToDrain:
		if from == hostOnline {
			return hostDraining
		}
	case hostToUnreachable:
		return hostUnreachable
	case hostToLost:
		return hostLost
	case hostToDeregistered:
		return hostDeregistered
	}
	return from
}

// hostTransition is one row of the host transition table: the statuses an
// event may arrive in, and where it leads.
type hostTransition struct {
	from []eventsv1.HostStatus
	to   hostTarget
}

// hostRegistered are the statuses of a registered host.
var hostRegistered = []eventsv1.HostStatus{hostOnline, hostDraining, hostUnreachable, hostLost}

// hostTransitions is the host's transition table (DESIGN.md §4), keyed by
// event type. An agent registers from any status (a restart, or a host
// that came back after it was deregistered); the controller's verdicts
// follow heartbeats.
var hostTransitions = map[string]hostTransition{
	typeName[*eventsv1.HostRegistered]():     {from: []eventsv1.HostStatus{hostAbsent, hostOnline, hostDraining, hostUnreachable, hostLost, hostDeregistered}, to: hostToService},
	typeName[*eventsv1.HostOnline]():         {from: hostRegistered, to: hostToService},
	typeName[*eventsv1.HostUnreachable]():    {from: []eventsv1.HostStatus{hostOnline, hostDraining}, to: hostToUnreachable},
	typeName[*eventsv1.HostLost]():           {from: []eventsv1.HostStatus{hostUnreachable}, to: hostToLost},
	typeName[*eventsv1.HostDrainRequested](): {from: hostRegistered, to: hostToDrain},
	typeName[*eventsv1.HostDeregistered]():   {from: hostRegistered, to: hostToDeregistered},
}

// ApplyHost folds one event into a host's state and returns the new state;
// the input is not modified. Events the host's status does not allow are
// errors. A registered host may register again (an agent restart): the
// registration's stream sequence is kept (RegisteredSequence), so a live
// game server whose last event is older is known to belong to an earlier
// agent of the host, which the new one does not supervise.
func ApplyHost(state *eventsv1.HostState, e Envelope) (*eventsv1.HostState, error) {
	row, ok := hostTransitions[e.Type]
	if !ok {
		return nil, fmt.Errorf("events: %s is not a host event", e.Type)
	}
	from := state.GetStatus()
	if !slices.Contains(row.from, from) {
		return nil, &TransitionError{Aggregate: e.Aggregate, From: trimEnumPrefix(from.String(), "HOST_STATUS_"), Event: e.Type}
	}
	if err := checkWriter(e, e.Aggregate); err != nil {
		return nil, err
	}
	next := proto.CloneOf(state)
	if next == nil {
		next = &eventsv1.HostState{}
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
	case *eventsv1.HostOnline:
		next.LastHeartbeatTime = d.GetLastHeartbeatTime()
	case *eventsv1.HostUnreachable:
		next.LastHeartbeatTime = d.GetLastHeartbeatTime()
	case *eventsv1.HostLost:
		next.LastHeartbeatTime = d.GetLastHeartbeatTime()
	case *eventsv1.HostDrainRequested:
		next.Draining = true
	case *eventsv1.HostDeregistered:
	default:
		return nil, fmt.Errorf("events: %s has payload %T", e.Type, e.Data)
	}
	next.Status = row.to.status(from, next.GetDraining())
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
