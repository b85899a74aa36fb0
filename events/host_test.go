package events_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

const hostName = "hosts/h1"

// Host event payloads for the sequences below.
var (
	register    = &eventsv1.HostRegistered{Capacity: 8, Labels: map[string]string{"region": "eu"}, Address: "10.0.0.1", AgentVersion: "v1", SdkAddress: "127.0.0.1:9357"}
	online      = &eventsv1.HostOnline{LastHeartbeatTime: tsAt(-1)}
	unreachable = &eventsv1.HostUnreachable{LastHeartbeatTime: tsAt(-2)}
	lost        = &eventsv1.HostLost{LastHeartbeatTime: tsAt(-3)}
	drain       = &eventsv1.HostDrainRequested{RequestedBy: "ops"}
	deregister  = &eventsv1.HostDeregistered{}
)

// foldHost applies msgs in order, one second apart, and returns the state
// after the last one or the first error.
func foldHost(t *testing.T, msgs ...proto.Message) (*eventsv1.HostState, error) {
	t.Helper()
	var state *eventsv1.HostState
	for i, m := range msgs {
		next, err := applyChecked(t, events.ApplyHost, state, events.New(hostName, at(i), m))
		if err != nil {
			if next != nil {
				t.Errorf("ApplyHost returned a state with its error: %v", next)
			}
			return nil, err
		}
		state = next
	}
	return state, nil
}

