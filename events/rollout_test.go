package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestRolloutBounds(t *testing.T) {
	for _, tt := range []struct {
		surge, unavailable string
		replicas           int
		wantS, wantU       int
	}{
		{"25%", "25%", 10, 3, 2}, // surge rounds up, unavailable down
		{"25%", "25%", 1, 1, 0},
		{"0", "0", 10, 1, 0}, // a rollout always moves
		{"2", "0", 10, 2, 0},
		{"", "", 4, 1, 1}, // the defaults
		{"100%", "50%", 3, 3, 1},
	} {
		s, u := events.RolloutBounds(&eventsv1.FleetStrategy{MaxSurge: tt.surge, MaxUnavailable: tt.unavailable}, tt.replicas)
		if s != tt.wantS || u != tt.wantU {
			t.Errorf("RolloutBounds(%q, %q, %d) = %d, %d; want %d, %d", tt.surge, tt.unavailable, tt.replicas, s, u, tt.wantS, tt.wantU)
		}
	}
	spec := minimalSpec()
	spec.Strategy = &eventsv1.FleetStrategy{MaxSurge: "150%"}
	if err := events.ValidateFleetSpec(spec); err == nil || !strings.Contains(err.Error(), "max_surge") {
		t.Fatalf("surge 150%%: %v", err)
	}
}

// A fleet's revisions and rollout through its commands: a template change
// starts a rollout to revision 2; progress is recorded when the counts
// change; pause, resume; completion; undo goes back to revision 1 (its
// template again) and starts a rollout there; a replicas change makes no
// revision.
func TestDecideFleetRollout(t *testing.T) {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	st := createdFleet(t, minimalSpec())
	step := func(cmd events.FleetCommand) string {
		t.Helper()
		msgs, err := events.DecideFleet(fleetName, st, cmd)
		if err != nil {
			t.Fatalf("%T: %v", cmd, err)
		}
		var types []string
		for _, m := range msgs {
			types = append(types, events.TypeOf(m))
			if st, err = events.ApplyFleet(st, events.New(fleetName, at, m)); err != nil {
				t.Fatal(err)
			}
		}
		return strings.Join(types, ",")
	}
	v2 := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/opt/game/v2"}}
	for i, s := range []struct {
		cmd  events.FleetCommand
		want string
	}{
		{events.UpdateFleet{Spec: &eventsv1.FleetSpec{Replicas: 5}, Paths: []string{"replicas"}}, "FleetUpdated"},
		{events.UpdateFleet{Spec: v2, Paths: []string{"template"}}, "FleetUpdated,FleetRolloutStarted"},
		{events.RecordRolloutProgress{Updated: 1, Outdated: 5}, "FleetRolloutProgressed"},
		{events.RecordRolloutProgress{Updated: 1, Outdated: 5}, ""},
		{events.PauseRollout{By: "ann"}, "FleetRolloutPaused"},
		{events.PauseRollout{By: "ann"}, ""},
		{events.RecordRolloutProgress{Updated: 2, Outdated: 4}, ""}, // paused: nothing moves
		{events.ResumeRollout{By: "ann"}, "FleetRolloutResumed"},
		{events.RecordRolloutProgress{Updated: 5, UpdatedReady: 5}, "FleetRolloutCompleted"},
		{events.UndoRollout{By: "bob"}, "FleetRolledBack,FleetRolloutStarted"},
	} {
		if got := step(s.cmd); got != s.want {
			t.Fatalf("step %d %T: %q, want %q", i, s.cmd, got, s.want)
		}
	}
	if st.GetRevision() != 1 || st.GetSpec().GetTemplate().GetCommand() != minimalSpec().GetTemplate().GetCommand() ||
		st.GetRollout().GetFromRevision() != 2 || st.GetRollout().GetReason() != "undo to revision 1" || len(st.GetRevisions()) != 2 {
		t.Fatalf("after undo: revision %d, command %q, rollout %v, revisions %d", st.GetRevision(), st.GetSpec().GetTemplate().GetCommand(), st.GetRollout(), len(st.GetRevisions()))
	}
	// Undo again goes forward to 2 (the rollout came from it); a halt
	// stops the rollout; resume restarts it.
	if got := step(events.HaltRollout{Reason: "new servers fail", Failures: 3}); got != "FleetRolloutHalted" {
		t.Fatalf("halt: %q", got)
	}
	if got := step(events.ResumeRollout{By: "ann"}); got != "FleetRolloutResumed" {
		t.Fatalf("resume after halt: %q", got)
	}
	if got := step(events.UndoRollout{By: "bob"}); got != "FleetRolledBack,FleetRolloutStarted" || st.GetRevision() != 2 {
		t.Fatalf("undo of the undo: %q, revision %d", got, st.GetRevision())
	}
	// No earlier revision: undo refused.
	fresh, err := events.ApplyFleet(nil, events.New(fleetName, at, &eventsv1.FleetCreated{Spec: minimalSpec()}))
	if err != nil {
		t.Fatal(err)
	}
	var te *events.TransitionError
	if _, err = events.DecideFleet(fleetName, fresh, events.UndoRollout{By: "bob"}); !errors.As(err, &te) {
		t.Fatalf("undo with one revision: %v, want a TransitionError", err)
	}
	if _, err := events.DecideFleet(fleetName, fresh, events.PauseRollout{By: "bob"}); !errors.As(err, &te) {
		t.Fatalf("pause with no rollout: %v, want a TransitionError", err)
	}
}
