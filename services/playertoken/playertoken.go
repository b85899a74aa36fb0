// Package playertoken signs and checks player-session tokens: short strings
// a player presents to a game server to take their seat. A token is bound to
// one player session and expires; it is an HMAC-SHA256 over both, with a key
// the control plane (which issues tokens) and the host agents (which check
// them) share. Several keys can be configured at once for rotation: the
// first signs, all of them verify.
package playertoken

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Errors Verify returns; each says why a token is refused.
var (
	// ErrMalformed is a token that is not of this package's format.
	ErrMalformed = errors.New("playertoken: malformed token")
	// ErrUnknownKey is a token signed with a key this ring does not hold
	// (rotated out, or from another installation).
	ErrUnknownKey = errors.New("playertoken: signed with an unknown key")
	// ErrBadSignature is a token forged, altered, or issued for another
	// player session.
	ErrBadSignature = errors.New("playertoken: signature does not match this player session")
	// ErrExpired is a token past its expiry.
	ErrExpired = errors.New("playertoken: token expired")
)

// key is one signing key with its id.
type key struct {
	id     string
	secret []byte
}

// Ring holds the keys: the first signs, all verify.
type Ring struct {
	keys []key
}

// minSecret is the shortest secret accepted, in bytes.
const minSecret = 16

// Parse reads a ring from "id1:base64secret,id2:base64secret" (standard or
// URL base64, padded or not). The first key signs new tokens; the others
// only verify, which is how a key is rotated: add the new key first, keep
// the old one second until every token it signed has expired, then drop it.
func Parse(spec string) (*Ring, error) {
	r := &Ring{}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, enc, ok := strings.Cut(part, ":")
		if !ok || id == "" || strings.ContainsAny(id, ".") {
			return nil, fmt.Errorf("playertoken: key %q is not id:base64secret (the id has no '.')", part)
		}
		if seen[id] {
			return nil, fmt.Errorf("playertoken: key id %q appears twice", id)
		}
		secret, err := decodeSecret(enc)
		if err != nil {
			return nil, fmt.Errorf("playertoken: key %q: %w", id, err)
		}
		if len(secret) < minSecret {
			return nil, fmt.Errorf("playertoken: key %q has %d bytes; at least %d are needed", id, len(secret), minSecret)
		}
		seen[id] = true
		r.keys = append(r.keys, key{id: id, secret: secret})
	}
	if len(r.keys) == 0 {
		return nil, errors.New("playertoken: no key given")
	}
	return r, nil
}

func decodeSecret(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if b, err := base64.RawStdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawURLEncoding.DecodeString(s)
}

// NewKeySpec returns a fresh one-key spec for Parse ("id:secret"), for
// development setups that start the whole system in one process.
func NewKeySpec(id string) string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return id + ":" + base64.RawURLEncoding.EncodeToString(b[:])
}

// Sign returns a token for a player session (its resource name) valid
// until expiry.
func (r *Ring) Sign(playerSession string, expiry time.Time) string {
	k := r.keys[0]
	exp := strconv.FormatInt(expiry.Unix(), 10)
	return k.id + "." + exp + "." + base64.RawURLEncoding.EncodeToString(mac(k.secret, playerSession, exp))
}

// Verify checks that token was issued for playerSession (its resource name)
// by a key of the ring and has not expired at now.
func (r *Ring) Verify(token, playerSession string, now time.Time) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ErrMalformed
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return ErrMalformed
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return ErrMalformed
	}
	for _, k := range r.keys {
		if k.id != parts[0] {
			continue
		}
		if !hmac.Equal(sig, mac(k.secret, playerSession, parts[1])) {
			return ErrBadSignature
		}
		if now.Unix() > exp {
			return fmt.Errorf("%w at %s", ErrExpired, time.Unix(exp, 0).UTC().Format(time.RFC3339))
		}
		return nil
	}
	return ErrUnknownKey
}

func mac(secret []byte, playerSession, exp string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("tether-player-token-v1\x00" + playerSession + "\x00" + exp))
	return h.Sum(nil)
}
