package events_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

const fleetName = "fleets/arena"

// minimalSpec is the smallest valid create request.
func minimalSpec() *eventsv1.FleetSpec {
	return &eventsv1.FleetSpec{
		Replicas: 3,
		Template: &eventsv1.GameServerTemplate{
			Command: "/opt/game/server",
			Args:    []string{"-port", "${TETHER_PORT_GAME}"},
			Env:     map[string]string{"MODE": "ranked"},
			Ports: []*eventsv1.PortSpec{
				{Name: "game"},
				{Name: "query", Protocol: eventsv1.Protocol_PROTOCOL_TCP},
			},
		},
		Labels: map[string]string{"region": "eu"},
	}
}

// createdFleet returns the state of a fleet created from spec.
func createdFleet(t *testing.T, spec *eventsv1.FleetSpec) *eventsv1.FleetState {
	t.Helper()
	out, err := events.DecideFleet(fleetName, nil, events.CreateFleet{Spec: spec})
	if err != nil {
		t.Fatalf("DecideFleet(CreateFleet): %v", err)
	}
	state := (*eventsv1.FleetState)(nil)
	for i, m := range out {
		if state, err = events.ApplyFleet(state, events.New(fleetName, at(i), m)); err != nil {
			t.Fatalf("ApplyFleet(%s): %v", events.TypeOf(m), err)
		}
	}
	return state
}

func deletedFleet(t *testing.T) *eventsv1.FleetState {
	t.Helper()
	state, err := events.ApplyFleet(createdFleet(t, minimalSpec()), events.New(fleetName, at(10), &eventsv1.FleetDeleted{}))
	if err != nil {
		t.Fatal(err)
	}
	return state
}

func TestDecideFleetCreateDefaults(t *testing.T) {
	in := minimalSpec()
	before := proto.Clone(in)

	out, err := events.DecideFleet(fleetName, nil, events.CreateFleet{Spec: in})
	if err != nil {
		t.Fatalf("DecideFleet: %v", err)
	}
	if !proto.Equal(before, in) {
		t.Errorf("DecideFleet modified the command's spec: %v", in)
	}
	if got := types(out); !slices.Equal(got, []string{"FleetCreated"}) {
		t.Fatalf("events = %v, want [FleetCreated]", got)
	}
	want := minimalSpec()
	want.Template.Ports[0].Protocol = eventsv1.Protocol_PROTOCOL_UDP
	want.Health = &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}
	want.SdkDisconnectGraceSeconds = 30
	want.PlayerSessions = &eventsv1.PlayerSessionPolicy{ReservationTimeoutSeconds: 60, ReconnectWindowSeconds: 120}
	want.Scheduling = eventsv1.Scheduling_SCHEDULING_PACKED
	want.Strategy = &eventsv1.FleetStrategy{Type: eventsv1.FleetStrategy_ROLLING_UPDATE, MaxSurge: "25%", MaxUnavailable: "25%", FailureThreshold: 3}
	if got := out[0].(*eventsv1.FleetCreated).GetSpec(); !proto.Equal(got, want) {
		t.Errorf("spec =\n%v\nwant\n%v", got, want)
	}
}

func TestDecideFleetCreateKeepsExplicitValues(t *testing.T) {
	in := minimalSpec()
	in.Health = &eventsv1.HealthPolicy{Disabled: true, InitialDelaySeconds: 1, PeriodSeconds: 2, FailureThreshold: 9}
	in.SdkDisconnectGraceSeconds = 4
	in.PlayerSessions = &eventsv1.PlayerSessionPolicy{MaxPlayers: 16, ReservationTimeoutSeconds: 7, ReconnectWindowSeconds: 8}
	in.Scheduling = eventsv1.Scheduling_SCHEDULING_DISTRIBUTED
	in.Replicas = events.MaxReplicas
	in.Strategy = &eventsv1.FleetStrategy{Type: eventsv1.FleetStrategy_RECREATE, MaxSurge: "1", MaxUnavailable: "0", FailureThreshold: 5}

	out, err := events.DecideFleet(fleetName, nil, events.CreateFleet{Spec: in})
	if err != nil {
		t.Fatalf("DecideFleet: %v", err)
	}
	want := proto.CloneOf(in)
	want.Template.Ports[0].Protocol = eventsv1.Protocol_PROTOCOL_UDP
	if got := out[0].(*eventsv1.FleetCreated).GetSpec(); !proto.Equal(got, want) {
		t.Errorf("spec =\n%v\nwant\n%v", got, want)
	}
}

