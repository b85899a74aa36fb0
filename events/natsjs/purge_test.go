package natsjs_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// TestSetupOverAStreamThatDeniesPurges: a stream set up by a version that
// denied purges keeps denying them (nats-server cannot lift that in
// place): Setup succeeds and leaves it, and PurgesAllowed says so; a
// stream Setup creates allows them and still denies deletes.
func TestSetupOverAStreamThatDeniesPurges(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: events.StreamName, Subjects: []string{events.SubjectPrefix + ".>"},
		DenyDelete: true, DenyPurge: true, AllowDirect: true, Duplicates: natsjs.DefaultDuplicateWindow,
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second Setup finds the stream as it can be
		if err := natsjs.Setup(ctx, js, natsjs.Options{DuplicateWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; !c.DenyPurge || !c.DenyDelete || c.Duplicates != time.Minute {
		t.Fatalf("after Setup: deny purge %v, deny delete %v, duplicates %s", c.DenyPurge, c.DenyDelete, c.Duplicates)
	}
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PurgesAllowed(ctx); !errors.Is(err, natsjs.ErrPurgeDenied) {
		t.Fatalf("PurgesAllowed: %v, want ErrPurgeDenied", err)
	}
	if _, err := store.PurgeSubject(ctx, fleetSubject("a"), 1); err == nil {
		t.Fatal("purged a stream that denies purges")
	}

	e := newEnv(t)
	if err := e.store.PurgesAllowed(e.ctx); err != nil {
		t.Fatalf("a stream Setup created: %v", err)
	}
	seq := e.append(t, fleetSubject("a"), 0, fleetCreated("a", 1))
	if err := e.store.Stream().DeleteMsg(e.ctx, seq); err == nil {
		t.Fatal("the stream deleted a single event")
	}
}

// TestPurgeSubjectUpToASequence: a purge removes only the subject's
// events up to the sequence given; later ones, and other subjects', stay;
// purging again removes nothing; the subject's guard follows what is left.
func TestPurgeSubjectUpToASequence(t *testing.T) {
	e := newEnv(t)
	a, b := fleetSubject("a"), fleetSubject("b")
	e.append(t, a, 0, fleetCreated("a", 1))
	e.append(t, b, 0, fleetCreated("b", 1))
	lastA := e.append(t, a, events.AnySequence, fleetCreated("a", 2), fleetCreated("a", 3))
	before, err := e.store.Stored(e.ctx, a, 1, lastA)
	if err != nil || len(before) != 3 {
		t.Fatalf("stored: %d messages, %v", len(before), err)
	}
	if before[0].Header.Get(jetstream.MsgIDHeader) == "" || before[0].Header.Get(natsjs.HeaderType) != "FleetCreated" ||
		before[0].Time.IsZero() || before[0].Subject != a {
		t.Fatalf("stored message lacks what the stream stored: %+v", before[0])
	}
	if got, err := e.store.Stored(e.ctx, a, before[1].Sequence, before[1].Sequence); err != nil || len(got) != 1 ||
		got[0].Sequence != before[1].Sequence || !bytes.Equal(got[0].Data, before[1].Data) {
		t.Fatalf("stored from %d to %d: %+v, %v", before[1].Sequence, before[1].Sequence, got, err)
	}

	// A late event after the archived part.
	late := e.append(t, a, lastA, fleetCreated("a", 4))
	n, err := e.store.PurgeSubject(e.ctx, a, lastA)
	if err != nil || n != 3 {
		t.Fatalf("purge up to %d: %d purged, %v; want 3", lastA, n, err)
	}
	if n, err := e.store.PurgeSubject(e.ctx, a, lastA); err != nil || n != 0 {
		t.Fatalf("purge again: %d purged, %v; want 0", n, err)
	}
	left, err := e.store.Stored(e.ctx, a, 1, late)
	if err != nil || len(left) != 1 || left[0].Sequence != late {
		t.Fatalf("left on %s: %+v, %v; want only the late event %d", a, left, err, late)
	}
	if last, err := e.store.LeaderLastSequence(e.ctx, a); err != nil || last != late {
		t.Fatalf("leader last sequence %d, %v; want %d", last, err, late)
	}
	if h := e.history(t, b, 0); len(h) != 1 {
		t.Fatalf("the other subject has %d events, want 1", len(h))
	}

	// Purged whole, the subject takes a first event again.
	if _, err := e.store.PurgeSubject(e.ctx, a, late); err != nil {
		t.Fatal(err)
	}
	if last, err := e.store.LeaderLastSequence(e.ctx, a); err != nil || last != 0 {
		t.Fatalf("leader last sequence %d, %v; want 0", last, err)
	}
	seq := e.append(t, a, 0, fleetCreated("a", 5))
	if seq <= late {
		t.Fatalf("sequence %d after %d: the stream reused a sequence", seq, late)
	}
	if _, err := e.store.PurgeSubject(e.ctx, "tether.ev.fleet.*", seq); err == nil {
		t.Fatal("purged a wildcard")
	}
	_, err = e.store.Append(e.ctx, a, late, fleetCreated("a", 6))
	if !errors.Is(err, events.ErrConflict) {
		t.Fatalf("append guarded by a purged sequence: %v, want a conflict", err)
	}
}
