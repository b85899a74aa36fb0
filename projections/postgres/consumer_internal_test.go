package postgres

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/testkit/natstest"
)

// A consumer deleted under a pull in flight says so; one deleted when no
// pull heard it shows only as missed heartbeats or a pull no one answers,
// and is then asked for: either way the consume ends (errConsumerGone) and
// the next makes it anew. A consumer still there keeps its consume.
func TestAConsumerDeletedUnderThePullsIsGone(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.CreateOrUpdateConsumer(t.Context(), jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for _, hint := range []error{jetstream.ErrNoHeartbeat, nats.ErrNoResponders} {
		if !consumerMaybeGone(hint) {
			t.Errorf("%v is not taken for a sign that the consumer may be gone", hint)
		}
		if err := checkConsumer(t.Context(), cons, hint); err != nil {
			t.Errorf("after %v, a consumer still there: %v, want the consume to go on", hint, err)
		}
	}
	if err := stream.DeleteConsumer(t.Context(), "d"); err != nil {
		t.Fatal(err)
	}
	for _, hint := range []error{jetstream.ErrConsumerDeleted, jetstream.ErrNoHeartbeat, nats.ErrNoResponders} {
		if err := checkConsumer(t.Context(), cons, hint); !errors.Is(err, errConsumerGone) {
			t.Errorf("after %v, a deleted consumer: %v, want errConsumerGone", hint, err)
		}
	}
	if consumerMaybeGone(errors.New("nats: timeout")) {
		t.Error("any error is taken for a sign that the consumer may be gone")
	}
}