func TestDecideFleetCreateValidation(t *testing.T) {
	tests := []struct {
		name  string
		spec  func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec
		field string
	}{
		{name: "negative replicas", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Replicas = -1; return s }, field: "fleet.replicas"},
		{name: "too many replicas", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Replicas = events.MaxReplicas + 1; return s }, field: "fleet.replicas"},
		{name: "no spec", spec: func(*eventsv1.FleetSpec) *eventsv1.FleetSpec { return nil }, field: "fleet.template.command"},
		{name: "no template", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template = nil; return s }, field: "fleet.template.command"},
		{name: "missing command", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template.Command = ""; return s }, field: "fleet.template.command"},
		{name: "blank command", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template.Command = " \t"; return s }, field: "fleet.template.command"},
		{name: "uppercase port name", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template.Ports[0].Name = "Game"; return s }, field: "fleet.template.ports[0].name"},
		{name: "empty port name", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template.Ports[1].Name = ""; return s }, field: "fleet.template.ports[1].name"},
		{name: "port name with underscore", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template.Ports[1].Name = "q_1"; return s }, field: "fleet.template.ports[1].name"},
		{name: "duplicate port name", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template.Ports[1].Name = "game"; return s }, field: "fleet.template.ports[1].name"},
		{name: "env name with =", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template.Env["A=B"] = "x"; return s }, field: "fleet.template.env"},
		{name: "empty env name", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Template.Env[""] = "x"; return s }, field: "fleet.template.env"},
		{name: "negative initial delay", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec {
			s.Health = &eventsv1.HealthPolicy{InitialDelaySeconds: -1}
			return s
		}, field: "fleet.health.initial_delay_seconds"},
		{name: "negative period", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec {
			s.Health = &eventsv1.HealthPolicy{PeriodSeconds: -5}
			return s
		}, field: "fleet.health.period_seconds"},
		{name: "negative failure threshold", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec {
			s.Health = &eventsv1.HealthPolicy{FailureThreshold: -3}
			return s
		}, field: "fleet.health.failure_threshold"},
		{name: "negative ready timeout", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec {
			s.Health = &eventsv1.HealthPolicy{ReadyTimeoutSeconds: -1}
			return s
		}, field: "fleet.health.ready_timeout_seconds"},
		{name: "negative disconnect grace", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.SdkDisconnectGraceSeconds = -1; return s }, field: "fleet.sdk_disconnect_grace_seconds"},
		{name: "negative max players", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec {
			s.PlayerSessions = &eventsv1.PlayerSessionPolicy{MaxPlayers: -1}
			return s
		}, field: "fleet.player_sessions.max_players"},
		{name: "negative reservation timeout", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec {
			s.PlayerSessions = &eventsv1.PlayerSessionPolicy{ReservationTimeoutSeconds: -1}
			return s
		}, field: "fleet.player_sessions.reservation_timeout_seconds"},
		{name: "negative reconnect window", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec {
			s.PlayerSessions = &eventsv1.PlayerSessionPolicy{ReconnectWindowSeconds: -1}
			return s
		}, field: "fleet.player_sessions.reconnect_window_seconds"},
		{name: "label key with space", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Labels["a b"] = "x"; return s }, field: "fleet.labels"},
		{name: "empty label key", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Labels[""] = "x"; return s }, field: "fleet.labels"},
		{name: "multi-line label value", spec: func(s *eventsv1.FleetSpec) *eventsv1.FleetSpec { s.Labels["k"] = "a\nb"; return s }, field: "fleet.labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := events.DecideFleet(fleetName, nil, events.CreateFleet{Spec: tt.spec(minimalSpec())})
			if out != nil {
				t.Errorf("events = %v, want none", types(out))
			}
			if ve := asValidationError(t, err); ve.Field != tt.field {
				t.Errorf("Field = %q, want %q (%v)", ve.Field, tt.field, err)
			}
		})
	}
}

