package events

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Lifecycle state shorthands.
const (
	absent       = eventsv1.Lifecycle_LIFECYCLE_UNSPECIFIED
	scheduled    = eventsv1.Lifecycle_LIFECYCLE_SCHEDULED
	starting     = eventsv1.Lifecycle_LIFECYCLE_STARTING
	ready        = eventsv1.Lifecycle_LIFECYCLE_READY
	reserved     = eventsv1.Lifecycle_LIFECYCLE_RESERVED
	allocated    = eventsv1.Lifecycle_LIFECYCLE_ALLOCATED
	shuttingDown = eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN
	terminated   = eventsv1.Lifecycle_LIFECYCLE_TERMINATED
	unhealthy    = eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY
)

// MaxConnectionHistory bounds the connection changes kept as evidence.
const MaxConnectionHistory = 10

// transition is one row of the game server transition table: the lifecycle
// states an event may arrive in, and the state it moves the server to
// (absent = the lifecycle does not change).
type transition struct {
	from []eventsv1.Lifecycle
	to   eventsv1.Lifecycle
}

// live is every lifecycle state in which a process may exist.
var live = []eventsv1.Lifecycle{scheduled, starting, ready, reserved, allocated, shuttingDown, unhealthy}

// gameServerTransitions is the explicit transition table of the game
// server's lifecycle (docs/architecture.md, "Aggregates and the event
// catalogue"). An event arriving in a state its row does not list is an
// error. Connection, health, label, counter, list and process-exit events
// never move the lifecycle. Counters and lists change from a server's
// placement until it stops serving: not once it is UNHEALTHY, SHUTTING_DOWN
// or TERMINATED (counters.go).
var gameServerTransitions = map[string]transition{
	"GameServerScheduled":       {from: []eventsv1.Lifecycle{absent}, to: scheduled},
	"ProcessStarted":            {from: []eventsv1.Lifecycle{scheduled, starting}, to: starting},
	"GameServerReady":           {from: []eventsv1.Lifecycle{starting, reserved, allocated}, to: ready},
	"GameServerReserved":        {from: []eventsv1.Lifecycle{ready}, to: reserved},
	"GameServerAllocated":       {from: []eventsv1.Lifecycle{ready, reserved}, to: allocated},
	"GameServerReallocated":     {from: []eventsv1.Lifecycle{allocated}},
	"GameServerUnhealthy":       {from: []eventsv1.Lifecycle{starting, ready, reserved, allocated}, to: unhealthy},
	"ShutdownRequested":         {from: []eventsv1.Lifecycle{scheduled, starting, ready, reserved, allocated, unhealthy}, to: shuttingDown},
	"GameServerTerminated":      {from: live, to: terminated},
	"ProcessExited":             {from: []eventsv1.Lifecycle{starting, ready, reserved, allocated, shuttingDown, unhealthy}},
	"SdkConnected":              {from: live},
	"SdkDisconnected":           {from: live},
	"HealthDegraded":            {from: []eventsv1.Lifecycle{starting, ready, reserved, allocated, shuttingDown}},
	"HealthRecovered":           {from: []eventsv1.Lifecycle{starting, ready, reserved, allocated, shuttingDown}},
	"LabelsChanged":             {from: live},
	"AnnotationsChanged":        {from: live},
	"TrackedPlayerConnected":    {from: counterStates},
	"TrackedPlayerDisconnected": {from: counterStates},
	"PlayerCapacitySet":         {from: counterStates},
	"ProcessSignalled":          {from: []eventsv1.Lifecycle{starting, ready, reserved, allocated, shuttingDown, unhealthy}},
	"CounterChanged":            {from: counterStates},
	"ListChanged":               {from: counterStates},
}

// NotReadyAfter reports whether a game server is not READY after an event
// of type typ, whatever its state before: the event's row in the transition
// table moves the lifecycle, and not to READY.
func NotReadyAfter(typ string) bool {
	row, ok := gameServerTransitions[typ]
	return ok && row.to != absent && row.to != ready
}

// LifecycleName returns "READY" for LIFECYCLE_READY, "ABSENT" for unset.
func LifecycleName(l eventsv1.Lifecycle) string {
	if l == absent {
		return "ABSENT"
	}
	return trimEnumPrefix(l.String(), "LIFECYCLE_")
}

