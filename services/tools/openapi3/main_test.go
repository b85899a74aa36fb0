package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

// The document the API serves, converted from the generated Swagger one:
// OpenAPI 3, a real title and version, every path parameter a name of its
// own (no name_1 … name_4), the bearer scheme on every call, the error
// answers, and the same bytes from the same input.
func TestConvert(t *testing.T) {
	swagger, err := os.ReadFile("../../apiserver/openapi/tether.swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Convert(swagger)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Convert(swagger)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, again) {
		t.Fatal("two conversions of the same document differ")
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct{ Title, Version string }
		Paths   map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Parameters  []struct{ Name, In string }
			Responses   map[string]any
		}
		Security   []map[string][]string
		Components struct {
			SecuritySchemes map[string]struct{ Type, Scheme string } `json:"securitySchemes"`
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.0.3" || doc.Info.Title != Title || doc.Info.Version != Version {
		t.Errorf("openapi %q, title %q, version %q", doc.OpenAPI, doc.Info.Title, doc.Info.Version)
	}
	if s := doc.Components.SecuritySchemes["bearer"]; s.Type != "http" || s.Scheme != "bearer" || len(doc.Security) != 1 {
		t.Errorf("security schemes %v, security %v", doc.Components.SecuritySchemes, doc.Security)
	}
	numbered := regexp.MustCompile(`_\d+$`)
	ids := map[string]string{}
	for path, item := range doc.Paths {
		inPath := map[string]bool{}
		for _, m := range paramInPath.FindAllStringSubmatch(path, -1) {
			if inPath[m[1]] || numbered.MatchString(m[1]) || m[1] == "name" || m[1] == "parent" {
				t.Errorf("%s: parameter %q", path, m[1])
			}
			inPath[m[1]] = true
		}
		for method, op := range item {
			if other, dup := ids[op.OperationID]; dup {
				t.Errorf("operation id %s on %s and %s %s", op.OperationID, other, method, path)
			}
			ids[op.OperationID] = method + " " + path
			declared := 0
			for _, p := range op.Parameters {
				if p.In == "path" {
					declared++
					if !inPath[p.Name] {
						t.Errorf("%s %s declares path parameter %q it does not have", method, path, p.Name)
					}
				}
			}
			if declared != len(inPath) {
				t.Errorf("%s %s: %d path parameters declared, %d in the path", method, path, declared, len(inPath))
			}
			for _, code := range []string{"200", "400", "401", "403", "404", "429", "503"} {
				if op.Responses[code] == nil {
					t.Errorf("%s %s answers no %s", method, path, code)
				}
			}
		}
	}
	if len(ids) < 40 {
		t.Errorf("%d operations: the conversion lost some", len(ids))
	}
}
