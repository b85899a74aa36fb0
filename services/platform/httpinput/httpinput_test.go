package httpinput_test

import (
	"net/http/httptest"
	"testing"

	"github.com/tetherhq/tether/services/platform/httpinput"
)

func TestInvalidUTF8(t *testing.T) {
	for target, want := range map[string]string{
		"/v1/fleets?pageToken=abc":      "",
		"/v1/fleets/%C3%A9t%C3%A9":      "",
		"/v1/fleets?pageToken=%FF":      "query parameter pageToken",
		"/v1/sdk/labels/%FF":            "the path",
		"/v1/fleets?%FE=1":              "a query parameter's name",
		"/v1/fleets?pageToken=%zz":      "the query",
		"/v1/fleets?filter=ok&x=%C3%28": "query parameter x",
	} {
		if got := httpinput.InvalidUTF8(httptest.NewRequest("GET", target, nil)); got != want {
			t.Errorf("%s: %q, want %q", target, got, want)
		}
	}
}
