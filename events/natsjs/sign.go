package natsjs

import (
	"encoding/base64"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/tetherhq/tether/events"
)

// Headers of a signed event: the writer's public nkey and its Ed25519
// signature, in unpadded base64url, over the subject, a NUL and the
// message data (the encoded envelope). The subject is signed so that a
// signed event cannot be replayed onto another aggregate.
const (
	HeaderSigner    = "Tether-Signer"
	HeaderSignature = "Tether-Signature"
)

// Signers names the principal of each public key allowed to sign events:
// "controller", "hosts/h1". natsauth.Signers reads them from a file.
type Signers interface {
	// Principal returns the principal of a public key, ok=false when the
	// key is unknown.
	Principal(publicKey string) (principal string, ok bool)
	// VerifyFrom is the first stream sequence whose events must be signed;
	// events before it (written before signatures were turned on) are
	// read unverified (Writer ""). 0 or 1: every event.
	VerifyFrom() uint64
}

// Signer signs the events a store appends: natsauth.Credentials, whose key
// may be rotated while the store runs, or a fixed KeySigner.
type Signer interface {
	// Sign signs content with the current key and returns the key's
	// public half with the signature.
	Sign(content []byte) (publicKey string, signature []byte, err error)
}

// KeySigner signs with one key pair.
type KeySigner struct{ KeyPair nkeys.KeyPair }

// Sign implements Signer.
func (k KeySigner) Sign(content []byte) (string, []byte, error) {
	pub, err := k.KeyPair.PublicKey()
	if err != nil {
		return "", nil, err
	}
	sig, err := k.KeyPair.Sign(content)
	return pub, sig, err
}

// signedContent is what a signature covers.
func signedContent(subject string, data []byte) []byte {
	b := make([]byte, 0, len(subject)+1+len(data))
	b = append(b, subject...)
	b = append(b, 0)
	return append(b, data...)
}

// sign adds the signature headers of data on subject, signed by s.
func sign(s Signer, subject string, data []byte, h nats.Header) error {
	pub, sig, err := s.Sign(signedContent(subject, data))
	if err != nil {
		return err
	}
	h.Set(HeaderSigner, pub)
	h.Set(HeaderSignature, base64.RawURLEncoding.EncodeToString(sig))
	return nil
}

// Verifier derives Envelope.Writer from a stored message's signature. A
// nil *Verifier verifies nothing (Writer stays ""). It is safe for
// concurrent use.
type Verifier struct {
	signers Signers
	keys    sync.Map // public key → nkeys.KeyPair, parsed once
}

// NewVerifier returns a verifier of signatures by signers' keys; nil
// signers return a nil verifier.
func NewVerifier(signers Signers) *Verifier {
	if signers == nil {
		return nil
	}
	return &Verifier{signers: signers}
}

// Writer returns the principal who signed the message stored at seq on
// subject with data and headers h, events.UnverifiedWriter when it carries
// no valid signature of a known key, and "" when v is nil or seq comes
// before the signers' VerifyFrom.
func (v *Verifier) Writer(subject string, seq uint64, data []byte, h nats.Header) string {
	if v == nil || seq < v.signers.VerifyFrom() {
		return ""
	}
	pub, sig64 := h.Get(HeaderSigner), h.Get(HeaderSignature)
	if pub == "" || sig64 == "" {
		return events.UnverifiedWriter
	}
	principal, ok := v.signers.Principal(pub)
	if !ok {
		return events.UnverifiedWriter
	}
	sig, err := base64.RawURLEncoding.DecodeString(sig64)
	if err != nil {
		return events.UnverifiedWriter
	}
	kp, err := v.key(pub)
	if err != nil || kp.Verify(signedContent(subject, data), sig) != nil {
		return events.UnverifiedWriter
	}
	return principal
}

// key returns the parsed public key pub.
func (v *Verifier) key(pub string) (nkeys.KeyPair, error) {
	if kp, ok := v.keys.Load(pub); ok {
		return kp.(nkeys.KeyPair), nil
	}
	kp, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return nil, err
	}
	v.keys.Store(pub, kp)
	return kp, nil
}