func TestDecideFleetRefusals(t *testing.T) {
	tests := []struct {
		name     string
		state    func(t *testing.T) *eventsv1.FleetState
		cmd      events.FleetCommand
		wantFrom string
	}{
		{name: "create existing", state: func(t *testing.T) *eventsv1.FleetState { return createdFleet(t, minimalSpec()) }, cmd: events.CreateFleet{Spec: minimalSpec()}, wantFrom: "ACTIVE"},
		{name: "create deleted", state: deletedFleet, cmd: events.CreateFleet{Spec: minimalSpec()}, wantFrom: "DELETED"},
		{name: "update absent", state: func(*testing.T) *eventsv1.FleetState { return nil }, cmd: events.UpdateFleet{Spec: minimalSpec()}, wantFrom: "ABSENT"},
		{name: "update empty state", state: func(*testing.T) *eventsv1.FleetState { return &eventsv1.FleetState{} }, cmd: events.UpdateFleet{Spec: minimalSpec()}, wantFrom: "ABSENT"},
		{name: "update deleted", state: deletedFleet, cmd: events.UpdateFleet{Spec: minimalSpec(), Paths: []string{"replicas"}}, wantFrom: "DELETED"},
		{name: "delete absent", state: func(*testing.T) *eventsv1.FleetState { return nil }, cmd: events.DeleteFleet{}, wantFrom: "ABSENT"},
		{name: "delete deleted", state: deletedFleet, cmd: events.DeleteFleet{}, wantFrom: "DELETED"},
		{name: "start failures absent", state: func(*testing.T) *eventsv1.FleetState { return nil }, cmd: events.RecordStartFailures{}, wantFrom: "ABSENT"},
		{name: "start failures deleted", state: deletedFleet, cmd: events.RecordStartFailures{}, wantFrom: "DELETED"},
		{name: "start recovered deleted", state: deletedFleet, cmd: events.RecordStartRecovered{}, wantFrom: "DELETED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := events.DecideFleet(fleetName, tt.state(t), tt.cmd)
			if out != nil {
				t.Errorf("events = %v, want none", types(out))
			}
			te := asTransitionError(t, err)
			if te.From != tt.wantFrom {
				t.Errorf("From = %q, want %q", te.From, tt.wantFrom)
			}
		})
	}
}

func TestDecideFleetDelete(t *testing.T) {
	out, err := events.DecideFleet(fleetName, createdFleet(t, minimalSpec()), events.DeleteFleet{})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(out); !slices.Equal(got, []string{"FleetDeleted"}) {
		t.Errorf("events = %v, want [FleetDeleted]", got)
	}
}

