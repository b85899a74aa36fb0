package apiserver

import (
	"strconv"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// This file maps between the API's messages (tether.v1) and the event
// payloads and folded states (tether.events.v1). The two evolve separately:
// events are stored forever, the API is a contract with clients.

func specFromAPI(f *tetherv1.Fleet) *eventsv1.FleetSpec {
	s := &eventsv1.FleetSpec{
		Replicas:                  f.GetReplicas(),
		SdkDisconnectGraceSeconds: f.GetSdkDisconnectGraceSeconds(),
		Scheduling:                eventsv1.Scheduling(f.GetScheduling()),
		Labels:                    f.GetLabels(),
		Autoscaling:               autoscalingFromAPI(f.GetAutoscaling()),
		Strategy:                  strategyFromAPI(f.GetStrategy()),
	}
	if t := f.GetTemplate(); t != nil {
		s.Template = &eventsv1.GameServerTemplate{Command: t.GetCommand(), Args: t.GetArgs(), Env: t.GetEnv(), HostSelector: t.GetHostSelector(),
			Counters: countersFromAPI(t.GetCounters()), Lists: listsFromAPI(t.GetLists())}
		for _, p := range t.GetPorts() {
			s.Template.Ports = append(s.Template.Ports, &eventsv1.PortSpec{Name: p.GetName(), Protocol: eventsv1.Protocol(p.GetProtocol())})
		}
	}
	if h := f.GetHealth(); h != nil {
		s.Health = &eventsv1.HealthPolicy{
			Disabled: h.GetDisabled(), InitialDelaySeconds: h.GetInitialDelaySeconds(),
			PeriodSeconds: h.GetPeriodSeconds(), FailureThreshold: h.GetFailureThreshold(),
			ReadyTimeoutSeconds: h.GetReadyTimeoutSeconds(),
		}
	}
	if p := f.GetPlayerSessions(); p != nil {
		s.PlayerSessions = &eventsv1.PlayerSessionPolicy{
			MaxPlayers: p.GetMaxPlayers(), ReservationTimeoutSeconds: p.GetReservationTimeoutSeconds(),
			ReconnectWindowSeconds: p.GetReconnectWindowSeconds(),
		}
	}
	return s
}

func fleetToAPI(s *eventsv1.FleetState, seq uint64, c projections.FleetCounts) *tetherv1.Fleet {
	spec := s.GetSpec()
	f := &tetherv1.Fleet{
		Name:                      s.GetName(),
		Replicas:                  spec.GetReplicas(),
		SdkDisconnectGraceSeconds: spec.GetSdkDisconnectGraceSeconds(),
		Scheduling:                tetherv1.Fleet_Scheduling(spec.GetScheduling()),
		Labels:                    spec.GetLabels(),
		Status: &tetherv1.FleetStatus{
			ReadyReplicas: c.Ready, ReservedReplicas: c.Reserved, AllocatedReplicas: c.Allocated,
			UnhealthyReplicas: c.Unhealthy, Replicas: c.Live,
			Conditions: fleetConditions(s), WaitingReplicas: s.GetPlacementBlocked().GetWaiting(),
			LastScaling: scalingInWords(s.GetLastAutoscale(), time.Time{}),
			Rollout:     rolloutToAPI(s.GetRollout()),
		},
		Autoscaling: autoscalingToAPI(spec.GetAutoscaling()),
		Strategy:    strategyToAPI(spec.GetStrategy()),
		Revision:    s.GetRevision(),
		Etag:        etag(seq),
		Sequence:    int64(seq),
		CreateTime:  s.GetCreateTime(),
		UpdateTime:  s.GetUpdateTime(),
		DeleteTime:  s.GetDeleteTime(),
	}
	if t := spec.GetTemplate(); t != nil {
		f.Template = &tetherv1.GameServerTemplate{Command: t.GetCommand(), Args: t.GetArgs(), Env: t.GetEnv(), HostSelector: t.GetHostSelector(),
			Counters: countersToAPI(t.GetCounters()), Lists: listsToAPI(t.GetLists())}
		for _, p := range t.GetPorts() {
			f.Template.Ports = append(f.Template.Ports, &tetherv1.PortSpec{Name: p.GetName(), Protocol: tetherv1.PortSpec_Protocol(p.GetProtocol())})
		}
	}
	if h := spec.GetHealth(); h != nil {
		f.Health = &tetherv1.HealthPolicy{
			Disabled: h.GetDisabled(), InitialDelaySeconds: h.GetInitialDelaySeconds(),
			PeriodSeconds: h.GetPeriodSeconds(), FailureThreshold: h.GetFailureThreshold(),
			ReadyTimeoutSeconds: h.GetReadyTimeoutSeconds(),
		}
	}
	if p := spec.GetPlayerSessions(); p != nil {
		f.PlayerSessions = &tetherv1.PlayerSessionPolicy{
			MaxPlayers: p.GetMaxPlayers(), ReservationTimeoutSeconds: p.GetReservationTimeoutSeconds(),
			ReconnectWindowSeconds: p.GetReconnectWindowSeconds(),
		}
	}
	return f
}

// etag is a fleet's version: the stream sequence of its last event.
func etag(seq uint64) string { return strconv.FormatUint(seq, 10) }

func gameServerToAPI(s *eventsv1.GameServerState, seq uint64) *tetherv1.GameServer {
	g := &tetherv1.GameServer{
		Name:     s.GetName(),
		Host:     s.GetHost(),
		Revision: s.GetRevision(),
		State:    tetherv1.GameServer_State(s.GetLifecycle()),
		Connection: &tetherv1.ConnectionStatus{
			State:         tetherv1.ConnectionStatus_State(s.GetConnection()),
			Since:         s.GetConnectionSince(),
			GraceDeadline: s.GetGraceDeadline(),
		},
		Health: &tetherv1.HealthStatus{
			State:             tetherv1.HealthStatus_State(s.GetHealth()),
			MissedPeriods:     s.GetMissedPeriods(),
			LastHeartbeatTime: s.GetLastHeartbeatTime(),
		},
		Address:     s.GetAddress(),
		Pid:         s.GetPid(),
		Reason:      events.ReasonName(s.GetReason()),
		Labels:      s.GetLabels(),
		GameSession: s.GetGameSession(),
		CreateTime:  s.GetCreateTime(),
		UpdateTime:  s.GetUpdateTime(),
		Sequence:    int64(seq),
		Counters:    countersToAPI(s.GetCounters()),
		Lists:       listsToAPI(s.GetLists()),
		Annotations: s.GetAnnotations(),
	}
	for _, p := range s.GetPorts() {
		g.Ports = append(g.Ports, &tetherv1.Port{Name: p.GetName(), Port: p.GetPort(), Protocol: tetherv1.PortSpec_Protocol(p.GetProtocol())})
	}
	if e := s.GetEvidence(); e != nil {
		g.Evidence = &tetherv1.Evidence{
			LastHeartbeatTime: e.GetLastHeartbeatTime(), MissedPeriods: e.GetMissedPeriods(),
			PeriodSeconds: e.GetPeriodSeconds(), FailureThreshold: e.GetFailureThreshold(), ExitCode: e.ExitCode,
			Signal: e.GetSignal(), RequestedBy: e.GetRequestedBy(), StartAttempts: e.GetStartAttempts(), Detail: e.GetDetail(),
		}
	}
	return g
}

// countersFromAPI converts a template's counters for the events.
func countersFromAPI(m map[string]*tetherv1.Counter) map[string]*eventsv1.Counter {
	if m == nil {
		return nil
	}
	out := make(map[string]*eventsv1.Counter, len(m))
	for k, c := range m {
		out[k] = &eventsv1.Counter{Count: c.GetCount(), Capacity: c.GetCapacity()}
	}
	return out
}

// listsFromAPI converts a template's lists for the events.
func listsFromAPI(m map[string]*tetherv1.List) map[string]*eventsv1.List {
	if m == nil {
		return nil
	}
	out := make(map[string]*eventsv1.List, len(m))
	for k, l := range m {
		out[k] = &eventsv1.List{Capacity: l.GetCapacity(), Values: l.GetValues()}
	}
	return out
}

// countersToAPI converts a template's or a server's counters.
func countersToAPI(m map[string]*eventsv1.Counter) map[string]*tetherv1.Counter {
	if m == nil {
		return nil
	}
	out := make(map[string]*tetherv1.Counter, len(m))
	for k, c := range m {
		out[k] = &tetherv1.Counter{Count: c.GetCount(), Capacity: c.GetCapacity()}
	}
	return out
}

// listsToAPI converts a template's or a server's lists.
func listsToAPI(m map[string]*eventsv1.List) map[string]*tetherv1.List {
	if m == nil {
		return nil
	}
	out := make(map[string]*tetherv1.List, len(m))
	for k, l := range m {
		out[k] = &tetherv1.List{Capacity: l.GetCapacity(), Values: l.GetValues()}
	}
	return out
}
