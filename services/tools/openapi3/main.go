// Command openapi3 turns the Swagger 2.0 document protoc-gen-openapiv2
// generates from the API protos into the OpenAPI 3 document the API
// serves at /openapi.json (make generate runs it):
//
//   - a real title and version, the servers tether dev listens on;
//   - resource names spelt out as paths: /v1/{name_1} with a pattern
//     fleets/[^/]+/gameServers/[^/]+ becomes
//     /v1/fleets/{fleet}/gameServers/{gameServer}, so every path parameter
//     has a name of its own (a name any resource may take, as in :explain,
//     becomes one path per kind of resource);
//   - the bearer-token security scheme every call but the health checks
//     needs, and the error answers (400, 401, 403, 404, 409, 429, 503)
//     with the google.rpc.Status body;
//   - examples of the calls a studio makes first.
//
// The output is deterministic: the same input gives the same bytes.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

func main() {
	in := flag.String("in", "services/apiserver/openapi/tether.swagger.json", "the Swagger 2.0 document")
	out := flag.String("out", "services/apiserver/openapi/tether.openapi.json", "the OpenAPI 3 document to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "openapi3:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	raw, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	doc, err := Convert(raw)
	if err != nil {
		return err
	}
	return os.WriteFile(out, doc, 0o644)
}

// Title, Version and Description head the document.
const (
	Title       = "Tether control-plane API"
	Version     = "v1"
	Description = `Tether runs dedicated game-server fleets: fleets, game servers, allocation,
game and player sessions, hosts, and the history of every decision. Every
method is served over gRPC and as REST/JSON (this document); the JSON
shapes are the public contract, so enum values carry no type prefix.

Calls carry an API key or an OpenID Connect token: Authorization: Bearer
<token>. A key's role (admin, operator, matchmaker, viewer, auditor)
decides what it may call (docs/security.md). Errors answer with a
google.rpc.Status body whose details carry a machine-readable reason.`
)

// Convert turns a Swagger 2.0 document into Tether's OpenAPI 3 one.
func Convert(swagger []byte) ([]byte, error) {
	var v2 openapi2.T
	if err := json.Unmarshal(swagger, &v2); err != nil {
		return nil, fmt.Errorf("read the Swagger document: %w", err)
	}
	doc, err := openapi2conv.ToV3(&v2)
	if err != nil {
		return nil, fmt.Errorf("convert to OpenAPI 3: %w", err)
	}
	doc.Info = &openapi3.Info{Title: Title, Version: Version, Description: Description,
		License: &openapi3.License{Name: "Apache-2.0", URL: "https://www.apache.org/licenses/LICENSE-2.0"}}
	doc.Servers = openapi3.Servers{{URL: "http://127.0.0.1:7080", Description: "tether dev, and tether apiserver's default address"}}
	if err := spellOutNames(doc); err != nil {
		return nil, err
	}
	addSecurity(doc)
	addErrors(doc)
	addExamples(doc)
	if err := dropUnusedSchemas(doc); err != nil {
		return nil, err
	}
	if err := doc.Validate(openapi3.NewLoader().Context); err != nil {
		return nil, fmt.Errorf("the converted document is not valid OpenAPI 3: %w", err)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// resourcePatterns are what a parameter matching any resource name (.+)
// stands for: one path per kind.
var resourcePatterns = []string{
	"fleets/[^/]+",
	"fleets/[^/]+/gameServers/[^/]+",
	"hosts/[^/]+",
	"gameSessions/[^/]+",
	"gameSessions/[^/]+/playerSessions/[^/]+",
}

// paramInPath finds the {param} segments of a path.
var paramInPath = regexp.MustCompile(`\{([^}]+)\}`)

// spellOutNames replaces every path parameter that holds a resource name
// (it has a pattern with slashes) by the name's segments, each id a
// parameter named after its collection.
func spellOutNames(doc *openapi3.T) error {
	paths := openapi3.NewPaths()
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			expanded, err := expand(path, op)
			if err != nil {
				return fmt.Errorf("%s %s: %w", method, path, err)
			}
			for i, e := range expanded {
				target := paths.Value(e.path)
				if target == nil {
					target = &openapi3.PathItem{}
					paths.Set(e.path, target)
				}
				if len(expanded) > 1 {
					e.op.OperationID = fmt.Sprintf("%s_%s", op.OperationID, kindOf(resourcePatterns[i]))
				}
				if target.GetOperation(method) != nil {
					return fmt.Errorf("%s %s: two operations", method, e.path)
				}
				target.SetOperation(method, e.op)
			}
		}
	}
	doc.Paths = paths
	return nil
}

type expandedOp struct {
	path string
	op   *openapi3.Operation
}

// expand spells out the resource-name parameters of one operation.
func expand(path string, op *openapi3.Operation) ([]expandedOp, error) {
	out := []expandedOp{{path: path, op: op}}
	for _, m := range paramInPath.FindAllStringSubmatch(path, -1) {
		name := m[1]
		p := op.Parameters.GetByInAndName("path", name)
		if p == nil || p.Schema == nil || p.Schema.Value == nil {
			return nil, fmt.Errorf("path parameter %s undeclared", name)
		}
		pattern := p.Schema.Value.Pattern
		if pattern == "" || !strings.Contains(pattern, "/") && pattern != ".+" {
			continue // a plain value (a sequence number): stays as it is
		}
		patterns := []string{pattern}
		if pattern == ".+" {
			patterns = resourcePatterns
		}
		var next []expandedOp
		for _, e := range out {
			for _, pat := range patterns {
				segments, params, err := segmentsOf(pat)
				if err != nil {
					return nil, err
				}
				op2 := cloneOp(e.op)
				var kept openapi3.Parameters
				for _, q := range op2.Parameters {
					if q.Value.In != "path" || q.Value.Name != name {
						kept = append(kept, q)
					}
				}
				op2.Parameters = append(params, kept...)
				next = append(next, expandedOp{path: strings.Replace(e.path, "{"+name+"}", segments, 1), op: op2})
			}
		}
		out = next
	}
	return out, nil
}

// segmentsOf turns fleets/[^/]+/gameServers/[^/]+ into
// fleets/{fleet}/gameServers/{gameServer} and its two parameters.
func segmentsOf(pattern string) (string, openapi3.Parameters, error) {
	parts := strings.Split(strings.ReplaceAll(pattern, "[^/]+", "*"), "/")
	if len(parts)%2 != 0 {
		return "", nil, fmt.Errorf("resource pattern %q is not collection/id pairs", pattern)
	}
	var segs []string
	var params openapi3.Parameters
	for i := 0; i < len(parts); i += 2 {
		collection, id := parts[i], parts[i+1]
		if id != "*" || strings.ContainsAny(collection, "[]^+*.") {
			return "", nil, fmt.Errorf("resource pattern %q is not collection/id pairs", pattern)
		}
		single := strings.TrimSuffix(collection, "s")
		segs = append(segs, collection, "{"+single+"}")
		params = append(params, &openapi3.ParameterRef{Value: &openapi3.Parameter{
			Name: single, In: "path", Required: true,
			Description: fmt.Sprintf("The %s's id: the last part of its resource name (%s/{%s}).", words(single), collection, single),
			Schema:      openapi3.NewStringSchema().WithPattern("^[^/]+$").NewRef(),
		}})
	}
	return strings.Join(segs, "/"), params, nil
}

// kindOf names the resource a pattern stands for: its last collection.
func kindOf(pattern string) string {
	parts := strings.Split(strings.ReplaceAll(pattern, "[^/]+", "*"), "/")
	return strings.TrimSuffix(parts[len(parts)-2], "s")
}

// words spells a camelCase name in words: gameServer is game server.
func words(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// cloneOp copies an operation deeply enough to change its parameters and
// id: its parameter list is new, the rest shared (never changed).
func cloneOp(op *openapi3.Operation) *openapi3.Operation {
	c := *op
	c.Parameters = slices.Clone(op.Parameters)
	return &c
}

// addSecurity declares the bearer token every call needs.
func addSecurity(doc *openapi3.T) {
	if doc.Components == nil {
		doc.Components = &openapi3.Components{}
	}
	doc.Components.SecuritySchemes = openapi3.SecuritySchemes{
		"bearer": &openapi3.SecuritySchemeRef{Value: &openapi3.SecurityScheme{
			Type: "http", Scheme: "bearer",
			Description: "An API key from the keys file (tether dev writes one per role into <data-dir>/keys), or an OpenID Connect token of the studio's identity provider. Under mutual TLS a client certificate the keys file names authenticates instead.",
		}},
	}
	doc.Security = openapi3.SecurityRequirements{{"bearer": []string{}}}
}

// errorAnswers are the error statuses every operation may answer, and
// when.
var errorAnswers = map[string]string{
	"400": "The request is invalid: a field is missing, malformed or out of range (details name it).",
	"401": "No credentials, or credentials that are wrong or expired.",
	"403": "The caller's role may not make this call.",
	"404": "The resource does not exist.",
	"409": "The resource changed meanwhile, or already exists.",
	"429": "Too many calls from this caller, or no game server to allocate (RESOURCE_EXHAUSTED).",
	"503": "The event store or the views are unavailable for now: retry.",
}

// addErrors documents the error answers with the google.rpc.Status body.
func addErrors(doc *openapi3.T) {
	if doc.Components.Responses == nil {
		doc.Components.Responses = openapi3.ResponseBodies{}
	}
	var status *openapi3.Schema
	if ref := doc.Components.Schemas["rpcStatus"]; ref != nil {
		status = ref.Value
	}
	codes := make([]string, 0, len(errorAnswers))
	for code := range errorAnswers {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	for _, code := range codes {
		doc.Components.Responses["Error"+code] = &openapi3.ResponseRef{Value: openapi3.NewResponse().
			WithDescription(errorAnswers[code]).
			WithJSONSchemaRef(openapi3.NewSchemaRef("#/components/schemas/rpcStatus", status))}
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		for _, op := range doc.Paths.Value(path).Operations() {
			for _, code := range codes {
				if op.Responses.Value(code) == nil {
					op.Responses.Set(code, &openapi3.ResponseRef{Ref: "#/components/responses/Error" + code, Value: doc.Components.Responses["Error"+code].Value})
				}
			}
		}
	}
}

// examples are request bodies of the first calls a studio makes, by
// operation id.
var examples = map[string]any{
	"FleetService_CreateFleet": map[string]any{
		"replicas": 3,
		"template": map[string]any{
			"command": "/opt/arena/server",
			"args":    []string{"--map", "harbor"},
			"ports":   []any{map[string]any{"name": "game", "protocol": "UDP"}},
		},
		"health":     map[string]any{"periodSeconds": 5, "failureThreshold": 3},
		"scheduling": "PACKED",
	},
	"AllocationService_AllocateGameServer": map[string]any{
		"requestId":   "match-7f3a9c",
		"players":     []any{map[string]any{"playerId": "p-1001"}, map[string]any{"playerId": "p-1002"}},
		"gameSession": map[string]any{"maxPlayers": 10, "properties": map[string]any{"mode": "ranked"}},
		"selector":    map[string]any{"matchLabels": map[string]any{"zone": "eu-west-1a"}},
	},
	"GameServerService_ShutdownGameServer": map[string]any{"requestId": "ops-shutdown-1"},
	"HostService_DrainHost":                map[string]any{},
}

// addExamples puts the examples on their operations' request bodies.
func addExamples(doc *openapi3.T) {
	for _, path := range doc.Paths.InMatchingOrder() {
		for _, op := range doc.Paths.Value(path).Operations() {
			ex, ok := examples[op.OperationID]
			if !ok || op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil {
				mt.Example = ex
			}
		}
	}
}

// schemaRef finds the schemas a JSON document refers to.
var schemaRef = regexp.MustCompile(`"#/components/schemas/([^"]+)"`)

// dropUnusedSchemas removes the schemas nothing refers to (the generator
// emits some for well-known types no message uses), until none is left.
func dropUnusedSchemas(doc *openapi3.T) error {
	for {
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		used := map[string]int{}
		for _, m := range schemaRef.FindAllSubmatch(b, -1) {
			used[string(m[1])]++
		}
		dropped := false
		for name := range doc.Components.Schemas {
			// A schema's own definition holds no ref to itself, unless it
			// is recursive: then it counts as used only from elsewhere too.
			if used[name] == 0 {
				delete(doc.Components.Schemas, name)
				dropped = true
			}
		}
		if !dropped {
			return nil
		}
	}
}