func TestDecideFleetUpdate(t *testing.T) {
	// The fleet under update has a non-default health period and player policy.
	base := minimalSpec()
	base.Health = &eventsv1.HealthPolicy{PeriodSeconds: 7}
	base.PlayerSessions = &eventsv1.PlayerSessionPolicy{MaxPlayers: 8}

	tests := []struct {
		name        string
		spec        *eventsv1.FleetSpec
		paths       []string
		wantChanged []string // nil: no event
		want        func(s *eventsv1.FleetSpec)
		wantField   string // a *ValidationError on this field
		// sameContract: the health changed but judges servers alike, so
		// no rollout starts.
		sameContract bool
	}{
		{
			name:        "replicas",
			spec:        &eventsv1.FleetSpec{Replicas: 10},
			paths:       []string{"replicas"},
			wantChanged: []string{"replicas"},
			want:        func(s *eventsv1.FleetSpec) { s.Replicas = 10 },
		},
		{
			name:        "scale to zero",
			spec:        &eventsv1.FleetSpec{},
			paths:       []string{"replicas"},
			wantChanged: []string{"replicas"},
			want:        func(s *eventsv1.FleetSpec) { s.Replicas = 0 },
		},
		{
			name:        "health period",
			spec:        &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{PeriodSeconds: 10}},
			paths:       []string{"health.period_seconds"},
			wantChanged: []string{"health"},
			want:        func(s *eventsv1.FleetSpec) { s.Health.PeriodSeconds = 10 },
		},
		{
			name:        "only changed fields are reported",
			spec:        &eventsv1.FleetSpec{Replicas: 3, Health: &eventsv1.HealthPolicy{PeriodSeconds: 10}},
			paths:       []string{"replicas", "health.period_seconds"},
			wantChanged: []string{"health"},
			want:        func(s *eventsv1.FleetSpec) { s.Health.PeriodSeconds = 10 },
		},
		{
			name:        "ready timeout",
			spec:        &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{ReadyTimeoutSeconds: 900}},
			paths:       []string{"health.ready_timeout_seconds"},
			wantChanged: []string{"health"},
			want:        func(s *eventsv1.FleetSpec) { s.Health.ReadyTimeoutSeconds = 900 },
		},
		{
			// 300 is what the base's 0 stands for (its contract, 5 s +
			// 3 × 7 s, is shorter): the spec records it, but the servers
			// are judged alike, so none is replaced.
			name:         "ready timeout set to its default's value",
			spec:         &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{ReadyTimeoutSeconds: events.DefaultReadyTimeoutSeconds}},
			paths:        []string{"health.ready_timeout_seconds"},
			wantChanged:  []string{"health"},
			want:         func(s *eventsv1.FleetSpec) { s.Health.ReadyTimeoutSeconds = events.DefaultReadyTimeoutSeconds },
			sameContract: true,
		},
		{
			name:        "ready timeout one second past its default's value",
			spec:        &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{ReadyTimeoutSeconds: events.DefaultReadyTimeoutSeconds + 1}},
			paths:       []string{"health.ready_timeout_seconds"},
			wantChanged: []string{"health"},
			want:        func(s *eventsv1.FleetSpec) { s.Health.ReadyTimeoutSeconds = events.DefaultReadyTimeoutSeconds + 1 },
		},
		{
			// 0 stands for the default where it is enforced and is kept as
			// 0: a fleet stored before the field must not see its health
			// contract change (a rollout) at an update of something else.
			name:        "ready timeout's 0 is kept, not defaulted",
			spec:        &eventsv1.FleetSpec{Replicas: 10},
			paths:       []string{"replicas"},
			wantChanged: []string{"replicas"},
			want:        func(s *eventsv1.FleetSpec) { s.Replicas = 10 },
		},
		{
			name:  "same value is no event",
			spec:  &eventsv1.FleetSpec{Replicas: 3},
			paths: []string{"replicas"},
		},
		{
			name:  "path naming an unchanged sub-field is no event",
			spec:  &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{PeriodSeconds: 7, FailureThreshold: 1}},
			paths: []string{"health.period_seconds"},
		},
		{
			name:        "zero sub-field takes the default",
			spec:        &eventsv1.FleetSpec{},
			paths:       []string{"health.period_seconds"},
			wantChanged: []string{"health"},
			want:        func(s *eventsv1.FleetSpec) { s.Health.PeriodSeconds = events.DefaultPeriodSeconds },
		},
		{
			name:        "whole health message",
			spec:        &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{Disabled: true}},
			paths:       []string{"health"},
			wantChanged: []string{"health"},
			want: func(s *eventsv1.FleetSpec) {
				s.Health = &eventsv1.HealthPolicy{Disabled: true, InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}
			},
		},
		{
			name:        "message path then its sub-field with the message unset",
			spec:        &eventsv1.FleetSpec{},
			paths:       []string{"health", "health.period_seconds"},
			wantChanged: []string{"health"},
			want: func(s *eventsv1.FleetSpec) {
				s.Health = &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}
			},
		},
		{
			name:        "player sessions message then sub-field with the message unset",
			spec:        &eventsv1.FleetSpec{},
			paths:       []string{"player_sessions", "player_sessions.max_players"},
			wantChanged: []string{"player_sessions"},
			want: func(s *eventsv1.FleetSpec) {
				s.PlayerSessions = &eventsv1.PlayerSessionPolicy{ReservationTimeoutSeconds: 60, ReconnectWindowSeconds: 120}
			},
		},
		{
			name:        "max players",
			spec:        &eventsv1.FleetSpec{PlayerSessions: &eventsv1.PlayerSessionPolicy{MaxPlayers: 16}},
			paths:       []string{"player_sessions.max_players"},
			wantChanged: []string{"player_sessions"},
			want:        func(s *eventsv1.FleetSpec) { s.PlayerSessions.MaxPlayers = 16 },
		},
		{
			name:        "scheduling",
			spec:        &eventsv1.FleetSpec{Scheduling: eventsv1.Scheduling_SCHEDULING_DISTRIBUTED},
			paths:       []string{"scheduling"},
			wantChanged: []string{"scheduling"},
			want:        func(s *eventsv1.FleetSpec) { s.Scheduling = eventsv1.Scheduling_SCHEDULING_DISTRIBUTED },
		},
		{
			name:        "labels",
			spec:        &eventsv1.FleetSpec{Labels: map[string]string{"region": "us"}},
			paths:       []string{"labels"},
			wantChanged: []string{"labels"},
			want:        func(s *eventsv1.FleetSpec) { s.Labels = map[string]string{"region": "us"} },
		},
		{
			name:        "template with a defaulted protocol",
			spec:        &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/other", Ports: []*eventsv1.PortSpec{{Name: "game"}}}},
			paths:       []string{"template"},
			wantChanged: []string{"template"},
			want: func(s *eventsv1.FleetSpec) {
				s.Template = &eventsv1.GameServerTemplate{Command: "/bin/other", Ports: []*eventsv1.PortSpec{{Name: "game", Protocol: eventsv1.Protocol_PROTOCOL_UDP}}}
			},
		},
		{
			name: "no paths means every field",
			spec: func() *eventsv1.FleetSpec {
				s := proto.CloneOf(base)
				s.Replicas = 4
				return s
			}(),
			wantChanged: []string{"replicas"},
			want:        func(s *eventsv1.FleetSpec) { s.Replicas = 4 },
		},
		{
			name:      "unknown path",
			spec:      &eventsv1.FleetSpec{Replicas: 4},
			paths:     []string{"replicas", "nope"},
			wantField: "update_mask",
		},
		{
			name:      "sub-field of a non-message path",
			spec:      &eventsv1.FleetSpec{},
			paths:     []string{"template.command"},
			wantField: "update_mask",
		},
		{
			name:      "invalid new value",
			spec:      &eventsv1.FleetSpec{Replicas: -1},
			paths:     []string{"replicas"},
			wantField: "fleet.replicas",
		},
		{
			name:      "template without command",
			spec:      &eventsv1.FleetSpec{},
			paths:     []string{"template"},
			wantField: "fleet.template.command",
		},
		{
			name:      "negative sub-field",
			spec:      &eventsv1.FleetSpec{Health: &eventsv1.HealthPolicy{FailureThreshold: -1}},
			paths:     []string{"health.failure_threshold"},
			wantField: "fleet.health.failure_threshold",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := createdFleet(t, base)
			stateBefore := proto.Clone(state)
			cmdBefore := proto.Clone(tt.spec)

			out, err := events.DecideFleet(fleetName, state, events.UpdateFleet{Spec: tt.spec, Paths: tt.paths})

			if !proto.Equal(stateBefore, state) {
				t.Errorf("DecideFleet modified the state")
			}
			if !proto.Equal(cmdBefore, tt.spec) {
				t.Errorf("DecideFleet modified the command's spec")
			}
			if tt.wantField != "" {
				if ve := asValidationError(t, err); ve.Field != tt.wantField {
					t.Errorf("Field = %q, want %q (%v)", ve.Field, tt.wantField, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecideFleet: %v", err)
			}
			if tt.wantChanged == nil {
				if len(out) != 0 {
					t.Fatalf("events = %v, want none", out)
				}
				return
			}
			wantTypes := []string{"FleetUpdated"}
			if slices.Contains(tt.wantChanged, "template") || slices.Contains(tt.wantChanged, "health") && !tt.sameContract {
				wantTypes = append(wantTypes, "FleetRolloutStarted") // a new revision
			}
			if got := types(out); !slices.Equal(got, wantTypes) {
				t.Fatalf("events = %v, want %v", got, wantTypes)
			}
			upd := out[0].(*eventsv1.FleetUpdated)
			if !slices.Equal(upd.GetChangedFields(), tt.wantChanged) {
				t.Errorf("ChangedFields = %v, want %v", upd.GetChangedFields(), tt.wantChanged)
			}
			want := proto.CloneOf(state.GetSpec())
			tt.want(want)
			if !proto.Equal(upd.GetSpec(), want) {
				t.Errorf("spec =\n%v\nwant\n%v", upd.GetSpec(), want)
			}
		})
	}
}

