// Package playertoken signs and checks player-session tokens: short strings
// a player presents to a game server to take their seat. A token is bound to
// one player session, an expiry and a token generation (raised each time the
// seat's token is reissued, so that the agent can refuse earlier tokens); it
// is an HMAC-SHA256 over all three, with a key the control plane (which
// issues tokens) and the host agents (which check them) share. Several keys
// can be configured at once for rotation: the first signs, all of them
// verify. Tokens are decoded strictly: each has exactly one valid text.
package playertoken

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/services/platform/filewatch"
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

// Ring holds the keys: the first signs, all verify. A ring read from a
// file (LoadFile) follows the file: Watch reloads it when it changes, so
// keys rotate without a restart.
type Ring struct {
	keys []key                  // a ring from Parse
	file *filewatch.File[[]key] // a ring from LoadFile; nil otherwise
}

// current returns the keys in force.
func (r *Ring) current() []key {
	if r.file != nil {
		return r.file.Value()
	}
	return r.keys
}

// minSecret is the shortest secret accepted, in bytes.
const minSecret = 16

// Parse reads a ring from "id1:base64secret,id2:base64secret" (standard or
// URL base64, padded or not). The first key signs new tokens; the others
// only verify, which is how a key is rotated: add the new key first, keep
// the old one second until every token it signed has expired, then drop it.
func Parse(spec string) (*Ring, error) {
	keys, err := parseKeys(spec)
	if err != nil {
		return nil, err
	}
	return &Ring{keys: keys}, nil
}

