package natstest_test

import (
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