func TestDecideFleetUpdateDoesNotAliasCommand(t *testing.T) {
	state := createdFleet(t, minimalSpec())
	patch := &eventsv1.FleetSpec{
		Labels:   map[string]string{"region": "us"},
		Template: &eventsv1.GameServerTemplate{Command: "/bin/x"},
	}
	out, err := events.DecideFleet(fleetName, state, events.UpdateFleet{Spec: patch, Paths: []string{"labels", "template"}})
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(out[0])
	patch.Labels["region"] = "changed later"
	patch.Template.Command = "/bin/changed-later"
	if !proto.Equal(out[0], want) {
		t.Errorf("changing the command after DecideFleet changed its event: %v", out[0])
	}
}

func TestApplyFleetLifecycle(t *testing.T) {
	spec := minimalSpec()
	created, err := applyChecked(t, events.ApplyFleet, nil, events.New(fleetName, at(1), &eventsv1.FleetCreated{Spec: spec, Revision: 1}))
	if err != nil {
		t.Fatalf("FleetCreated: %v", err)
	}
	want := &eventsv1.FleetState{Name: fleetName, Spec: spec, CreateTime: tsAt(1), UpdateTime: tsAt(1), Revision: 1,
		Revisions: []*eventsv1.FleetRevision{{Revision: 1, Template: spec.GetTemplate(), Health: spec.GetHealth(), CreateTime: tsAt(1)}}}
	if !proto.Equal(created, want) {
		t.Fatalf("after FleetCreated =\n%v\nwant\n%v", created, want)
	}

	newSpec := proto.CloneOf(spec)
	newSpec.Replicas = 9
	updated, err := applyChecked(t, events.ApplyFleet, created, events.New(fleetName, at(2), &eventsv1.FleetUpdated{Spec: newSpec, ChangedFields: []string{"replicas"}}))
	if err != nil {
		t.Fatalf("FleetUpdated: %v", err)
	}
	want = &eventsv1.FleetState{Name: fleetName, Spec: newSpec, CreateTime: tsAt(1), UpdateTime: tsAt(2), Revision: 1, Revisions: created.GetRevisions()}
	if !proto.Equal(updated, want) {
		t.Fatalf("after FleetUpdated =\n%v\nwant\n%v", updated, want)
	}

	deleted, err := applyChecked(t, events.ApplyFleet, updated, events.New(fleetName, at(3), &eventsv1.FleetDeleted{}))
	if err != nil {
		t.Fatalf("FleetDeleted: %v", err)
	}
	want = &eventsv1.FleetState{Name: fleetName, Spec: newSpec, Deleted: true, CreateTime: tsAt(1), UpdateTime: tsAt(3), DeleteTime: tsAt(3),
		Revision: 1, Revisions: created.GetRevisions()}
	if !proto.Equal(deleted, want) {
		t.Fatalf("after FleetDeleted =\n%v\nwant\n%v", deleted, want)
	}

	// The state does not share the event's spec.
	spec.Replicas = 100
	newSpec.Replicas = 100
	if created.GetSpec().GetReplicas() != 3 || deleted.GetSpec().GetReplicas() != 9 {
		t.Errorf("state shares memory with the event payload")
	}
}

