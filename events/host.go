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
	hostDrained      = eventsv1.HostStatus_HOST_STATUS_DRAINED
)

// hostTarget is where a host's event leads. Most lead to one status; some
// depend on the host: back in service is DRAINING for a host asked to
// drain (DRAINED once it was), a drain request moves only an ONLINE host,
// and an uncordon only a draining or drained one.
type hostTarget int

const (
	hostKeeps          hostTarget = iota // the status does not change
	hostToService                        // ONLINE, DRAINING or DRAINED, as the drain stands
	hostToDrain                          // DRAINING if ONLINE, else unchanged
	hostToUnreachable                    // UNREACHABLE
	hostToLost                           // LOST
	hostToDeregistered                   // DEREGISTERED
	hostToDrained                        // DRAINED
	hostToUncordoned                     // ONLINE if DRAINING or DRAINED, else unchanged
)

// status is the status a host in status from moves to, its drain as next
// holds it.
func (t hostTarget) status(from eventsv1.HostStatus, next *eventsv1.HostState) eventsv1.HostStatus {
	switch t {
	case hostToService:
		return onlineStatus(next)
	case hostToDrain:
		if from == hostOnline {
			return hostDraining
		}
	case hostToDrained:
		return hostDrained
	case hostToUncordoned:
		if from == hostDraining || from == hostDrained {
			return hostOnline
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
var hostRegistered = []eventsv1.HostStatus{hostOnline, hostDraining, hostDrained, hostUnreachable, hostLost}

// hostTransitions is the host's transition table (docs/architecture.md,
// "Aggregates and the event catalogue"; docs/host-liveness.md), keyed by
// event type. An agent registers from any status (a restart, or a host
// that came back after it was deregistered); the controller's verdicts
// follow heartbeats; an operator cordons, drains and uncordons a
// registered host, and the controller records when a drain is done.
var hostTransitions = map[string]hostTransition{
	typeName[*eventsv1.HostRegistered]():     {from: []eventsv1.HostStatus{hostAbsent, hostOnline, hostDraining, hostDrained, hostUnreachable, hostLost, hostDeregistered}, to: hostToService},
	typeName[*eventsv1.HostOnline]():         {from: hostRegistered, to: hostToService},
	typeName[*eventsv1.HostUnreachable]():    {from: []eventsv1.HostStatus{hostOnline, hostDraining, hostDrained}, to: hostToUnreachable},
	typeName[*eventsv1.HostLost]():           {from: []eventsv1.HostStatus{hostUnreachable}, to: hostToLost},
	typeName[*eventsv1.HostDrainRequested](): {from: hostRegistered, to: hostToDrain},
	typeName[*eventsv1.HostCordoned]():       {from: hostRegistered, to: hostKeeps},
	typeName[*eventsv1.HostUncordoned]():     {from: hostRegistered, to: hostToUncordoned},
	typeName[*eventsv1.HostDrained]():        {from: []eventsv1.HostStatus{hostDraining}, to: hostToDrained},
	typeName[*eventsv1.HostDeregistered]():   {from: hostRegistered, to: hostToDeregistered},
}

// ApplyHost folds one event into a host's state and returns the new state;
// the input is not modified. Events the host's status does not allow are
// errors. A registered host may register again (an agent restart): the
// registration's stream sequence is kept (RegisteredSequence), so a live
// game server whose last event is older is known to belong to an earlier
// agent of the host, which the new one does not supervise.
func ApplyHost(state *eventsv1.HostState, e Envelope) (*eventsv1.HostState, error) {
	if err := checkStored(e, e.Aggregate); err != nil {
		return nil, err
	}
	row, ok := hostTransitions[e.Type]
	if !ok {
		return nil, fmt.Errorf("events: %s is not a host event", e.Type)
	}
	from := state.GetStatus()
	if !slices.Contains(row.from, from) {
		return nil, &TransitionError{Aggregate: e.Aggregate, From: trimEnumPrefix(from.String(), "HOST_STATUS_"), Event: e.Type}
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
		next.HostSubjects = d.GetHostSubjects()
		next.LastHeartbeatTime = at
	case *eventsv1.HostOnline:
		next.LastHeartbeatTime = d.GetLastHeartbeatTime()
	case *eventsv1.HostUnreachable:
		next.LastHeartbeatTime = d.GetLastHeartbeatTime()
	case *eventsv1.HostLost:
		next.LastHeartbeatTime = d.GetLastHeartbeatTime()
	case *eventsv1.HostDrainRequested:
		// Asked again, a drain keeps where it stands (DRAINED stays).
		next.Draining, next.Cordoned = true, true
		next.CordonedBy, next.CordonTime = d.GetRequestedBy(), at
	case *eventsv1.HostCordoned:
		next.Cordoned, next.CordonedBy, next.CordonTime = true, d.GetRequestedBy(), at
	case *eventsv1.HostUncordoned:
		next.Cordoned, next.Draining, next.Drained = false, false, false
		next.CordonedBy, next.CordonTime = "", nil
	case *eventsv1.HostDrained:
		next.Drained = true
	case *eventsv1.HostDeregistered:
	default:
		return nil, fmt.Errorf("events: %s has payload %T", e.Type, e.Data)
	}
	next.Status = row.to.status(from, next)
	next.UpdateTime = at
	return next, nil
}

// onlineStatus is the status of a host in service: DRAINED or DRAINING
// as its drain stands, else ONLINE.
func onlineStatus(s *eventsv1.HostState) eventsv1.HostStatus {
	switch {
	case s.GetDrained():
		return hostDrained
	case s.GetDraining():
		return hostDraining
	}
	return hostOnline
}

// Schedulable reports whether new game servers may go to a host: it is
// ONLINE and not cordoned.
func Schedulable(s *eventsv1.HostState) bool {
	return s.GetStatus() == hostOnline && !s.GetCordoned()
}

// HostCommand is a command on a host: a liveness verdict of the
// controller, or an operator's cordon, drain or uncordon.
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

// CordonHost stops new game servers going to the host.
type CordonHost struct {
	// By is who asks.
	By string
}

// UncordonHost lets the host take new game servers again, and ends its
// drain.
type UncordonHost struct {
	// By is who asks.
	By string
}

// DrainHost cordons the host and has its fleets move its game servers
// that hold no match elsewhere.
type DrainHost struct {
	// By is who asks.
	By string
}

// MarkHostDrained records that a draining host runs no game server.
type MarkHostDrained struct{}

func (MarkHostUnreachable) hostCommand() {}
func (MarkHostLost) hostCommand()        {}
func (MarkHostOnline) hostCommand()      {}
func (CordonHost) hostCommand()          {}
func (UncordonHost) hostCommand()        {}
func (DrainHost) hostCommand()           {}
func (MarkHostDrained) hostCommand()     {}

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
	case CordonHost:
		if state.GetCordoned() {
			return nil, nil
		}
		out = &eventsv1.HostCordoned{RequestedBy: c.By}
	case UncordonHost:
		if state.GetStatus() != hostAbsent && state.GetStatus() != hostDeregistered && !state.GetCordoned() {
			return nil, nil
		}
		out = &eventsv1.HostUncordoned{RequestedBy: c.By}
	case DrainHost:
		if state.GetDraining() {
			return nil, nil
		}
		out = &eventsv1.HostDrainRequested{RequestedBy: c.By}
	case MarkHostDrained:
		if !state.GetDraining() || state.GetDrained() {
			return nil, nil
		}
		out = &eventsv1.HostDrained{DrainRequestedTime: state.GetCordonTime()}
	default:
		return nil, fmt.Errorf("events: unknown host command %T", cmd)
	}
	if _, err := ApplyHost(state, Envelope{Aggregate: name, Type: TypeOf(out), Data: out}); err != nil {
		return nil, err
	}
	return []proto.Message{out}, nil
}
