package apiserver

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
)

// Fuzz targets for what the API parses from callers: page tokens and
// filters (docs/fuzzing.md).

// Any token decodes to a position or is refused with INVALID_ARGUMENT,
// never a panic; a position decoded is printable ASCII (PostgreSQL refuses
// a NUL byte: it answered 500). A token the API issued decodes to its
// position for its own query only, and one for a position the API never
// issues is refused.
func FuzzPageToken(f *testing.F) {
	f.Add("fleets/arena", "fleets", "")
	f.Add("", "", "eyJhIjoieCIsInEiOiJ5In0")
	f.Add("fleets/a/gameServers/b", "state=READY", "not base64 !")
	f.Add("fleets/a\x00", "fleets", "eyJhIjoiXHUwMDAwIiwicSI6ImZsZWV0cyJ9") // {"a":"\u0000","q":"fleets"}
	f.Add("2026-11-01T00:00:00Z gameSessions/g-1", "", "")
	f.Fuzz(func(t *testing.T, after, query, token string) {
		got, err := decodePageToken(token, query)
		if err != nil && !isInvalidArgument(err) {
			t.Fatalf("token %q: %v is not INVALID_ARGUMENT", token, err)
		}
		if err == nil && !printableASCII(got) {
			t.Fatalf("token %q decodes to %q, which the views cannot be queried with", token, got)
		}
		if !utf8.ValidString(after) || !utf8.ValidString(query) {
			// JSON would replace the invalid bytes. Unreachable: positions
			// are resource names, and gRPC refuses strings that are not
			// UTF-8 (docs/fuzzing.md).
			return
		}
		issued := encodePageToken(after, query)
		got, err = decodePageToken(issued, query)
		if !printableASCII(after) {
			if err == nil {
				t.Fatalf("a token for position %q was accepted", after)
			}
			return
		}
		if err != nil || got != after {
			t.Fatalf("token for (%q, %q) decodes to (%q, %v)", after, query, got, err)
		}
		if _, err := decodePageToken(issued, query+"x"); err == nil {
			t.Fatalf("token for query %q accepted for %q", query, query+"x")
		}
	})
}

// printableASCII reports whether a page position is one the API issues:
// printable ASCII of at most maxPagePosition bytes.
func printableASCII(s string) bool {
	return len(s) <= maxPagePosition && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r > '~' })
}

// Any filter parses or is refused with an INVALID_ARGUMENT, never a panic.
func FuzzGameServerFilter(f *testing.F) {
	for _, s := range []string{"", "state=READY", "state=READY AND host=hosts/h1", `health="HEALTHY"`, "state=", "x=y", "state=READY AND state=READY"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, filter string) {
		gq, err := parseGameServerFilter(filter)
		if err != nil && !isInvalidArgument(err) {
			t.Fatalf("filter %q: %v is not INVALID_ARGUMENT", filter, err)
		}
		sq, serr := parseGameSessionFilter(filter)
		if serr != nil && !isInvalidArgument(serr) {
			t.Fatalf("game session filter %q: %v is not INVALID_ARGUMENT", filter, serr)
		}
		// What is accepted goes into SQL queries: names and state names.
		for _, v := range []string{gq.State, gq.Host, gq.Health, gq.Connection, sq.State, sq.GameServer, sq.Fleet} {
			if (err == nil || serr == nil) && !printableASCII(v) {
				t.Fatalf("filter %q accepted with the value %q", filter, v)
			}
		}
	})
}

// isInvalidArgument reports whether err is the API's INVALID_ARGUMENT.
func isInvalidArgument(err error) bool {
	var e *apiError
	return errors.As(err, &e) && e.code == codes.InvalidArgument
}