func TestApplyFleetRefusals(t *testing.T) {
	active := func(t *testing.T) *eventsv1.FleetState { return createdFleet(t, minimalSpec()) }
	absent := func(*testing.T) *eventsv1.FleetState { return nil }
	tests := []struct {
		name     string
		state    func(t *testing.T) *eventsv1.FleetState
		event    proto.Message
		wantFrom string
	}{
		{name: "created twice", state: active, event: &eventsv1.FleetCreated{Spec: minimalSpec()}, wantFrom: "ACTIVE"},
		{name: "created after delete", state: deletedFleet, event: &eventsv1.FleetCreated{Spec: minimalSpec()}, wantFrom: "DELETED"},
		{name: "updated absent", state: absent, event: &eventsv1.FleetUpdated{Spec: minimalSpec()}, wantFrom: "ABSENT"},
		{name: "updated deleted", state: deletedFleet, event: &eventsv1.FleetUpdated{Spec: minimalSpec()}, wantFrom: "DELETED"},
		{name: "deleted absent", state: absent, event: &eventsv1.FleetDeleted{}, wantFrom: "ABSENT"},
		{name: "deleted twice", state: deletedFleet, event: &eventsv1.FleetDeleted{}, wantFrom: "DELETED"},
		{name: "start failing absent", state: absent, event: &eventsv1.FleetStartFailing{ConsecutiveFailures: 1}, wantFrom: "ABSENT"},
		{name: "start failing deleted", state: deletedFleet, event: &eventsv1.FleetStartFailing{ConsecutiveFailures: 1}, wantFrom: "DELETED"},
		{name: "start recovered absent", state: absent, event: &eventsv1.FleetStartRecovered{}, wantFrom: "ABSENT"},
		{name: "start recovered while not failing", state: active, event: &eventsv1.FleetStartRecovered{}, wantFrom: "ACTIVE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := events.New(fleetName, at(20), tt.event)
			got, err := applyChecked(t, events.ApplyFleet, tt.state(t), e)
			if got != nil {
				t.Errorf("state = %v, want nil", got)
			}
			te := asTransitionError(t, err)
			if te.From != tt.wantFrom || te.Event != e.Type || te.Aggregate != fleetName {
				t.Errorf("TransitionError = %+v, want From %q, Event %q, Aggregate %q", te, tt.wantFrom, e.Type, fleetName)
			}
		})
	}
}

func TestApplyFleetForeignEvent(t *testing.T) {
	_, err := events.ApplyFleet(createdFleet(t, minimalSpec()), events.New(fleetName, t0, &eventsv1.HostLost{}))
	if err == nil {
		t.Fatal("ApplyFleet(HostLost) succeeded, want an error")
	}
	var te *events.TransitionError
	if errors.As(err, &te) {
		t.Errorf("err = %v, want a plain error, not a TransitionError", err)
	}
}

