package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestRolloutBounds(t *testing.T) {
	for _, tt := range []struct {
		surge, unavailable string
		replicas, busy     int
		wantS, wantU       int
	}{
		{"25%", "25%", 10, 0, 3, 2}, // surge rounds up, unavailable down
		{"25%", "25%", 10, 4, 3, 1}, // unavailable: of the 6 without a match
		{"25%", "25%", 40, 30, 10, 2},
		{"25%", "25%", 1, 0, 1, 0},
		{"0", "0", 10, 0, 1, 0}, // a rollout always moves
		{"2", "0", 10, 0, 2, 0},
		{"", "", 4, 0, 1, 1}, // the defaults
		{"100%", "50%", 3, 0, 3, 1},
		{"1", "3", 10, 9, 1, 3}, // counts are counts
	} {
		s, u := events.RolloutBounds(&eventsv1.FleetStrategy{MaxSurge: tt.surge, MaxUnavailable: tt.unavailable}, tt.replicas, tt.busy)
		if s != tt.wantS || u != tt.wantU {
			t.Errorf("RolloutBounds(%q, %q, %d, %d) = %d, %d; want %d, %d", tt.surge, tt.unavailable, tt.replicas, tt.busy, s, u, tt.wantS, tt.wantU)
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

// A fleet created before revisions (FleetCreated without one) replays the
// same way every time: at its first template change, what it ran is kept
// as revision 0 and the change is revision 1, which undo goes back from.
func TestLegacyFleetGetsRevisionsOnItsFirstChange(t *testing.T) {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	spec := minimalSpec()
	events.NormalizeFleetSpec(spec)
	st, err := events.ApplyFleet(nil, events.New(fleetName, at, &eventsv1.FleetCreated{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	if st.GetRevision() != 0 || len(st.GetRevisions()) != 0 {
		t.Fatalf("legacy fleet: revision %d, revisions %v", st.GetRevision(), st.GetRevisions())
	}
	msgs, err := events.DecideFleet(fleetName, st, events.UpdateFleet{Spec: &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/v2"}}, Paths: []string{"template"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if st, err = events.ApplyFleet(st, events.New(fleetName, at, m)); err != nil {
			t.Fatal(err)
		}
	}
	revs := st.GetRevisions()
	if st.GetRevision() != 1 || len(revs) != 2 || revs[0].GetRevision() != 0 || revs[0].GetTemplate().GetCommand() != spec.GetTemplate().GetCommand() ||
		revs[1].GetRevision() != 1 || revs[1].GetTemplate().GetCommand() != "/v2" {
		t.Fatalf("after the first change: revision %d, revisions %v", st.GetRevision(), revs)
	}
	if msgs, err = events.DecideFleet(fleetName, st, events.UndoRollout{By: "ann"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if st, err = events.ApplyFleet(st, events.New(fleetName, at, m)); err != nil {
			t.Fatal(err)
		}
	}
	if st.GetRevision() != 0 || st.GetSpec().GetTemplate().GetCommand() != spec.GetTemplate().GetCommand() {
		t.Fatalf("undo: revision %d, command %q", st.GetRevision(), st.GetSpec().GetTemplate().GetCommand())
	}
}

// A halt counts only the failures after the rollout started or resumed.
func TestFailuresSinceBaseline(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	ts := func(s int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(s) * time.Second)) }
	for _, tt := range []struct {
		name     string
		runSince int   // when the run of failures began
		failures int32 // in a row now
		baseline int32 // failures in a row at the baseline
		baseAt   int
		want     int32
	}{
		{"a run that began after the rollout", 10, 3, 0, 5, 3},
		{"a run that began before: only the later ones", 1, 5, 2, 5, 3},
		{"resumed after a halt at 3: none yet", 1, 3, 3, 20, 0},
	} {
		f := &eventsv1.FleetState{StartFailing: &eventsv1.FleetStartFailing{ConsecutiveFailures: tt.failures}, StartConditionTime: ts(tt.runSince),
			Rollout: &eventsv1.FleetRollout{BaselineFailures: tt.baseline, BaselineTime: ts(tt.baseAt)}}
		if got := events.FailuresSinceBaseline(f); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}
