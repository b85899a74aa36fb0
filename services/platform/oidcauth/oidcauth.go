// Package oidcauth authenticates API callers by OpenID Connect tokens
// (JWTs signed by the studio's identity provider, for single sign-on to
// dashboards): it checks the signature against the provider's keys (JWKS,
// from a URL or a file re-read when it changes), the issuer, the audience
// and the expiry, and reads the caller's name and Tether role from claims.
package oidcauth

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/filewatch"
)

// Options configure a Verifier.
type Options struct {
	// Issuer is the provider's issuer URL, as tokens say it (iss).
	Issuer string
	// Audience is what tokens must be issued for (aud): Tether's client id.
	Audience string
	// JWKSURL is where the provider publishes its keys; or JWKSFile, a
	// JWK Set file re-read when it changes (one of the two).
	JWKSURL  string
	JWKSFile string
	// RoleClaim names the claim that holds the caller's Tether role
	// (admin, operator, …; a string, or a list of which the most powerful
	// known role counts); default "tether_role".
	RoleClaim string
	// NameClaim names the claim shown as the principal; default "email",
	// falling back to "sub" when absent.
	NameClaim string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
}

// Errors a token is refused with.
var (
	ErrNoRole = errors.New("the token's role claim names no Tether role")
)

// Verifier authenticates OIDC tokens. It is safe for concurrent use.
type Verifier struct {
	opts     Options
	verifier *oidc.IDTokenVerifier
	file     *filewatch.File[[]crypto.PublicKey] // JWKSFile's keys
}

// New returns a verifier. With JWKSURL, the keys are fetched on first use
// and again when a token names a key not seen yet.
func New(ctx context.Context, opts Options) (*Verifier, error) {
	switch {
	case opts.Issuer == "" || opts.Audience == "":
		return nil, errors.New("oidcauth: an issuer and an audience are required")
	case (opts.JWKSURL == "") == (opts.JWKSFile == ""):
		return nil, errors.New("oidcauth: give the provider's keys as a JWKS URL or a JWKS file (one of the two)")
	}
	if opts.RoleClaim == "" {
		opts.RoleClaim = "tether_role"
	}
	if opts.NameClaim == "" {
		opts.NameClaim = "email"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	v := &Verifier{opts: opts}
	var keys oidc.KeySet
	if opts.JWKSURL != "" {
		keys = oidc.NewRemoteKeySet(ctx, opts.JWKSURL)
	} else {
		f, err := filewatch.Load(opts.JWKSFile, "OIDC keys", parseJWKS, opts.Logger)
		if err != nil {
			return nil, fmt.Errorf("oidcauth: %w", err)
		}
		v.file = f
		keys = fileKeySet{f}
	}
	v.verifier = oidc.NewVerifier(opts.Issuer, keys, &oidc.Config{ClientID: opts.Audience, Now: opts.Now,
		SupportedSigningAlgs: []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA}})
	return v, nil
}

// Watch re-reads a JWKS file every interval until ctx ends (keys rotated
// by the provider); with a JWKS URL it returns at once.
func (v *Verifier) Watch(ctx context.Context, interval time.Duration) {
	if v.file != nil {
		v.file.Watch(ctx, interval)
	}
}

// Reload re-reads a JWKS file now (Watch does it every interval).
func (v *Verifier) Reload() (bool, error) {
	if v.file == nil {
		return false, nil
	}
	return v.file.Reload()
}

// Authenticate verifies a token and returns its principal: the name claim,
// the role claim's role, authenticated "oidc".
func (v *Verifier) Authenticate(ctx context.Context, token string) (apikeys.Principal, error) {
	id, err := v.verifier.Verify(ctx, token)
	if err != nil {
		return apikeys.Principal{}, fmt.Errorf("the OIDC token is refused: %w", err)
	}
	var claims map[string]any
	if err := id.Claims(&claims); err != nil {
		return apikeys.Principal{}, fmt.Errorf("the OIDC token's claims: %w", err)
	}
	name, _ := claims[v.opts.NameClaim].(string)
	if name == "" {
		name = id.Subject
	}
	role, ok := roleOf(claims[v.opts.RoleClaim])
	if !ok {
		return apikeys.Principal{}, fmt.Errorf("%w (claim %q of %s)", ErrNoRole, v.opts.RoleClaim, name)
	}
	return apikeys.Principal{Name: name, Role: role, Via: "oidc"}, nil
}

// roleOf reads a role claim: a role's name, or a list of names of which
// the most powerful known role counts (apikeys.Roles is in that order).
func roleOf(claim any) (apikeys.Role, bool) {
	var names []string
	switch c := claim.(type) {
	case string:
		names = []string{c}
	case []any:
		for _, n := range c {
			if s, ok := n.(string); ok {
				names = append(names, s)
			}
		}
	}
	for _, r := range apikeys.Roles {
		for _, n := range names {
			if n == string(r) {
				return r, true
			}
		}
	}
	return "", false
}

// parseJWKS reads a JWK Set's public keys.
func parseJWKS(b []byte) ([]crypto.PublicKey, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JWK Set: %w", err)
	}
	var keys []crypto.PublicKey
	for _, k := range set.Keys {
		if !k.Valid() {
			return nil, fmt.Errorf("key %q is not valid", k.KeyID)
		}
		keys = append(keys, k.Public().Key)
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	return keys, nil
}

// fileKeySet verifies signatures with the keys of a JWKS file as it is now.
type fileKeySet struct {
	file *filewatch.File[[]crypto.PublicKey]
}

// VerifySignature implements oidc.KeySet.
func (f fileKeySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	return (&oidc.StaticKeySet{PublicKeys: f.file.Value()}).VerifySignature(ctx, jwt)
}
