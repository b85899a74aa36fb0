package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A label the views cannot hold is refused, on a fleet and from a game
// server's SDK alike: the views keep labels as PostgreSQL jsonb, which
// cannot hold a NUL byte, so such a label stopped the projector on its
// event. Control characters and text that is not UTF-8 are refused with
// it; any printable text within the limits is taken.
func TestLabelsTheViewsCannotHoldAreRefused(t *testing.T) {
	ready := &eventsv1.GameServerState{Name: "fleets/arena/gameServers/gs-1", Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY}
	for _, tc := range []struct {
		name, key, value string
		ok               bool
	}{
		{"ordinary", "mode", "ranked", true},
		{"UTF-8", "région", "Île-de-France", true},
		{"longest key and value", strings.Repeat("k", events.MaxLabelKeyBytes), strings.Repeat("v", events.MaxLabelValueBytes), true},
		{"empty value", "mode", "", true},
		{"NUL in the value", "mode", "ranked\x00", false},
		{"NUL in the key", "mo\x00de", "ranked", false},
		{"escape sequence", "mode", "\x1b[31mranked", false},
		{"new line", "mode", "a\nb", false},
		{"DEL", "mode", "a\x7f", false},
		{"C1 control", "mode", "a\u0085", false},
		{"not UTF-8", "mode", "a\xff", false},
		{"key not UTF-8", "mo\xffde", "a", false},
		{"key too long", strings.Repeat("k", events.MaxLabelKeyBytes+1), "v", false},
		{"value too long", "mode", strings.Repeat("v", events.MaxLabelValueBytes+1), false},
		{"key with '='", "a=b", "v", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}, Labels: map[string]string{tc.key: tc.value}}
			events.NormalizeFleetSpec(spec)
			_, sdkErr := events.DecideGameServer(ready.GetName(), ready, events.SetLabels{Set: map[string]string{tc.key: tc.value}})
			for what, err := range map[string]error{"fleet": events.ValidateFleetSpec(spec), "SDK": sdkErr} {
				var ve *events.ValidationError
				switch {
				case tc.ok && err != nil:
					t.Errorf("%s: refused: %v", what, err)
				case !tc.ok && !errors.As(err, &ve):
					t.Errorf("%s: got %v, want a ValidationError", what, err)
				}
			}
		})
	}
}
