package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"sigs.k8s.io/yaml"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// stdinPath is the -f value that reads standard input.
const stdinPath = "-"

// fleetFile is a decoded fleet file.
type fleetFile struct {
	// id is the fleet id from the file's name field ("" when absent).
	id string
	// fleet is the fleet to create, without name and output-only fields.
	fleet *tetherv1.Fleet
	// fields are the file's top-level spec fields, as update-mask paths
	// (snake_case), output-only ones left out.
	fields []string
}

// readFleetFile reads a fleet in the REST shape (docs/architecture.md, "The
// REST contract"), as YAML or JSON, from path or, for "-", from stdin.
func readFleetFile(path string, stdin io.Reader) (fleetFile, error) {
	var (
		raw  []byte
		err  error
		what = path
	)
	if path == stdinPath {
		what = "stdin"
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return fleetFile{}, fmt.Errorf("read fleet file: %w", err)
	}
	ff, err := parseFleet(raw)
	if err != nil {
		return fleetFile{}, fmt.Errorf("%s: %w", what, err)
	}
	return ff, nil
}

// parseFleet decodes a fleet file's content. Unknown fields are refused
// with their path (e.g. "template.ports[0].number"); output-only fields
// (status, etag, sequence, times) are ignored, so the output of
// "fleets get -o yaml" can be fed back.
func parseFleet(raw []byte) (fleetFile, error) {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return fleetFile{}, fmt.Errorf("neither YAML nor JSON: %w", err)
	}
	var doc any
	if err := json.Unmarshal(js, &doc); err != nil {
		return fleetFile{}, fmt.Errorf("decode: %w", err)
	}
	if doc == nil {
		return fleetFile{}, errors.New("the file is empty")
	}
	if _, ok := doc.(map[string]any); !ok {
		return fleetFile{}, fmt.Errorf("want a fleet object (replicas, template, ...), got %s", jsonKind(doc))
	}
	fleet := &tetherv1.Fleet{}
	if err := checkFields(doc, fleet.ProtoReflect().Descriptor(), ""); err != nil {
		return fleetFile{}, err
	}
	if err := protojson.Unmarshal(js, fleet); err != nil {
		return fleetFile{}, &protojsonError{err: err}
	}
	ff := fleetFile{id: fleetID(fleet.GetName())}
	md := fleet.ProtoReflect().Descriptor()
	for key := range doc.(map[string]any) {
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(key))
		}
		switch name := string(fd.Name()); name {
		case "name", "status", "etag", "sequence", "create_time", "update_time", "delete_time", "revision":
		default:
			ff.fields = append(ff.fields, name)
		}
	}
	slices.Sort(ff.fields)
	fleet.Name = ""
	fleet.Status, fleet.Etag, fleet.Sequence = nil, "", 0
	fleet.CreateTime, fleet.UpdateTime, fleet.DeleteTime = nil, nil, nil
	ff.fleet = fleet
	return ff, nil
}

// checkFields walks a decoded JSON value against a message descriptor and
// refuses the first unknown field, naming its path and the fields allowed
// there. Field names may be lowerCamelCase or snake_case, like protojson.
// Types are left to protojson.
func checkFields(v any, md protoreflect.MessageDescriptor, path string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(key))
		}
		if fd == nil {
			return unknownField(md, path, key)
		}
		val := obj[key]
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				continue
			}
			if m, ok := val.(map[string]any); ok {
				for k, mv := range m {
					if err := checkFields(mv, fd.MapValue().Message(), fmt.Sprintf("%s%s[%q].", path, key, k)); err != nil {
						return err
					}
				}
			}
		case fd.Kind() != protoreflect.MessageKind || wellKnown(fd.Message()):
		case fd.IsList():
			if list, ok := val.([]any); ok {
				for i, item := range list {
					if err := checkFields(item, fd.Message(), fmt.Sprintf("%s%s[%d].", path, key, i)); err != nil {
						return err
					}
				}
			}
		default:
			if err := checkFields(val, fd.Message(), path+key+"."); err != nil {
				return err
			}
		}
	}
	return nil
}

// wellKnown reports google.protobuf types, which have their own JSON forms.
func wellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

// unknownField builds the error for key at path, with a suggestion when a
// known field is spelled alike.
func unknownField(md protoreflect.MessageDescriptor, path, key string) error {
	var known []string
	suggestion := ""
	best := 3 // suggest only close spellings
	for i := range md.Fields().Len() {
		name := md.Fields().Get(i).JSONName()
		known = append(known, name)
		if d := editDistance(strings.ToLower(key), strings.ToLower(name)); d < best {
			best, suggestion = d, name
		}
	}
	where := "at the top level"
	if path != "" {
		where = "in " + strings.TrimSuffix(path, ".")
	}
	msg := fmt.Sprintf("unknown field %q %s", path+key, where)
	if suggestion != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", suggestion)
	}
	return fmt.Errorf("%s; known fields there: %s", msg, strings.Join(known, ", "))
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// protojsonPrefix matches what protojson puts before its messages: a
// package tag (with a space that is sometimes non-breaking, on purpose) and
// a position in the converted JSON, which means nothing to the file's author.
var protojsonPrefix = regexp.MustCompile(`^proto:[\s\x{00a0}]*(\(line \d+:\d+\):[\s\x{00a0}]*)?`)

// protojsonError is a protojson error without that prefix.
type protojsonError struct{ err error }

// Error returns protojson's message without its prefix.
func (e *protojsonError) Error() string {
	return string(bytes.TrimSpace(protojsonPrefix.ReplaceAll([]byte(e.err.Error()), nil)))
}

// Unwrap returns protojson's error.
func (e *protojsonError) Unwrap() error { return e.err }
