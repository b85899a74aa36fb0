package apiserver

import (
	"errors"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
)

// Fuzz targets for what the API parses from callers: page tokens and
// filters (docs/fuzzing.md).

// Any token decodes to a position or is refused, never a panic; a token
// the API issued decodes to its position for its own query only.
func FuzzPageToken(f *testing.F) {
	f.Add("fleets/arena", "fleets", "")
	f.Add("", "", "eyJhIjoieCIsInEiOiJ5In0")
	f.Add("fleets/a/gameServers/b", "state=READY", "not base64 !")
	f.Fuzz(func(t *testing.T, after, query, token string) {
		_, _ = decodePageToken(token, query)
		if !utf8.ValidString(after) || !utf8.ValidString(query) {
			// JSON would replace the invalid bytes. Unreachable: positions
			// are resource names, and gRPC refuses strings that are not
			// UTF-8 (docs/fuzzing.md).
			return
		}
		issued := encodePageToken(after, query)
		got, err := decodePageToken(issued, query)
		if err != nil || got != after {
			t.Fatalf("token for (%q, %q) decodes to (%q, %v)", after, query, got, err)
		}
		if _, err := decodePageToken(issued, query+"x"); err == nil {
			t.Fatalf("token for query %q accepted for %q", query, query+"x")
		}
	})
}

// Any filter parses or is refused with an INVALID_ARGUMENT, never a panic.
func FuzzGameServerFilter(f *testing.F) {
	for _, s := range []string{"", "state=READY", "state=READY AND host=hosts/h1", `health="HEALTHY"`, "state=", "x=y", "state=READY AND state=READY"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, filter string) {
		if _, err := parseGameServerFilter(filter); err != nil && !isInvalidArgument(err) {
			t.Fatalf("filter %q: %v is not INVALID_ARGUMENT", filter, err)
		}
		if _, err := parseGameSessionFilter(filter); err != nil && !isInvalidArgument(err) {
			t.Fatalf("game session filter %q: %v is not INVALID_ARGUMENT", filter, err)
		}
	})
}

// isInvalidArgument reports whether err is the API's INVALID_ARGUMENT.
func isInvalidArgument(err error) bool {
	var e *apiError
	return errors.As(err, &e) && e.code == codes.InvalidArgument
}
