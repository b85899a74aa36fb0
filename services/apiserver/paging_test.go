package apiserver

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// decodePageToken gives back the position of a token the API issued, for
// its own query, and refuses any other token with INVALID_ARGUMENT on
// page_token: positions the API never issues (a NUL byte reached
// PostgreSQL and answered 500) included.
func TestDecodePageToken(t *testing.T) {
	// forged is a token of the API's format with any position.
	forged := func(after, query string) string {
		b, err := json.Marshal(pageToken{After: after, Query: query})
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, tc := range []struct {
		name, token, query string
		want               string // the position, when accepted
		ok                 bool
	}{
		{"no token", "", "fleets", "", true},
		{"a fleet", encodePageToken("fleets/arena", "fleets"), "fleets", "fleets/arena", true},
		{"a game session's time and name", encodePageToken("2026-11-01T00:00:00.5Z gameSessions/g-1", "state=ACTIVE"), "state=ACTIVE", "2026-11-01T00:00:00.5Z gameSessions/g-1", true},
		{"a stream sequence", encodePageToken("42", deadLetterPage), deadLetterPage, "42", true},
		{"the longest position", forged(strings.Repeat("a", maxPagePosition), "fleets"), "fleets", strings.Repeat("a", maxPagePosition), true},
		{"another query", encodePageToken("fleets/arena", "fleets"), "hosts", "", false},
		{"a NUL byte", forged("fleets/a\x00", "fleets"), "fleets", "", false},
		{"only a NUL byte", forged("\x00", "hosts"), "hosts", "", false},
		{"a control character", forged("fleets/\x1b", "fleets"), "fleets", "", false},
		{"DEL", forged("fleets/\x7f", "fleets"), "fleets", "", false},
		{"not ASCII", forged("fleets/é", "fleets"), "fleets", "", false},
		{"a line separator", forged("\u2028", "fleets"), "fleets", "", false},
		{"too long", forged(strings.Repeat("a", maxPagePosition+1), "fleets"), "fleets", "", false},
		{"not base64", "not base64 !", "fleets", "", false},
		{"not JSON", base64.RawURLEncoding.EncodeToString([]byte("\x00\xff")), "fleets", "", false},
		{"JSON of another shape", base64.RawURLEncoding.EncodeToString([]byte(`{"a":1}`)), "fleets", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodePageToken(tc.token, tc.query)
			if tc.ok {
				if err != nil || got != tc.want {
					t.Fatalf("got (%q, %v), want %q", got, err, tc.want)
				}
				return
			}
			if !isInvalidArgument(err) || err.(*apiError).field != "page_token" {
				t.Fatalf("got (%q, %v), want INVALID_ARGUMENT on page_token", got, err)
			}
		})
	}
}
