// Package httpinput checks what a REST request carries outside its body
// before a gRPC gateway sees it: the gateway turns path and query text into
// protobuf strings, which must be valid UTF-8, and a request that is not
// failed inside the gateway as an internal error (500) instead of a bad
// request (400).
package httpinput

import (
	"net/http"
	"net/url"
	"unicode/utf8"
)

// InvalidUTF8 names the part of r (its path, or a query parameter) that is
// not valid UTF-8 once decoded, "" when every part is.
func InvalidUTF8(r *http.Request) string {
	if !utf8.ValidString(r.URL.Path) {
		return "the path"
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "the query"
	}
	for k, vs := range q {
		if !utf8.ValidString(k) {
			return "a query parameter's name"
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return "query parameter " + k
			}
		}
	}
	return ""
}
