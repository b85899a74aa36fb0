// Package openapi embeds the API's OpenAPI 3 document, served at
// /openapi.json. make generate writes it: protoc-gen-openapiv2 turns the
// API protos into tether.swagger.json (Swagger 2.0), and
// services/tools/openapi3 converts that into tether.openapi.json, with
// resource names spelt out as paths, the security scheme, the error
// answers and examples. redocly.yaml is its linter's configuration (make
// lint).
package openapi

import (
	_ "embed"
	"net/http"
)

//go:embed tether.openapi.json
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
