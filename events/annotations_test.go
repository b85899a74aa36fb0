package events_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/events"
)

// SetAnnotations sets and removes annotations as one AnnotationsChanged,
// refuses what the views cannot hold, and changes nothing (no event)
// when the annotations would stay as they are.
func TestSetAnnotations(t *testing.T) {
	g := newServer(t, READY)
	out := g.decide(events.SetAnnotations{Set: map[string]string{"agones.dev/sdk-map": "dust", "note": "x"}})
	if !slices.Equal(types(out), []string{"AnnotationsChanged"}) {
		t.Fatalf("events %v", types(out))
	}
	out = g.decide(events.SetAnnotations{Set: map[string]string{"agones.dev/sdk-map": "inferno"}, Removed: []string{"note"}})
	if !slices.Equal(types(out), []string{"AnnotationsChanged"}) || !maps.Equal(g.state.GetAnnotations(), map[string]string{"agones.dev/sdk-map": "inferno"}) {
		t.Fatalf("events %v, annotations %v", types(out), g.state.GetAnnotations())
	}
	if out := g.decide(events.SetAnnotations{Set: map[string]string{"agones.dev/sdk-map": "inferno"}}); len(out) != 0 {
		t.Errorf("an annotation set to its value: events %v, want none", types(out))
	}
	if g.state.GetLabels()["agones.dev/sdk-map"] != "" {
		t.Errorf("an annotation became a label: %v", g.state.GetLabels())
	}

	for name, cmd := range map[string]events.SetAnnotations{
		"empty key":         {Set: map[string]string{"": "v"}},
		"key with a space":  {Set: map[string]string{"a b": "v"}},
		"key too long":      {Set: map[string]string{strings.Repeat("k", events.MaxAnnotationKeyBytes+1): "v"}},
		"value too long":    {Set: map[string]string{"k": strings.Repeat("v", events.MaxAnnotationValueBytes+1)}},
		"control character": {Set: map[string]string{"k": "a\x00b"}},
		"too many of them":  {Set: manyAnnotations(events.MaxAnnotations)},
	} {
		_, err := g.try(cmd)
		if ve := asValidationError(t, err); ve.Field != "annotations" {
			t.Errorf("%s: field %q, want annotations", name, ve.Field)
		}
	}
}

// manyAnnotations is n annotations, k0 to k(n-1).
func manyAnnotations(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m["k"+strings.Repeat("0", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	return m
}