// LoadFile reads a ring from a file holding what Parse reads, keys
// separated by commas or new lines, '#' starting a comment line: a file
// keeps the keys off command lines and out of environments, and Watch
// follows its changes. A file that others than its owner may read is
// logged as a warning.
func LoadFile(path string, log *slog.Logger) (*Ring, error) {
	f, err := filewatch.Load(path, "player-token keys", func(b []byte) ([]key, error) {
		var spec []string
		for line := range strings.Lines(string(b)) {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				spec = append(spec, line)
			}
		}
		return parseKeys(strings.Join(spec, ","))
	}, log)
	if err != nil {
		return nil, fmt.Errorf("playertoken: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && log != nil {
		log.Warn("the player-token keys file may be read by others than its owner: chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
	return &Ring{file: f}, nil
}

// Watch reloads a ring read by LoadFile every interval until ctx ends (a
// file that does not parse leaves the keys in force); a ring from Parse
// returns at once.
func (r *Ring) Watch(ctx context.Context, interval time.Duration) {
	if r.file != nil {
		r.file.Watch(ctx, interval)
	}
}

// Reload re-reads a ring's file now (Watch does it every interval).
func (r *Ring) Reload() (changed bool, err error) {
	if r.file == nil {
		return false, nil
	}
	return r.file.Reload()
}

// parseKeys reads Parse's spec.
func parseKeys(spec string) ([]key, error) {
	var keys []key
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
		keys = append(keys, key{id: id, secret: secret})
	}
	if len(keys) == 0 {
		return nil, errors.New("playertoken: no key given")
	}
	return keys, nil
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

// Sign returns a token of generation 0 for a player session (its
// resource name) valid until expiry: the token an allocation or a new player
// session hands out. It is SignGeneration with generation 0.
func (r *Ring) Sign(playerSession string, expiry time.Time) string {
	return r.SignGeneration(playerSession, expiry, 0)
}

// SignGeneration returns a token for a player session valid until expiry
// and bound to a token generation: each reissue of a seat's token
// (reconnect) raises the seat's generation, and the agent accepts only a
// token of the seat's current generation. Generation 0 is the original
// format, "<key id>.<expiry>.<mac>"; later ones are
// "<key id>.<expiry>.<generation>.<mac>", with the generation under the MAC.
func (r *Ring) SignGeneration(playerSession string, expiry time.Time, generation int64) string {
	k := r.current()[0]
	exp := strconv.FormatInt(expiry.Unix(), 10)
	if generation <= 0 {
		return k.id + "." + exp + "." + sigEncoding.EncodeToString(macV1(k.secret, playerSession, exp))
	}
	gen := strconv.FormatInt(generation, 10)
	return k.id + "." + exp + "." + gen + "." + sigEncoding.EncodeToString(macV2(k.secret, playerSession, exp, gen))
}

// Claims is what a valid token says.
type Claims struct {
	// Expiry is when the token stops being valid (whole seconds).
	Expiry time.Time
	// Generation is the seat's token generation the token was issued for.
	Generation int64
}

// Verify checks that token was issued for playerSession (its resource name)
// by a key of the ring and has not expired at now. It does not check the
// generation: see Check.
func (r *Ring) Verify(token, playerSession string, now time.Time) error {
	_, err := r.Check(token, playerSession, now)
	return err
}

// Check is Verify returning the token's claims, so that the caller can
// compare the generation with the seat's. Decoding is strict: a token is
// accepted only in the one textual form SignGeneration produces (canonical
// decimals, unpadded URL base64 of exactly a MAC's length, no stray
// characters), so no altered text of a valid token is valid too.
func (r *Ring) Check(token, playerSession string, now time.Time) (Claims, error) {
	t, err := parse(token)
	if err != nil {
		return Claims{}, err
	}
	for _, k := range r.current() {
		if k.id != t.keyID {
			continue
		}
		if !hmac.Equal(t.sig, t.mac(k.secret, playerSession)) {
			return Claims{}, ErrBadSignature
		}
		if now.Unix() > t.expiry {
			return Claims{}, fmt.Errorf("%w at %s", ErrExpired, time.Unix(t.expiry, 0).UTC().Format(time.RFC3339))
		}
		return Claims{Expiry: time.Unix(t.expiry, 0), Generation: t.generation}, nil
	}
	return Claims{}, ErrUnknownKey
}

// sigEncoding encodes MACs: unpadded URL base64, strict (the unused low
// bits of the last character must be zero).
var sigEncoding = base64.RawURLEncoding.Strict()

// sigLen is the length of an encoded HMAC-SHA256.
var sigLen = sigEncoding.EncodedLen(sha256.Size)

// token is a parsed token, its fields as signed.
type token struct {
	keyID              string
	expText, genText   string
	expiry, generation int64
	sig                []byte
	// withGeneration is a four-part token (generation 1 and later).
	withGeneration bool
}

// parse splits a token into its fields and refuses any text that is not
// the canonical form of those fields.
func parse(s string) (token, error) {
	parts := strings.Split(s, ".")
	var t token
	switch len(parts) {
	case 3:
		t.keyID, t.expText = parts[0], parts[1]
	case 4:
		t.keyID, t.expText, t.genText, t.withGeneration = parts[0], parts[1], parts[2], true
	default:
		return token{}, ErrMalformed
	}
	var ok bool
	if t.keyID == "" {
		return token{}, ErrMalformed
	}
	if t.expiry, ok = canonicalInt(t.expText); !ok {
		return token{}, ErrMalformed
	}
	if t.withGeneration {
		// Generation 0 has one form only: the three-part one.
		if t.generation, ok = canonicalInt(t.genText); !ok || t.generation == 0 {
			return token{}, ErrMalformed
		}
	}
	enc := parts[len(parts)-1]
	if len(enc) != sigLen {
		return token{}, ErrMalformed
	}
	sig, err := sigEncoding.DecodeString(enc)
	// The decoder skips CR and LF even when strict: re-encoding must give
	// the text back.
	if err != nil || len(sig) != sha256.Size || sigEncoding.EncodeToString(sig) != enc {
		return token{}, ErrMalformed
	}
	t.sig = sig
	return t, nil
}

// canonicalInt parses a non-negative decimal written as FormatInt writes it
// (no sign, no leading zero, no space).
func canonicalInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return n, true
}

// mac is the MAC the token's fields call for under secret.
func (t token) mac(secret []byte, playerSession string) []byte {
	if !t.withGeneration {
		return macV1(secret, playerSession, t.expText)
	}
	return macV2(secret, playerSession, t.expText, t.genText)
}

func macV1(secret []byte, playerSession, exp string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("tether-player-token-v1\x00" + playerSession + "\x00" + exp))
	return h.Sum(nil)
}

func macV2(secret []byte, playerSession, exp, gen string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("tether-player-token-v2\x00" + playerSession + "\x00" + exp + "\x00" + gen))
	return h.Sum(nil)
}
