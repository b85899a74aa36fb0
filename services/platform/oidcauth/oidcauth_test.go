package oidcauth_test

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/oidcauth"
	"github.com/tetherhq/tether/services/testkit/testoidc"
)

func TestTokensAreVerified(t *testing.T) {
	idp := testoidc.New(t)
	ctx := context.Background()
	v, err := oidcauth.New(ctx, oidcauth.Options{Issuer: testoidc.Issuer, Audience: "tether", JWKSFile: idp.JWKSFile})
	if err != nil {
		t.Fatal(err)
	}
	good := idp.Token("tether", time.Hour, map[string]any{"email": "alice@example.com", "tether_role": "operator"})
	p, err := v.Authenticate(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if want := (apikeys.Principal{Name: "alice@example.com", Role: apikeys.Operator, Via: "oidc"}); p != want {
		t.Fatalf("principal %+v, want %+v", p, want)
	}
	if p, err := v.Authenticate(ctx, idp.Token("tether", time.Hour, map[string]any{"sub": "u-1", "tether_role": []any{"viewer", "admin", "x"}})); err != nil ||
		p.Role != apikeys.Admin || p.Name != "u-1" {
		t.Errorf("a list of roles and no e-mail: %+v, %v; want admin, named by sub", p, err)
	}
	for name, tok := range map[string]string{
		"another audience": idp.Token("grafana", time.Hour, map[string]any{"tether_role": "admin"}),
		"expired":          idp.Token("tether", -time.Minute, map[string]any{"tether_role": "admin"}),
		"no role":          idp.Token("tether", time.Hour, map[string]any{"email": "bob@example.com"}),
		"an unknown role":  idp.Token("tether", time.Hour, map[string]any{"tether_role": "root"}),
		"altered":          good[:len(good)-4] + "AAAA",
		"not a token":      "a.b.c",
	} {
		if p, err := v.Authenticate(ctx, tok); err == nil {
			t.Errorf("%s: accepted as %+v", name, p)
		}
	}
	// The provider rotates its key: the file is read again, and a token of
	// the old key is refused.
	idp.Rotate()
	if changed, err := v.Reload(); err != nil || !changed {
		t.Fatalf("reload: %v, %v", changed, err)
	}
	if _, err := v.Authenticate(ctx, good); err == nil {
		t.Error("the retired key's token is accepted")
	}
	if _, err := v.Authenticate(ctx, idp.Token("tether", time.Hour, map[string]any{"tether_role": "viewer"})); err != nil {
		t.Errorf("the new key's token: %v", err)
	}
}
