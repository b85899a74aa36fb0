package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// jsonUpcaster is "the fix" for a producer bug: a build that stored
// envelopes as protojson instead of protobuf. It turns such bytes back into
// the protobuf envelope and leaves everything else alone.
func jsonUpcaster(_ string, data []byte) []byte {
	if len(data) == 0 || data[0] != '{' {
		return data
	}
	var env eventsv1.Envelope
	if err := protojson.Unmarshal(data, &env); err != nil {
		return data
	}
	b, err := proto.Marshal(&env)
	if err != nil {
		return data
	}
	return b
}

// TestDeadLetterRetryAfterFix: a malformed event (a JSON envelope from a
// buggy producer) is dead-lettered while later events go on being applied;
// retrying it with the old code fails and changes nothing; with the fix (an
// upcaster) it is applied in its place in the aggregate's history, so the
// views equal a replay with the fix.
func TestDeadLetterRetryAfterFix(t *testing.T) {
	e := newEnv(t)
	e.scenario(2)
	const gs = "fleets/arena/gameServers/gs-0"
	bad := events.New(gs, e.at.Add(time.Second), &eventsv1.LabelsChanged{Set: map[string]string{"fixed": "yes", "order": "first"}})
	pb, err := bad.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var env eventsv1.Envelope
	if err := proto.Unmarshal(pb, &env); err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(&env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(e.ctx, events.MustSubject(gs), js); err != nil {
		t.Fatal(err)
	}
	badSeq := e.lastSeq()
	e.append(gs, &eventsv1.LabelsChanged{Set: map[string]string{"after": "poison", "order": "second"}})

	pool := e.pool()
	live := e.projector(pool, "live", time.Minute, 7)
	e.runLive(live)
	want := e.lastSeq()
	wait.For(t, 20*time.Second, "the live views", func() bool { return live.Checkpoint() >= want })
	v := postgres.NewViews(pool)
	dls, err := v.DeadLetters(e.ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Sequence != badSeq || !strings.Contains(dls[0].Error, "undecodable") {
		t.Fatalf("dead letters %+v, want sequence %d", dls, badSeq)
	}
	labels := func() map[string]string {
		t.Helper()
		row, err := v.GameServer(e.ctx, gs)
		if err != nil {
			t.Fatal(err)
		}
		return row.State.GetLabels()
	}
	if l := labels(); l["after"] != "poison" || l["fixed"] != "" {
		t.Fatalf("labels before the fix: %v", l)
	}

	// Without the fix: still poison, nothing changes.
	opts := postgres.ReplayOptions{Pool: pool, JetStream: e.js}
	if _, err := postgres.RetryDeadLetter(e.ctx, opts, badSeq); !errors.Is(err, postgres.ErrStillPoison) {
		t.Fatalf("retry without the fix: %v, want ErrStillPoison", err)
	}
	if _, err := postgres.RetryDeadLetter(e.ctx, opts, badSeq+100); !errors.Is(err, projections.ErrNotFound) {
		t.Fatalf("retry of no dead letter: %v, want ErrNotFound", err)
	}
	if n, err := v.DeadLetterCount(e.ctx); err != nil || n != 1 {
		t.Fatalf("dead letters after a failed retry: %d, %v", n, err)
	}

	// With the fix, while the live projector keeps running.
	opts.Upcast = jsonUpcaster
	res, err := postgres.RetryDeadLetter(e.ctx, opts, badSeq)
	if err != nil {
		t.Fatalf("retry with the fix: %v", err)
	}
	if len(res.Resolved) != 1 || res.Resolved[0] != badSeq || res.Aggregate != gs || res.Sequence != want {
		t.Errorf("retry result %+v", res)
	}
	if n, err := v.DeadLetterCount(e.ctx); err != nil || n != 0 {
		t.Fatalf("dead letters after the retry: %d, %v", n, err)
	}
	// In stream order: the later event's "order" wins.
	if l := labels(); l["after"] != "poison" || l["fixed"] != "yes" || l["order"] != "second" {
		t.Errorf("labels after the fix: %v", l)
	}
	// The views are what a replay with the fix produces.
	rep, err := postgres.Check(e.ctx, postgres.ReplayOptions{Pool: pool, JetStream: e.js, Upcast: jsonUpcaster})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		t.Errorf("check after the retry: %+v", rep.Differences)
	}
	// The live projector still applies new events.
	e.append(gs, &eventsv1.LabelsChanged{Set: map[string]string{"later": "yes"}})
	last := e.lastSeq()
	wait.For(t, 20*time.Second, "the live projector", func() bool { return live.Checkpoint() >= last })
	if l := labels(); l["later"] != "yes" || l["fixed"] != "yes" {
		t.Errorf("labels after a later event: %v", l)
	}
}

// TestDeadLetterKeepsItsPlaceInTheRow: an undecodable message, and an
// event its writer may not write, each dead-lettered, move their game
// server's row to their sequence: the controller and the API guard their
// appends on a row's last_sequence, and a row left behind the subject's
// last message made every such append to the server conflict for good.
// The state is the one before them, and a check agrees with the views.
func TestDeadLetterKeepsItsPlaceInTheRow(t *testing.T) {
	e := newEnv(t)
	e.scenario(2)
	const junked, other = "fleets/arena/gameServers/gs-0", "fleets/arena/gameServers/gs-1"
	if _, err := e.js.Publish(e.ctx, events.MustSubject(junked), []byte("not an envelope")); err != nil {
		t.Fatal(err)
	}
	junkSeq := e.lastSeq()
	// An event of another aggregate on gs-1's subject.
	foreign, err := events.New(junked, e.at.Add(time.Second), &eventsv1.LabelsChanged{Set: map[string]string{"x": "y"}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(e.ctx, events.MustSubject(other), foreign); err != nil {
		t.Fatal(err)
	}
	foreignSeq := e.lastSeq()

	pool := e.pool()
	live := e.projector(pool, "live", time.Minute, 7)
	e.runLive(live)
	wait.For(t, 20*time.Second, "the live views", func() bool { return live.Checkpoint() >= foreignSeq })
	v := postgres.NewViews(pool)
	for name, seq := range map[string]uint64{junked: junkSeq, other: foreignSeq} {
		row, err := v.GameServer(e.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if row.Sequence != seq {
			t.Errorf("%s: last_sequence %d, want the dead letter's %d", name, row.Sequence, seq)
		}
		if l := row.State.GetLabels(); l["x"] != "" {
			t.Errorf("%s: labels %v: the foreign event was applied", name, l)
		}
	}
	if n, err := v.DeadLetterCount(e.ctx); err != nil || n != 2 {
		t.Fatalf("dead letters: %d, %v, want 2", n, err)
	}
	rep, err := postgres.Check(e.ctx, postgres.ReplayOptions{Pool: pool, JetStream: e.js})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		t.Errorf("check: %+v", rep.Differences)
	}
}
