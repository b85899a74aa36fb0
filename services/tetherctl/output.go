package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"
)

// render prints msg as JSON or YAML, or calls table for --output table.
func (c *cli) render(msg proto.Message, table func(w *tabwriter.Writer)) error {
	switch c.output {
	case "json", "yaml":
		raw, err := protojson.Marshal(msg)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		// protojson varies its whitespace on purpose; re-indent for stable output.
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		b := buf.Bytes()
		if c.output == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return fmt.Errorf("encode: %w", err)
			}
		}
		_, err = fmt.Fprintln(c.out, strings.TrimRight(string(b), "\n"))
		return err
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	table(w)
	return w.Flush()
}

// age renders how long ago t was, e.g. "3m12s", "-" when unset.
func age(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	d := time.Since(t.AsTime())
	switch {
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// orDash renders "" as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