// A fleet's placement wait is recorded once per count and reason, and its
// end once, with how long it lasted.
func TestDecideFleetPlacementBlocked(t *testing.T) {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	st, err := events.ApplyFleet(nil, events.New(fleetName, at, &eventsv1.FleetCreated{Spec: minimalSpec()}))
	if err != nil {
		t.Fatal(err)
	}
	step := func(cmd events.FleetCommand, when time.Time) string {
		t.Helper()
		msgs, err := events.DecideFleet(fleetName, st, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return ""
		}
		if st, err = events.ApplyFleet(st, events.New(fleetName, when, msgs[0])); err != nil {
			t.Fatal(err)
		}
		return events.TypeOf(msgs[0])
	}
	blocked := events.RecordPlacementBlocked{Waiting: 2, Reason: events.NoMatchingHost, Message: "no host with zone=x"}
	for i, s := range []struct {
		cmd  events.FleetCommand
		want string
	}{
		{events.RecordPlacementUnblocked{At: at}, ""},
		{blocked, "FleetPlacementBlocked"},
		{blocked, ""},
		{events.RecordPlacementBlocked{Waiting: 1, Reason: events.NoMatchingHost}, "FleetPlacementBlocked"},
		{events.RecordPlacementUnblocked{At: at.Add(90 * time.Second)}, "FleetPlacementUnblocked"},
		{events.RecordPlacementUnblocked{At: at.Add(90 * time.Second)}, ""},
	} {
		if got := step(s.cmd, at.Add(time.Duration(i)*time.Second)); got != s.want {
			t.Fatalf("step %d %T: %q, want %q", i, s.cmd, got, s.want)
		}
	}
	if st.GetPlacementBlocked() != nil || !st.GetPlacementUnblocked() {
		t.Fatalf("after the wait: blocked %v, unblocked %v", st.GetPlacementBlocked(), st.GetPlacementUnblocked())
	}
	// A host selector is checked like labels.
	spec := minimalSpec()
	spec.Template.HostSelector = map[string]string{"zone": "a b"}
	if err := events.ValidateFleetSpec(spec); err != nil {
		t.Fatalf("a value with a space: %v", err)
	}
	spec.Template.HostSelector = map[string]string{"zo ne": "a"}
	if err := events.ValidateFleetSpec(spec); err == nil || !strings.Contains(err.Error(), "host_selector") {
		t.Fatalf("a key with a space: %v, want an error on fleet.template.host_selector", err)
	}
	if !events.MatchesLabels(map[string]string{"zone": "a", "region": "eu"}, map[string]string{"zone": "a"}) ||
		events.MatchesLabels(map[string]string{"zone": "b"}, map[string]string{"zone": "a"}) ||
		events.MatchesLabels(nil, map[string]string{"zone": ""}) || !events.MatchesLabels(nil, nil) {
		t.Fatal("MatchesLabels")
	}
}

