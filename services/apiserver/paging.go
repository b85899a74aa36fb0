package apiserver

import (
	"encoding/base64"
	"encoding/json"
)

// Page sizes of List methods.
const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

// pageBytes bounds the encoded size of a list page: a page also ends
// early (with a next page token) once its items reach it, so that a few
// large specs (templates near the event size limit) never make a page
// larger than clients take (gRPC's 4 MiB by default). A page holds at
// least one item.
const pageBytes = 2 << 20

// full reports whether a page already holding size bytes of items, and n
// of them, is full.
func full(n, size int) bool { return n > 0 && size >= pageBytes }

func pageSize(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, invalidField("page_size", "must not be negative")
	case n == 0:
		return defaultPageSize, nil
	case n > maxPageSize:
		return maxPageSize, nil
	}
	return int(n), nil
}

// pageToken is the opaque token's content: where to resume, and a key of
// the query so a token cannot be used with another filter or parent.
type pageToken struct {
	After string `json:"a"`
	Query string `json:"q"`
}

func encodePageToken(after, query string) string {
	b, _ := json.Marshal(pageToken{After: after, Query: query}) // Marshalling two strings cannot fail.
	return base64.RawURLEncoding.EncodeToString(b)
}

// maxPagePosition bounds a page token's position. Positions are resource
// names, stream sequences, or a time and a name: under 200 bytes.
const maxPagePosition = 1 << 10

// decodePageToken returns the position of a token encodePageToken made
// for the same query ("" for no token), or INVALID_ARGUMENT. A position
// is printable ASCII, as every position the API issues is: the views are
// queried with it, and PostgreSQL refuses a NUL byte (an internal error).
func decodePageToken(token, query string) (string, error) {
	if token == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	var t pageToken
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || !validPosition(t.After) {
		return "", invalidField("page_token", "is not a token this API returned")
	}
	if t.Query != query {
		return "", invalidField("page_token", "was issued for another query; start again without it")
	}
	return t.After, nil
}

// validPosition reports whether a page position is one the API could have
// issued: printable ASCII, at most maxPagePosition bytes.
func validPosition(after string) bool {
	if len(after) > maxPagePosition {
		return false
	}
	for i := range len(after) {
		if c := after[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
