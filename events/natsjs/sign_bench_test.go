package natsjs

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// oneSigner is a Signers of one key.
type oneSigner struct{ pub, principal string }

func (o oneSigner) Principal(k string) (string, bool) { return o.principal, k == o.pub }
func (oneSigner) VerifyFrom() uint64                  { return 0 }

// signedEvent is a typical agent event, encoded and signed.
func signedEvent(b *testing.B) (KeySigner, string, []byte, nats.Header) {
	b.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		b.Fatal(err)
	}
	e := events.New("fleets/arena/gameServers/gs-1", time.Now(), &eventsv1.ProcessStarted{Pid: 4242, Address: "10.0.1.1"})
	data, err := e.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	h := nats.Header{}
	subject := events.MustSubject(e.Aggregate)
	if err := sign(KeySigner{kp}, subject, data, h); err != nil {
		b.Fatal(err)
	}
	return KeySigner{kp}, subject, data, h
}

// BenchmarkSignEvent is the cost a writer adds to each append.
func BenchmarkSignEvent(b *testing.B) {
	s, subject, data, _ := signedEvent(b)
	for b.Loop() {
		if err := sign(s, subject, data, nats.Header{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyEvent is the cost a verifying reader (the projector) adds
// to each event.
func BenchmarkVerifyEvent(b *testing.B) {
	s, subject, data, h := signedEvent(b)
	pub, err := s.KeyPair.PublicKey()
	if err != nil {
		b.Fatal(err)
	}
	v := NewVerifier(oneSigner{pub: pub, principal: "hosts/h1"})
	for b.Loop() {
		if w := v.Writer(subject, 1, data, h); w != "hosts/h1" {
			b.Fatalf("writer %q", w)
		}
	}
}