// A fleet whose health checking is disabled judges its servers by none of
// the policy's periods and timeouts: changing one records the spec and
// replaces no server; enabling the checks does.
func TestDecideFleetUpdateOfADisabledHealthPolicy(t *testing.T) {
	spec := minimalSpec()
	spec.Health = &eventsv1.HealthPolicy{Disabled: true}
	state := createdFleet(t, spec)
	for _, tc := range []struct {
		name   string
		health *eventsv1.HealthPolicy
		paths  []string
		want   []string
	}{
		{"ready timeout", &eventsv1.HealthPolicy{Disabled: true, ReadyTimeoutSeconds: 900}, []string{"health.ready_timeout_seconds"}, []string{"FleetUpdated"}},
		{"period", &eventsv1.HealthPolicy{Disabled: true, PeriodSeconds: 30}, []string{"health.period_seconds"}, []string{"FleetUpdated"}},
		{"enabled", &eventsv1.HealthPolicy{}, []string{"health.disabled"}, []string{"FleetUpdated", "FleetRolloutStarted"}},
	} {
		out, err := events.DecideFleet(fleetName, state, events.UpdateFleet{Spec: &eventsv1.FleetSpec{Health: tc.health}, Paths: tc.paths})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := types(out); !slices.Equal(got, tc.want) {
			t.Errorf("%s: events = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSameHealthContract(t *testing.T) {
	short := &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}
	long := &eventsv1.HealthPolicy{InitialDelaySeconds: 600, PeriodSeconds: 5, FailureThreshold: 3} // 0 stands for 615 s
	with := func(p *eventsv1.HealthPolicy, timeout int32) *eventsv1.HealthPolicy {
		c := proto.CloneOf(p)
		c.ReadyTimeoutSeconds = timeout
		return c
	}
	disabled := func(p *eventsv1.HealthPolicy) *eventsv1.HealthPolicy {
		c := proto.CloneOf(p)
		c.Disabled = true
		return c
	}
	for _, tc := range []struct {
		name string
		a, b *eventsv1.HealthPolicy
		want bool
	}{
		{"equal", short, proto.CloneOf(short), true},
		{"0 and the default it stands for", short, with(short, events.DefaultReadyTimeoutSeconds), true},
		{"0 and another timeout", short, with(short, 60), false},
		{"0 of a long initial delay and its contract's span", long, with(long, 615), true},
		{"0 of a long initial delay and the 300 s default", long, with(long, events.DefaultReadyTimeoutSeconds), false},
		{"0 set as 0", short, with(short, 0), true},
		{"a period apart", short, &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 6, FailureThreshold: 3}, false},
		{"one missing", short, nil, false},
		{"both disabled, timeouts apart", disabled(with(short, 60)), disabled(with(short, 900)), true},
		{"both disabled, periods apart", disabled(short), disabled(long), true},
		{"disabled and enabled", disabled(short), short, false},
	} {
		if got := events.SameHealthContract(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: SameHealthContract = %v, want %v", tc.name, got, tc.want)
		}
		if got := events.SameHealthContract(tc.b, tc.a); got != tc.want {
			t.Errorf("%s, the other way: SameHealthContract = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := events.ReadyTimeout(long); got != 615*time.Second {
		t.Errorf("ReadyTimeout of a long initial delay = %s, want 615s", got)
	}
	if got := events.ReadyTimeout(with(long, 30)); got != 30*time.Second {
		t.Errorf("ReadyTimeout set = %s, want 30s", got)
	}
}

// A contract of int32 fields longer than an int32 of seconds neither wraps
// to a negative timeout nor overflows a time.Duration.
func TestReadyTimeoutOfAHugeContract(t *testing.T) {
	huge := &eventsv1.HealthPolicy{InitialDelaySeconds: math.MaxInt32, PeriodSeconds: math.MaxInt32, FailureThreshold: math.MaxInt32}
	if got := events.ReadyTimeout(huge); got < 100*365*24*time.Hour {
		t.Errorf("ReadyTimeout of a huge contract = %s, want a century or more", got)
	}
	if events.SameHealthContract(huge, &eventsv1.HealthPolicy{InitialDelaySeconds: math.MaxInt32, PeriodSeconds: math.MaxInt32, FailureThreshold: math.MaxInt32, ReadyTimeoutSeconds: events.DefaultReadyTimeoutSeconds}) {
		t.Error("a huge contract's 0 is the same as 300 s")
	}
}

// A fleet's health period, SDK disconnect grace and reservation timeout are
// at most a day (issue 39, item 5: 1e9 seconds was taken): refused at
// creation and where an update changes them, and taken at the bound; a
// fleet stored before the bounds, with a longer one, can still be scaled.
func TestFleetPeriodsAndTimeoutsAreBounded(t *testing.T) {
	withPeriod := func(v int32) func(*eventsv1.FleetSpec) {
		return func(s *eventsv1.FleetSpec) { s.Health = &eventsv1.HealthPolicy{PeriodSeconds: v} }
	}
	withGrace := func(v int32) func(*eventsv1.FleetSpec) {
		return func(s *eventsv1.FleetSpec) { s.SdkDisconnectGraceSeconds = v }
	}
	withReservation := func(v int32) func(*eventsv1.FleetSpec) {
		return func(s *eventsv1.FleetSpec) {
			s.PlayerSessions = &eventsv1.PlayerSessionPolicy{ReservationTimeoutSeconds: v}
		}
	}
	for _, tc := range []struct {
		name  string
		set   func(*eventsv1.FleetSpec)
		paths []string // the update's mask
		field string   // "" when taken
	}{
		{"a period of 1e9 s", withPeriod(1e9), []string{"health"}, "fleet.health.period_seconds"},
		{"a period of a day and a second", withPeriod(events.MaxPeriodSeconds + 1), []string{"health.period_seconds"}, "fleet.health.period_seconds"},
		{"a period of a day", withPeriod(events.MaxPeriodSeconds), []string{"health"}, ""},
		{"a grace of 1e9 s", withGrace(1e9), []string{"sdk_disconnect_grace_seconds"}, "fleet.sdk_disconnect_grace_seconds"},
		{"a grace of a day", withGrace(events.MaxSDKDisconnectGraceSeconds), []string{"sdk_disconnect_grace_seconds"}, ""},
		{"a reservation timeout of 1e9 s", withReservation(1e9), []string{"player_sessions"}, "fleet.player_sessions.reservation_timeout_seconds"},
		{"a reservation timeout of a day", withReservation(events.MaxReservationTimeoutSeconds), []string{"player_sessions.reservation_timeout_seconds"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := minimalSpec()
			tc.set(spec)
			_, created := events.DecideFleet(fleetName, nil, events.CreateFleet{Spec: spec})
			_, updated := events.DecideFleet(fleetName, createdFleet(t, minimalSpec()), events.UpdateFleet{Spec: spec, Paths: tc.paths})
			for what, err := range map[string]error{"create": created, "update": updated} {
				if tc.field == "" {
					if err != nil {
						t.Fatalf("%s refused: %v", what, err)
					}
					continue
				}
				if ve := asValidationError(t, err); ve.Field != tc.field {
					t.Fatalf("%s: field %q, want %q (%v)", what, ve.Field, tc.field, err)
				}
			}
		})
	}
	// Stored before the bounds: its other fields still change.
	stored := createdFleet(t, minimalSpec())
	stored.Spec.Health.PeriodSeconds, stored.Spec.SdkDisconnectGraceSeconds = 1e9, 1e9
	stored.Spec.PlayerSessions.ReservationTimeoutSeconds = 1e9
	out, err := events.DecideFleet(fleetName, stored, events.UpdateFleet{Spec: &eventsv1.FleetSpec{Replicas: 5}, Paths: []string{"replicas"}})
	if err != nil || len(out) == 0 {
		t.Fatalf("scaling a fleet stored with periods over the bounds: %v, %v", types(out), err)
	}
}
