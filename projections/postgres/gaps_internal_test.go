package postgres

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/testkit/natstest"
)

// The first message after a sequence is the leader's answer: a replica
// behind it (natstest.BehindReplica, holding only t.a's message) would say
// there is none, and a gap in the projector's feed would pass for archived
// events, and be skipped, lost to the views.
func TestFirstAfterIsNotAnsweredByAReplicaBehind(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	a, err := js.Publish(t.Context(), "t.a", nil)
	if err != nil {
		t.Fatal(err)
	}
	natstest.BehindReplica(t, js, "T", "t.a")
	b, err := js.Publish(t.Context(), "t.b", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Were it a direct get, ten reads all answered by the stream itself
	// would have odds of 1 in 1,024.
	for i := range 10 {
		first, found, err := firstAfter(t.Context(), js, "T", a.Sequence)
		if err != nil || !found || first != b.Sequence {
			t.Fatalf("read %d: first after %d = %d, found %v, %v; want %d", i, a.Sequence, first, found, err, b.Sequence)
		}
	}
	if first, found, err := firstAfter(t.Context(), js, "T", b.Sequence); err != nil || found {
		t.Fatalf("first after the last = %d, found %v, %v; want none", first, found, err)
	}
}
