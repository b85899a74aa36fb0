package events

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A game server's annotations are data about it that, unlike its labels,
// no selector matches: what a game built for Agones sets with its SDK's
// SetAnnotation (keys prefixed agones.dev/sdk-), shown by the API, the
// console and the CLI. Every change is an AnnotationsChanged.

// Bounds of a game server's annotations.
const (
	// MaxAnnotations bounds the annotations of a server.
	MaxAnnotations = 64
	// MaxAnnotationKeyBytes bounds an annotation's key.
	MaxAnnotationKeyBytes = 253
	// MaxAnnotationValueBytes bounds an annotation's value: the
	// annotations a server can hold (at most 64 × 4 KiB) keep its view
	// row and its API resource well within what a read can carry.
	MaxAnnotationValueBytes = 4096
)

// SetAnnotations changes annotations.
type SetAnnotations struct {
	// Set holds annotations to add or change.
	Set map[string]string
	// Removed holds keys to remove.
	Removed []string
}

func (SetAnnotations) gameServerCommand() {}

// decideAnnotations decides a SetAnnotations.
func decideAnnotations(state *eventsv1.GameServerState, c SetAnnotations) ([]proto.Message, error) {
	if err := checkAnnotationChange(state.GetAnnotations(), c.Set, c.Removed); err != nil {
		return nil, err
	}
	after := changed(state.GetAnnotations(), c.Set, c.Removed)
	if maps.Equal(after, state.GetAnnotations()) { // a nil map equals an empty one
		return nil, nil // nothing changes
	}
	return []proto.Message{&eventsv1.AnnotationsChanged{Set: maps.Clone(c.Set), Removed: slices.Clone(c.Removed)}}, nil
}

// checkAnnotation refuses an annotation the views cannot hold: an empty
// or long key, a key with a space, a long value, and text that is not
// UTF-8 or holds a control character.
func checkAnnotation(k, v string) error {
	if k == "" || len(k) > MaxAnnotationKeyBytes || strings.ContainsAny(k, " \t\n") || !printable(k) {
		return fmt.Errorf("key %.70q must be 1-%d bytes of printable UTF-8 without spaces", k, MaxAnnotationKeyBytes)
	}
	if len(v) > MaxAnnotationValueBytes || !printable(v) {
		return fmt.Errorf("value of %.70q must be at most %d bytes of printable UTF-8 on one line", k, MaxAnnotationValueBytes)
	}
	return nil
}

// applyAnnotationsChanged folds an AnnotationsChanged into next.
func applyAnnotationsChanged(next *eventsv1.GameServerState, d *eventsv1.AnnotationsChanged) {
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	maps.Copy(next.Annotations, d.GetSet())
	for _, k := range d.GetRemoved() {
		delete(next.Annotations, k)
	}
}

// checkAllocationMetadata refuses the labels and annotations of an
// allocation that SetLabels and SetAnnotations would refuse on state.
func checkAllocationMetadata(state *eventsv1.GameServerState, labels, annotations map[string]string) error {
	if err := checkLabelChange(state.GetLabels(), labels, nil); err != nil {
		return err
	}
	return checkAnnotationChange(state.GetAnnotations(), annotations, nil)
}

// checkLabelChange refuses labels set that checkLabel refuses, or a change
// (set, then removed taken out) that leaves more than MaxLabels.
func checkLabelChange(labels, set map[string]string, removed []string) error {
	for k, v := range set {
		if err := checkLabel(k, v); err != nil {
			return Invalid("labels", "%v", err)
		}
	}
	if n := len(changed(labels, set, removed)); n > MaxLabels {
		return Invalid("labels", "a game server holds at most %d labels; these would make %d", MaxLabels, n)
	}
	return nil
}

// checkAnnotationChange is checkLabelChange for annotations.
func checkAnnotationChange(annotations, set map[string]string, removed []string) error {
	for k, v := range set {
		if err := checkAnnotation(k, v); err != nil {
			return Invalid("annotations", "%v", err)
		}
	}
	if n := len(changed(annotations, set, removed)); n > MaxAnnotations {
		return Invalid("annotations", "a game server holds at most %d annotations; these would make %d", MaxAnnotations, n)
	}
	return nil
}

// applyAllocationMetadata folds an allocation's labels and annotations into
// next: set, the server's others kept.
func applyAllocationMetadata(next *eventsv1.GameServerState, labels, annotations map[string]string) {
	if len(labels) > 0 {
		next.Labels = changed(next.GetLabels(), labels, nil)
	}
	if len(annotations) > 0 {
		next.Annotations = changed(next.GetAnnotations(), annotations, nil)
	}
}

// changed is a copy of base with set's entries set and removed's keys
// taken out.
func changed(base, set map[string]string, removed []string) map[string]string {
	out := make(map[string]string, len(base)+len(set))
	maps.Copy(out, base)
	maps.Copy(out, set)
	for _, k := range removed {
		delete(out, k)
	}
	return out
}
