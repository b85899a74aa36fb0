// Package testoidc is an identity provider for tests: a signing key, its
// JWK Set in a file, and tokens with the claims a test asks for.
package testoidc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer is the provider's issuer URL in its tokens.
const Issuer = "https://id.example.test"

// Provider signs tokens with one key, published in JWKSFile.
type Provider struct {
	t        testing.TB
	key      *ecdsa.PrivateKey
	keyID    string
	JWKSFile string
}

// New makes a provider whose JWK Set is written in a t.TempDir().
func New(t testing.TB) *Provider {
	t.Helper()
	p := &Provider{t: t, JWKSFile: filepath.Join(t.TempDir(), "jwks.json")}
	p.Rotate()
	return p
}

// Rotate makes a new signing key and publishes it (the old one is gone).
func (p *Provider) Rotate() {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	p.key, p.keyID = key, time.Now().Format("150405.000000000")
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: p.keyID, Algorithm: string(jose.ES256), Use: "sig"}}}
	b, err := json.Marshal(set)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(p.JWKSFile+".new", b, 0o600); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Rename(p.JWKSFile+".new", p.JWKSFile); err != nil {
		p.t.Fatal(err)
	}
}

// Token signs claims with the current key, with issuer Issuer, audience
// aud, issued now and expiring after ttl (unless claims set them).
func (p *Provider) Token(aud string, ttl time.Duration, claims map[string]any) string {
	p.t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: p.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", p.keyID))
	if err != nil {
		p.t.Fatal(err)
	}
	now := time.Now()
	std := jwt.Claims{Issuer: Issuer, Audience: jwt.Audience{aud}, IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(ttl))}
	tok, err := jwt.Signed(signer).Claims(std).Claims(claims).Serialize()
	if err != nil {
		p.t.Fatal(err)
	}
	return tok
}
