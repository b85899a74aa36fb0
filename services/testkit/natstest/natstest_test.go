package natstest_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/testkit/natstest"
)

func TestStartConnect(t *testing.T) {
	s := natstest.Start(t)
	nc, js := natstest.Connect(t, s)
	if !nc.IsConnected() {
		t.Fatalf("client status %s", nc.Status())
	}
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "t.x", nil); err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(t.Context()); err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream info %+v, %v", info, err)
	}
}

// A replica made behind answers some direct gets from its past: a message
// stored on another subject after it is missing there.
func TestBehindReplicaAnswersDirectGets(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "t.a", nil); err != nil {
		t.Fatal(err)
	}
	natstest.BehindReplica(t, js, "T", "t.a")
	if _, err := js.Publish(t.Context(), "t.b", nil); err != nil {
		t.Fatal(err)
	}
	missed := 0
	for range 40 { // all 40 going to the stream itself: odds of 1 in 2^40
		_, err := st.GetMsg(t.Context(), 2, jetstream.WithGetMsgSubject("t.>"))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			missed++
		case err != nil:
			t.Fatal(err)
		}
	}
	if missed == 0 {
		t.Fatal("40 direct gets, every one answered by the stream: the replica answers none")
	}
	t.Logf("%d of 40 direct gets answered from the replica's past", missed)
}