func TestApplyHostTransitions(t *testing.T) {
	const (
		ONLINE       = eventsv1.HostStatus_HOST_STATUS_ONLINE
		UNREACHABLE  = eventsv1.HostStatus_HOST_STATUS_UNREACHABLE
		LOST         = eventsv1.HostStatus_HOST_STATUS_LOST
		DRAINING     = eventsv1.HostStatus_HOST_STATUS_DRAINING
		DEREGISTERED = eventsv1.HostStatus_HOST_STATUS_DEREGISTERED
	)
	tests := []struct {
		name         string
		events       []proto.Message
		wantStatus   eventsv1.HostStatus
		wantDraining bool
		// refusedFrom, when set, is the state the last event is refused in.
		refusedFrom string
	}{
		{name: "register", events: []proto.Message{register}, wantStatus: ONLINE},
		{name: "register again (agent restart)", events: []proto.Message{register, register}, wantStatus: ONLINE},
		{name: "unreachable", events: []proto.Message{register, unreachable}, wantStatus: UNREACHABLE},
		{name: "unreachable then online", events: []proto.Message{register, unreachable, online}, wantStatus: ONLINE},
		{name: "online while online", events: []proto.Message{register, online}, wantStatus: ONLINE},
		{name: "lost after unreachable", events: []proto.Message{register, unreachable, lost}, wantStatus: LOST},
		{name: "lost host registers again", events: []proto.Message{register, unreachable, lost, register}, wantStatus: ONLINE},
		{name: "drain", events: []proto.Message{register, drain}, wantStatus: DRAINING, wantDraining: true},
		{name: "drain twice", events: []proto.Message{register, drain, drain}, wantStatus: DRAINING, wantDraining: true},
		{name: "draining host goes unreachable", events: []proto.Message{register, drain, unreachable}, wantStatus: UNREACHABLE, wantDraining: true},
		{name: "drain survives unreachable then online", events: []proto.Message{register, drain, unreachable, online}, wantStatus: DRAINING, wantDraining: true},
		{name: "drain while unreachable shows once online", events: []proto.Message{register, unreachable, drain, online}, wantStatus: DRAINING, wantDraining: true},
		{name: "drain while unreachable keeps unreachable", events: []proto.Message{register, unreachable, drain}, wantStatus: UNREACHABLE, wantDraining: true},
		{name: "drain survives an agent restart", events: []proto.Message{register, drain, unreachable, lost, register}, wantStatus: DRAINING, wantDraining: true},
		{name: "deregister", events: []proto.Message{register, deregister}, wantStatus: DEREGISTERED},
		{name: "deregister while unreachable", events: []proto.Message{register, unreachable, deregister}, wantStatus: DEREGISTERED},
		{name: "deregister lost", events: []proto.Message{register, unreachable, lost, deregister}, wantStatus: DEREGISTERED},
		{name: "register after deregister", events: []proto.Message{register, deregister, register}, wantStatus: ONLINE},

		{name: "online before register", events: []proto.Message{online}, refusedFrom: "UNSPECIFIED"},
		{name: "unreachable before register", events: []proto.Message{unreachable}, refusedFrom: "UNSPECIFIED"},
		{name: "lost before register", events: []proto.Message{lost}, refusedFrom: "UNSPECIFIED"},
		{name: "drain before register", events: []proto.Message{drain}, refusedFrom: "UNSPECIFIED"},
		{name: "deregister before register", events: []proto.Message{deregister}, refusedFrom: "UNSPECIFIED"},
		{name: "lost while online", events: []proto.Message{register, lost}, refusedFrom: "ONLINE"},
		{name: "lost while draining", events: []proto.Message{register, drain, lost}, refusedFrom: "DRAINING"},
		{name: "lost twice", events: []proto.Message{register, unreachable, lost, lost}, refusedFrom: "LOST"},
		{name: "unreachable twice", events: []proto.Message{register, unreachable, unreachable}, refusedFrom: "UNREACHABLE"},
		{name: "unreachable while lost", events: []proto.Message{register, unreachable, lost, unreachable}, refusedFrom: "LOST"},
		{name: "deregister twice", events: []proto.Message{register, deregister, deregister}, refusedFrom: "DEREGISTERED"},
		{name: "online after deregister", events: []proto.Message{register, deregister, online}, refusedFrom: "DEREGISTERED"},
		{name: "unreachable after deregister", events: []proto.Message{register, deregister, unreachable}, refusedFrom: "DEREGISTERED"},
		{name: "drain after deregister", events: []proto.Message{register, deregister, drain}, refusedFrom: "DEREGISTERED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := foldHost(t, tt.events...)
			if tt.refusedFrom != "" {
				te := asTransitionError(t, err)
				last := events.TypeOf(tt.events[len(tt.events)-1])
				if te.From != tt.refusedFrom || te.Event != last || te.Aggregate != hostName {
					t.Errorf("TransitionError = %+v, want From %q, Event %q, Aggregate %q", te, tt.refusedFrom, last, hostName)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got.GetStatus() != tt.wantStatus || got.GetDraining() != tt.wantDraining {
				t.Errorf("status = %v, draining = %v; want %v, %v", got.GetStatus(), got.GetDraining(), tt.wantStatus, tt.wantDraining)
			}
			if got.GetName() != hostName {
				t.Errorf("name = %q, want %q", got.GetName(), hostName)
			}
			if !proto.Equal(got.GetCreateTime(), tsAt(0)) {
				t.Errorf("create time = %v, want the first registration's %v", got.GetCreateTime(), tsAt(0))
			}
			if !proto.Equal(got.GetUpdateTime(), tsAt(len(tt.events)-1)) {
				t.Errorf("update time = %v, want the last event's %v", got.GetUpdateTime(), tsAt(len(tt.events)-1))
			}
		})
	}
}

func TestApplyHostFields(t *testing.T) {
	reg := proto.CloneOf(register)
	state, err := foldHost(t, reg)
	if err != nil {
		t.Fatal(err)
	}
	want := &eventsv1.HostState{
		Name:              hostName,
		Status:            eventsv1.HostStatus_HOST_STATUS_ONLINE,
		Capacity:          8,
		Labels:            map[string]string{"region": "eu"},
		Address:           "10.0.0.1",
		AgentVersion:      "v1",
		SdkAddress:        "127.0.0.1:9357",
		LastHeartbeatTime: tsAt(0),
		CreateTime:        tsAt(0),
		UpdateTime:        tsAt(0),
	}
	if !proto.Equal(state, want) {
		t.Fatalf("after HostRegistered =\n%v\nwant\n%v", state, want)
	}
	if reg.Labels["region"] = "changed"; state.GetLabels()["region"] != "eu" {
		t.Errorf("state shares the event's labels map")
	}

	tests := []struct {
		name  string
		event proto.Message
		want  *eventsv1.HostState
	}{
		{name: "unreachable records the last heartbeat", event: unreachable, want: &eventsv1.HostState{Status: eventsv1.HostStatus_HOST_STATUS_UNREACHABLE, LastHeartbeatTime: tsAt(-2)}},
		{name: "online records the last heartbeat", event: online, want: &eventsv1.HostState{Status: eventsv1.HostStatus_HOST_STATUS_ONLINE, LastHeartbeatTime: tsAt(-1)}},
		{name: "re-register updates capacity", event: &eventsv1.HostRegistered{Capacity: 16, AgentVersion: "v2"}, want: &eventsv1.HostState{Status: eventsv1.HostStatus_HOST_STATUS_ONLINE, Capacity: 16, AgentVersion: "v2", LastHeartbeatTime: tsAt(5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, err := applyChecked(t, events.ApplyHost, state, events.New(hostName, at(5), tt.event))
			if err != nil {
				t.Fatal(err)
			}
			if next.GetStatus() != tt.want.GetStatus() || !proto.Equal(next.GetLastHeartbeatTime(), tt.want.GetLastHeartbeatTime()) {
				t.Errorf("status %v, heartbeat %v; want %v, %v", next.GetStatus(), next.GetLastHeartbeatTime(), tt.want.GetStatus(), tt.want.GetLastHeartbeatTime())
			}
			if tt.want.Capacity != 0 && (next.GetCapacity() != tt.want.GetCapacity() || next.GetAgentVersion() != tt.want.GetAgentVersion()) {
				t.Errorf("capacity %d, agent %q; want %d, %q", next.GetCapacity(), next.GetAgentVersion(), tt.want.GetCapacity(), tt.want.GetAgentVersion())
			}
			if !proto.Equal(next.GetCreateTime(), tsAt(0)) || !proto.Equal(next.GetUpdateTime(), tsAt(5)) {
				t.Errorf("create %v, update %v; want %v, %v", next.GetCreateTime(), next.GetUpdateTime(), tsAt(0), tsAt(5))
			}
		})
	}
}

func TestApplyHostForeignEvent(t *testing.T) {
	state, err := foldHost(t, register)
	if err != nil {
		t.Fatal(err)
	}
	_, err = events.ApplyHost(state, events.New(hostName, t0, &eventsv1.FleetDeleted{}))
	if err == nil {
		t.Fatal("ApplyHost(FleetDeleted) succeeded, want an error")
	}
	var te *events.TransitionError
	if errors.As(err, &te) {
		t.Errorf("err = %v, want a plain error, not a TransitionError", err)
	}
}

func TestApplyHostKeepsTheRegistration(t *testing.T) {
	first := events.New(hostName, at(0), &eventsv1.HostRegistered{Capacity: 8, AgentIncarnation: "a1"})
	first.Sequence = 10
	state, err := events.ApplyHost(nil, first)
	if err != nil {
		t.Fatal(err)
	}
	if state.GetRegisteredSequence() != 10 || state.GetAgentIncarnation() != "a1" {
		t.Fatalf("after the first registration: sequence %d, incarnation %q; want 10, a1", state.GetRegisteredSequence(), state.GetAgentIncarnation())
	}
	lost := events.New(hostName, at(1), &eventsv1.HostUnreachable{LastHeartbeatTime: tsAt(1)})
	lost.Sequence = 11
	if state, err = events.ApplyHost(state, lost); err != nil {
		t.Fatal(err)
	}
	if state.GetRegisteredSequence() != 10 {
		t.Errorf("a liveness event moved the registration to %d", state.GetRegisteredSequence())
	}
	again := events.New(hostName, at(2), &eventsv1.HostRegistered{Capacity: 8, AgentIncarnation: "a2"})
	again.Sequence = 42
	if state, err = events.ApplyHost(state, again); err != nil {
		t.Fatal(err)
	}
	if state.GetRegisteredSequence() != 42 || state.GetAgentIncarnation() != "a2" || state.GetStatus() != eventsv1.HostStatus_HOST_STATUS_ONLINE {
		t.Errorf("after the agent restarted: sequence %d, incarnation %q, %v; want 42, a2, ONLINE",
			state.GetRegisteredSequence(), state.GetAgentIncarnation(), state.GetStatus())
	}
}