// ReasonName returns "HEALTH_CHECK_FAILED" for REASON_HEALTH_CHECK_FAILED, "" for unset.
func ReasonName(r eventsv1.Reason) string {
	if r == eventsv1.Reason_REASON_UNSPECIFIED {
		return ""
	}
	return trimEnumPrefix(r.String(), "REASON_")
}

func trimEnumPrefix(s, prefix string) string {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

// ApplyGameServer folds one event into a game server's state and returns the
// new state; the input is not modified. Events the transition table does not
// allow in the current state are errors.
func ApplyGameServer(state *eventsv1.GameServerState, e Envelope) (*eventsv1.GameServerState, error) {
	// The subject first: an event that is not the server's, whoever wrote
	// it and whatever it holds, is no place in its history (not Skipped).
	if err := checkServerSubject(state, e); err != nil {
		return nil, err
	}
	if err := checkStored(e, state.GetHost()); err != nil {
		return nil, err
	}
	from := state.GetLifecycle()
	row, ok := gameServerTransitions[e.Type]
	if !ok {
		return nil, fmt.Errorf("events: %s is not a game server event", e.Type)
	}
	if !slices.Contains(row.from, from) {
		return nil, &TransitionError{Aggregate: e.Aggregate, From: LifecycleName(from), Event: e.Type}
	}
	// Only a reservation can end: from ALLOCATED this would free a server
	// holding a match, from STARTING make one READY that never called Ready.
	if r, ok := e.Data.(*eventsv1.GameServerReady); ok && r.GetReservationEnded() && from != reserved {
		return nil, &TransitionError{Aggregate: e.Aggregate, From: LifecycleName(from), Event: e.Type}
	}
	next := proto.CloneOf(state)
	if next == nil {
		next = &eventsv1.GameServerState{}
	}
	at := timestamppb.New(e.Time)
	switch d := e.Data.(type) {
	case *eventsv1.GameServerScheduled:
		next.Name = e.Aggregate
		next.Host = d.GetHost()
		next.Template = proto.CloneOf(d.GetTemplate())
		next.HealthPolicy = proto.CloneOf(d.GetHealth())
		next.SdkDisconnectGraceSeconds = d.GetSdkDisconnectGraceSeconds()
		next.Labels = cloneMap(d.GetLabels())
		next.PlayerSessionPolicy = proto.CloneOf(d.GetPlayerSessions())
		next.Revision = d.GetRevision()
		next.HostSubject = d.GetHostSubject()
		next.Counters = cloneCounters(d.GetTemplate().GetCounters())
		next.Lists = cloneLists(d.GetTemplate().GetLists())
		next.CreateTime = at
	case *eventsv1.ProcessStarted:
		next.Pid = d.GetPid()
		next.Address = d.GetAddress()
		next.Ports = cloneSlice(d.GetPorts())
		next.LogPath = d.GetLogPath()
		next.StartAttempts = d.GetAttempt()
		next.Health = eventsv1.HealthState_HEALTH_STATE_HEALTHY
		next.MissedPeriods = 0
		// A new process has no SDK connection yet; a restarted one's
		// predecessor took its connection (and any grace window) with it.
		next.Connection = eventsv1.ConnectionState_CONNECTION_STATE_UNSPECIFIED
		next.ConnectionSince, next.GraceDeadline = nil, nil
	case *eventsv1.SdkConnected:
		next.Connection = eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED
		next.ConnectionSince, next.GraceDeadline = at, nil
		next.LastHeartbeatTime = at
		next.ConnectionHistory = appendConnection(next.ConnectionHistory, &eventsv1.ConnectionChange{Time: at, Connected: true})
	case *eventsv1.SdkDisconnected:
		next.Connection = eventsv1.ConnectionState_CONNECTION_STATE_DISCONNECTED
		next.ConnectionSince, next.GraceDeadline = at, d.GetGraceDeadline()
		next.ConnectionHistory = appendConnection(next.ConnectionHistory, &eventsv1.ConnectionChange{Time: at, Kind: d.GetKind()})
	case *eventsv1.GameServerReady:
		if !d.GetReservationEnded() {
			next.EverReady = true
		}
		next.GameSession, next.ReservedUntil, next.Allocation = "", nil, nil
	case *eventsv1.GameServerReserved:
		next.ReservedUntil = d.GetUntil()
	case *eventsv1.GameServerAllocated:
		next.GameSession, next.ReservedUntil = d.GetGameSession(), nil
		next.Allocation = proto.CloneOf(d)
		next.LastAllocatedTime = at
		applyAllocationMetadata(next, d.GetLabels(), d.GetAnnotations())
		if err := applyRooms(next, d.GetCounters(), d.GetLists()); err != nil {
			return nil, err
		}
	case *eventsv1.GameServerReallocated:
		next.LastAllocatedTime = at
		applyAllocationMetadata(next, d.GetLabels(), d.GetAnnotations())
		if err := applyRooms(next, d.GetCounters(), d.GetLists()); err != nil {
			return nil, err
		}
	case *eventsv1.HealthDegraded:
		next.Health = eventsv1.HealthState_HEALTH_STATE_DEGRADED
		next.MissedPeriods = d.GetMissedPeriods()
		next.LastHeartbeatTime = d.GetLastHeartbeatTime()
	case *eventsv1.HealthRecovered:
		next.Health = eventsv1.HealthState_HEALTH_STATE_HEALTHY
		next.MissedPeriods = 0
		next.LastHeartbeatTime = d.GetLastHeartbeatTime()
	case *eventsv1.GameServerUnhealthy:
		next.Health = eventsv1.HealthState_HEALTH_STATE_FAILED
		next.Reason, next.Evidence = d.GetReason(), proto.CloneOf(d.GetEvidence())
		next.LastHeartbeatTime = laterTime(next.GetLastHeartbeatTime(), d.GetEvidence().GetLastHeartbeatTime())
	case *eventsv1.ShutdownRequested:
		next.Reason, next.Evidence = d.GetReason(), proto.CloneOf(d.GetEvidence())
		next.ShutdownDeadline = d.GetDeadline()
	case *eventsv1.ProcessSignalled:
		// A fact about the process; the lifecycle moves when it exits.
	case *eventsv1.ProcessExited:
		next.Pid = 0
	case *eventsv1.GameServerTerminated:
		next.Reason, next.Evidence = d.GetReason(), proto.CloneOf(d.GetEvidence())
		// The agent's evidence has the server's last heartbeat, later than
		// any the events carried: an ended server has one last heartbeat.
		next.LastHeartbeatTime = laterTime(next.GetLastHeartbeatTime(), d.GetEvidence().GetLastHeartbeatTime())
		next.Pid = 0
		if next.Connection == eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED {
			next.Connection = eventsv1.ConnectionState_CONNECTION_STATE_DISCONNECTED // no process, no SDK connection
		}
	case *eventsv1.LabelsChanged:
		if next.Labels == nil {
			next.Labels = map[string]string{}
		}
		for k, v := range d.GetSet() {
			next.Labels[k] = v
		}
		for _, k := range d.GetRemoved() {
			delete(next.Labels, k)
		}
	case *eventsv1.AnnotationsChanged:
		applyAnnotationsChanged(next, d)
	case *eventsv1.TrackedPlayerConnected, *eventsv1.TrackedPlayerDisconnected, *eventsv1.PlayerCapacitySet:
		applyPlayerTracking(next, d)
	case *eventsv1.CounterChanged:
		if err := applyCounterChanged(next, d); err != nil {
			return nil, err
		}
	case *eventsv1.ListChanged:
		if err := applyListChanged(next, d); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("events: %s has payload %T", e.Type, e.Data)
	}
	if row.to != absent {
		next.Lifecycle = row.to
	}
	next.UpdateTime = at
	return next, nil
}

// laterTime is the later of a and b (nil when both are).
func laterTime(a, b *timestamppb.Timestamp) *timestamppb.Timestamp {
	if b == nil || a != nil && !b.AsTime().After(a.AsTime()) {
		return a
	}
	return b
}

func appendConnection(h []*eventsv1.ConnectionChange, c *eventsv1.ConnectionChange) []*eventsv1.ConnectionChange {
	h = append(h, c)
	if len(h) > MaxConnectionHistory {
		h = h[len(h)-MaxConnectionHistory:]
	}
	return h
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneSlice[M proto.Message](in []M) []M {
	out := make([]M, len(in))
	for i, m := range in {
		out[i] = proto.CloneOf(m)
	}
	return out
}

// GameServerCommand is a command on a game server; see the types below.
type GameServerCommand interface{ gameServerCommand() }

// ScheduleGameServer places a new game server of a fleet on a host.
type ScheduleGameServer struct {
	// Host is the host resource name.
	Host string
	// Spec is the fleet's spec to copy the template and policies from.
	Spec *eventsv1.FleetSpec
	// Revision is the fleet's revision the spec is (0 for a standalone
	// server).
	Revision int64
	// HostSubject puts the server's events on its host subject
	// (GameServerSubject): the host's agent writes them
	// (HostState.host_subjects).
	HostSubject bool
}

// RecordProcessStart records that the agent launched the process.
type RecordProcessStart struct {
	// Started is the fact to record.
	Started *eventsv1.ProcessStarted
}

// MarkReady records the process's Ready call.
type MarkReady struct{}

// RecordSDKConnected records a call with the process token; a no-op when the
// server is already connected.
type RecordSDKConnected struct {
	// Transport is "grpc-stream", "grpc" or "rest".
	Transport string
	// RemoteAddress is the peer's address.
	RemoteAddress string
}

// RecordSDKDisconnected records that the SDK connection closed at At; the
// grace window is the server's sdk_disconnect_grace_seconds.
type RecordSDKDisconnected struct {
	// Kind says how it closed.
	Kind eventsv1.DisconnectKind
	// At is when it closed.
	At time.Time
	// Detail is e.g. the transport error.
	Detail string
}

// RequestShutdown asks the server to stop by Deadline; a no-op when it is
// already shutting down.
type RequestShutdown struct {
	// Reason says why.
	Reason eventsv1.Reason
	// Evidence backs the reason.
	Evidence *eventsv1.Evidence
	// Deadline is when the process gets SIGKILL.
	Deadline time.Time
}

// RecordExit records that the process ended. Unless WillRestart, the server
// is then terminated with the reason that fits its state.
type RecordExit struct {
	// Exited is the fact to record.
	Exited *eventsv1.ProcessExited
	// LastHeartbeat is the process's last heartbeat as its agent saw it,
	// for the evidence (heartbeats are not events); zero: the last known
	// from the server's events.
	LastHeartbeat time.Time
}

// RecordSignal records a stop signal the agent sent the process.
type RecordSignal struct {
	// Signalled is the fact to record.
	Signalled *eventsv1.ProcessSignalled
}

// MarkUnhealthy moves a server to UNHEALTHY.
type MarkUnhealthy struct {
	// Reason says why.
	Reason eventsv1.Reason
	// Evidence backs it.
	Evidence *eventsv1.Evidence
}

// Terminate ends a server without a process exit to observe (e.g. it never
// started, or its host was lost).
type Terminate struct {
	// Reason says why.
	Reason eventsv1.Reason
	// Evidence backs it.
	Evidence *eventsv1.Evidence
}

// RecordMissedHeartbeats records that the process has now missed Missed
// consecutive heartbeat periods (HealthDegraded). Reaching the policy's
// failure threshold also makes the server UNHEALTHY with reason
// HEALTH_CHECK_FAILED and the evidence.
type RecordMissedHeartbeats struct {
	// Missed is the number of consecutive periods missed.
	Missed int32
	// LastHeartbeat is the last heartbeat received (zero: none yet).
	LastHeartbeat time.Time
}

// RecordHeartbeatsResumed records that heartbeats came back before the
// threshold (HealthRecovered); a no-op when the server is not degraded.
type RecordHeartbeatsResumed struct {
	// At is the heartbeat that ended the degradation.
	At time.Time
}

// Allocate places a new game session on a READY (or, for the game's own
// SDK call, RESERVED) server, or, with Again, another match on an
// ALLOCATED one (GameServerReallocated: its game session stays). Counters
// and Lists are changed with it, in the same event (rooms.go): an action
// that does not fit refuses the server.
type Allocate struct {
	// Allocated is the allocation to record; with Again only its labels
	// and annotations are.
	Allocated *eventsv1.GameServerAllocated
	// Again allocates an ALLOCATED server once more; it must be ALLOCATED.
	Again bool
	// Counters are changed with the allocation.
	Counters []CounterAction
	// Lists are changed with the allocation.
	Lists []ListAction
}

// Reserve holds a READY server back from allocation until Until.
type Reserve struct {
	// Until is the end of the reservation; zero: none, the server stays
	// RESERVED until it says otherwise (Agones' Reserve(0)).
	Until time.Time
}

// EndReservation returns a RESERVED server whose reservation ended by Now
// to READY; a no-op otherwise, and for a reservation without an end.
type EndReservation struct {
	// Now is the decision time.
	Now time.Time
}

// SetLabels changes labels.
type SetLabels struct {
	// Set holds labels to add or change.
	Set map[string]string
	// Removed holds keys to remove.
	Removed []string
}

func (ScheduleGameServer) gameServerCommand()      {}
func (RecordProcessStart) gameServerCommand()      {}
func (MarkReady) gameServerCommand()               {}
func (RecordSDKConnected) gameServerCommand()      {}
func (RecordSDKDisconnected) gameServerCommand()   {}
func (RequestShutdown) gameServerCommand()         {}
func (RecordExit) gameServerCommand()              {}
func (RecordSignal) gameServerCommand()            {}
func (MarkUnhealthy) gameServerCommand()           {}
func (Terminate) gameServerCommand()               {}
func (SetLabels) gameServerCommand()               {}
func (Allocate) gameServerCommand()                {}
func (Reserve) gameServerCommand()                 {}
func (EndReservation) gameServerCommand()          {}
func (RecordMissedHeartbeats) gameServerCommand()  {}
func (RecordHeartbeatsResumed) gameServerCommand() {}

// DecideGameServer returns the events a command produces on a game server, or
// why it is refused. name is the server's resource name; state is nil for a
// server that does not exist yet. The events are checked against the
// transition table before they are returned.
func DecideGameServer(name string, state *eventsv1.GameServerState, cmd GameServerCommand) ([]proto.Message, error) {
	out, err := decideGameServer(state, cmd)
	if err != nil {
		return nil, err
	}
	check := state
	for _, m := range out {
		if check, err = ApplyGameServer(check, Envelope{Aggregate: name, Type: TypeOf(m), Data: m}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decideGameServer(state *eventsv1.GameServerState, cmd GameServerCommand) ([]proto.Message, error) {
	switch c := cmd.(type) {
	case ScheduleGameServer:
		if _, err := ParseHostName(c.Host); err != nil {
			return nil, err
		}
		s := c.Spec
		return []proto.Message{&eventsv1.GameServerScheduled{
			Host:                      c.Host,
			Template:                  proto.CloneOf(s.GetTemplate()),
			Health:                    proto.CloneOf(s.GetHealth()),
			SdkDisconnectGraceSeconds: s.GetSdkDisconnectGraceSeconds(),
			Labels:                    cloneMap(s.GetLabels()),
			PlayerSessions:            proto.CloneOf(s.GetPlayerSessions()),
			Revision:                  c.Revision,
			HostSubject:               c.HostSubject,
		}}, nil
	case RecordProcessStart:
		return []proto.Message{proto.CloneOf(c.Started)}, nil
	case MarkReady:
		return []proto.Message{&eventsv1.GameServerReady{}}, nil
	case Allocate:
		switch l := state.GetLifecycle(); {
		case c.Again && l == allocated:
		case c.Again:
			return nil, &TransitionError{Aggregate: state.GetName(), From: LifecycleName(l), Event: "Allocate again"}
		case l == ready, l == reserved && c.Allocated.GetSelfAllocated():
		default:
			return nil, &TransitionError{Aggregate: state.GetName(), From: LifecycleName(l), Event: "Allocate"}
		}
		if err := checkProperties(c.Allocated.GetProperties()); err != nil {
			return nil, err
		}
		if err := checkAllocationMetadata(state, c.Allocated.GetLabels(), c.Allocated.GetAnnotations()); err != nil {
			return nil, err
		}
		cs, ls, err := decideRooms(state, c.Counters, c.Lists)
		if err != nil {
			return nil, err
		}
		if c.Again {
			return []proto.Message{reallocated(state, c.Allocated, cs, ls)}, nil
		}
		alloc := proto.CloneOf(c.Allocated)
		alloc.Counters, alloc.Lists = cs, ls
		return []proto.Message{alloc}, nil
	case Reserve:
		d := &eventsv1.GameServerReserved{}
		if !c.Until.IsZero() {
			d.Until = timestamppb.New(c.Until)
		}
		return []proto.Message{d}, nil
	case EndReservation:
		until := state.GetReservedUntil()
		if state.GetLifecycle() != reserved || until == nil || c.Now.Before(until.AsTime()) {
			return nil, nil
		}
		return []proto.Message{&eventsv1.GameServerReady{ReservationEnded: true}}, nil
	case RecordSDKConnected:
		// Only a no-op where SdkConnected is allowed: a terminated server
		// refuses it even if it was connected when it ended.
		if state.GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED && state.GetLifecycle() != terminated {
			return nil, nil
		}
		return []proto.Message{&eventsv1.SdkConnected{Transport: c.Transport, RemoteAddress: c.RemoteAddress}}, nil
	case RecordSDKDisconnected:
		grace := time.Duration(state.GetSdkDisconnectGraceSeconds()) * time.Second
		return []proto.Message{&eventsv1.SdkDisconnected{
			Kind: c.Kind, GraceDeadline: timestamppb.New(c.At.Add(grace)), Detail: c.Detail,
		}}, nil
	case RequestShutdown:
		if state.GetLifecycle() == shuttingDown {
			return nil, nil
		}
		return []proto.Message{&eventsv1.ShutdownRequested{
			Reason: c.Reason, Evidence: proto.CloneOf(c.Evidence), Deadline: timestamppb.New(c.Deadline),
		}}, nil
	case RecordExit:
		out := []proto.Message{proto.CloneOf(c.Exited)}
		if c.Exited.GetWillRestart() {
			return out, nil
		}
		ev := exitEvidence(state, c.Exited)
		if !c.LastHeartbeat.IsZero() {
			ev.LastHeartbeatTime = timestamppb.New(c.LastHeartbeat)
		}
		return append(out, &eventsv1.GameServerTerminated{Reason: exitReason(state, c.Exited), Evidence: ev}), nil
	case RecordSignal:
		return []proto.Message{proto.CloneOf(c.Signalled)}, nil
	case MarkUnhealthy:
		return []proto.Message{&eventsv1.GameServerUnhealthy{Reason: c.Reason, Evidence: proto.CloneOf(c.Evidence)}}, nil
	case Terminate:
		return []proto.Message{&eventsv1.GameServerTerminated{Reason: c.Reason, Evidence: proto.CloneOf(c.Evidence)}}, nil
	case RecordMissedHeartbeats:
		policy := state.GetHealthPolicy()
		var last *timestamppb.Timestamp
		if !c.LastHeartbeat.IsZero() {
			last = timestamppb.New(c.LastHeartbeat)
		}
		out := []proto.Message{&eventsv1.HealthDegraded{
			MissedPeriods: c.Missed, FailureThreshold: policy.GetFailureThreshold(),
			PeriodSeconds: policy.GetPeriodSeconds(), LastHeartbeatTime: last,
		}}
		if c.Missed >= policy.GetFailureThreshold() && state.GetLifecycle() != shuttingDown {
			out = append(out, &eventsv1.GameServerUnhealthy{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, Evidence: &eventsv1.Evidence{
				LastHeartbeatTime: last, MissedPeriods: c.Missed, PeriodSeconds: policy.GetPeriodSeconds(),
				FailureThreshold: policy.GetFailureThreshold(), ConnectionHistory: cloneSlice(state.GetConnectionHistory()),
				StartAttempts: state.GetStartAttempts(),
			}})
		}
		return out, nil
	case RecordHeartbeatsResumed:
		if state.GetHealth() != eventsv1.HealthState_HEALTH_STATE_DEGRADED {
			return nil, nil
		}
		return []proto.Message{&eventsv1.HealthRecovered{LastHeartbeatTime: timestamppb.New(c.At)}}, nil
	case SetLabels:
		if err := checkLabelChange(state.GetLabels(), c.Set, c.Removed); err != nil {
			return nil, err
		}
		return []proto.Message{&eventsv1.LabelsChanged{Set: cloneMap(c.Set), Removed: slices.Clone(c.Removed)}}, nil
	case SetAnnotations:
		return decideAnnotations(state, c)
	case TrackPlayerConnect, TrackPlayerDisconnect, SetPlayerCapacity:
		return decidePlayerTracking(state, c)
	case UpdateCounter:
		return decideCounter(state, c)
	case UpdateList:
		return decideList(state, c)
	}
	return nil, fmt.Errorf("events: unknown game server command %T", cmd)
}

// exitReason is the termination reason of a process exit: a shutdown or an
// unhealthy verdict keeps its own reason; a crash before Ready with no
// restart left is PROCESS_CRASHED_BEFORE_READY; anything else PROCESS_EXITED.
func exitReason(state *eventsv1.GameServerState, x *eventsv1.ProcessExited) eventsv1.Reason {
	switch state.GetLifecycle() {
	case shuttingDown, unhealthy:
		if state.GetReason() != eventsv1.Reason_REASON_UNSPECIFIED {
			return state.GetReason()
		}
	}
	if x.GetBeforeReady() {
		return eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY
	}
	return eventsv1.Reason_REASON_PROCESS_EXITED
}

func exitEvidence(state *eventsv1.GameServerState, x *eventsv1.ProcessExited) *eventsv1.Evidence {
	ev := proto.CloneOf(state.GetEvidence())
	if ev == nil || state.GetLifecycle() != shuttingDown && state.GetLifecycle() != unhealthy {
		ev = &eventsv1.Evidence{}
	}
	if x.ExitCode != nil {
		ev.ExitCode = proto.Int32(x.GetExitCode())
	}
	ev.Signal = x.GetSignal()
	ev.StartAttempts = x.GetAttempt()
	ev.LastHeartbeatTime = state.GetLastHeartbeatTime()
	ev.ConnectionHistory = cloneSlice(state.GetConnectionHistory())
	return ev
}

// Bounds of a game server's labels and of a game session's properties,
// whoever sets them: the API, or the game server through its agent's SDK.
const (
	MaxLabels             = 64
	MaxProperties         = 64
	MaxPropertyKeyBytes   = 63
	MaxPropertyValueBytes = 1 << 10
)

// checkProperties refuses game session properties beyond the bounds.
func checkProperties(props map[string]string) error {
	if len(props) > MaxProperties {
		return Invalid("properties", "at most %d properties, not %d", MaxProperties, len(props))
	}
	for k, v := range props {
		switch {
		case k == "" || len(k) > MaxPropertyKeyBytes:
			return Invalid("properties", "key %.40q must be 1-%d bytes", k, MaxPropertyKeyBytes)
		case len(v) > MaxPropertyValueBytes:
			return Invalid("properties", "the value of %q has %d bytes, more than %d", k, len(v), MaxPropertyValueBytes)
		}
	}
	return nil
}

// ErrForeignSubject marks an event read from another subject than its game
// server's own: another host's subject for a server on a host subject
// (SubjectOf), which that host's credentials may publish on. The fold
// refuses it without its taking a place in the server's history (the
// projector dead-letters it and leaves the server's row as it was): it is
// not the server's, and the server's writers never read it.
var ErrForeignSubject = errors.New("events: event on another subject than its game server's")

// checkServerSubject refuses an event read from a subject (e.Subject) that
// is not the game server's: for its first event, the subject its
// GameServerScheduled names; after, SubjectOf its state. Events not read
// from the stream (a writer's own, folded as it appends them) pass.
func checkServerSubject(state *eventsv1.GameServerState, e Envelope) error {
	if e.Subject == "" {
		return nil
	}
	var want string
	var err error
	switch d := e.Data.(type) {
	case *eventsv1.GameServerScheduled:
		if d.GetHostSubject() {
			want, err = GameServerSubject(e.Aggregate, d.GetHost())
		} else {
			want, err = Subject(e.Aggregate)
		}
	default:
		if state.GetName() == "" {
			return nil // no server yet: the transition table refuses it
		}
		want, err = SubjectOf(state)
	}
	if err != nil {
		return fmt.Errorf("%w: %s %s on %s: %w", ErrForeignSubject, e.Type, e.ID, e.Subject, err)
	}
	if e.Subject != want {
		return fmt.Errorf("%w: %s %s on %s, not %s", ErrForeignSubject, e.Type, e.ID, e.Subject, want)
	}
	return nil
}
