package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"
)

// table writes rows of tab-separated cells; the first is the header.
type table func(w io.Writer)

// print writes one resource: its table row, or its protojson (REST shape)
// as indented JSON or as YAML.
func (a *app) print(msg proto.Message, t table) error {
	if a.output == formatTable {
		return a.printTable(t)
	}
	raw, err := protojson.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode %s: %w", msg.ProtoReflect().Descriptor().Name(), err)
	}
	return a.printJSON(raw)
}

// printList writes a list of resources as a table, or as the object
// {key: [...]} in JSON or YAML (the shape of a List response with every page
// read, so without nextPageToken; an empty list is [] rather than absent).
func printList[T proto.Message](a *app, key string, items []T, t table) error {
	if a.output == formatTable {
		return a.printTable(t)
	}
	list := make([]json.RawMessage, 0, len(items))
	for _, item := range items {
		raw, err := protojson.Marshal(item)
		if err != nil {
			return fmt.Errorf("encode %s: %w", key, err)
		}
		list = append(list, raw)
	}
	raw, err := marshalJSON(map[string][]json.RawMessage{key: list})
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return a.printJSON(raw)
}

// marshalJSON is json.Marshal without HTML escaping, so "->" and "<" in
// values stay readable.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// printJSON writes raw JSON indented, or converted to YAML. protojson
// varies its whitespace on purpose, so it is always re-indented.
func (a *app) printJSON(raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("indent JSON: %w", err)
	}
	out := buf.Bytes()
	if a.output == formatYAML {
		y, err := yaml.JSONToYAML(out)
		if err != nil {
			return fmt.Errorf("convert to YAML: %w", err)
		}
		out = y
	}
	if _, err := fmt.Fprintln(a.out, strings.TrimRight(string(out), "\n")); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

func (a *app) printTable(t table) error {
	w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	t(w)
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// row writes one table row of cells separated by tabs.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// age renders how long before now t was, kubectl style ("45s", "12m",
// "5h", "3d"), or "-" when t is unset.
func age(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	d := max(now.Sub(t.AsTime()), 0)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// orDash renders "" as "-", so table columns never collapse.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// enumName renders an enum value for a table: its name, or "-" for the
// zero value (unset, not yet known).
func enumName(e protoreflect.Enum) string {
	if e.Number() == 0 {
		return "-"
	}
	if v := e.Descriptor().Values().ByNumber(e.Number()); v != nil {
		return string(v.Name())
	}
	return fmt.Sprint(int32(e.Number()))
}
