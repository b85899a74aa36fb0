// Package openapi embeds the OpenAPI (Swagger 2.0) document generated from
// the API protos by protoc-gen-openapiv2.
package openapi

import (
	_ "embed"
	"net/http"
)

//go:embed tether.swagger.json
var document []byte

// Document returns the OpenAPI document.
func Document() []byte { return document }

// Handler serves the document as JSON.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(document) // A failed write means the client went away.
	})
}
