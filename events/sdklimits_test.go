package events_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A game server's labels and a self-allocation's properties are bounded
// whoever sets them: the SDK's SetLabel and Allocate go through the same
// decisions as the API.
func TestLabelsAndPropertiesAreBoundedForTheSDKToo(t *testing.T) {
	const gs = "fleets/f/gameServers/gs-1"
	state := &eventsv1.GameServerState{Name: gs, Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY, Labels: map[string]string{}}
	for i := range events.MaxLabels {
		state.Labels[fmt.Sprintf("k%d", i)] = "v"
	}
	invalid := func(err error) bool {
		var ve *events.ValidationError
		return errors.As(err, &ve)
	}
	if _, err := events.DecideGameServer(gs, state, events.SetLabels{Set: map[string]string{"one-more": "v"}}); !invalid(err) {
		t.Errorf("a label past %d: %v, want a validation error", events.MaxLabels, err)
	}
	if _, err := events.DecideGameServer(gs, state, events.SetLabels{Set: map[string]string{"k0": "changed"}}); err != nil {
		t.Errorf("changing a label at the bound: %v", err)
	}
	if _, err := events.DecideGameServer(gs, state, events.SetLabels{Set: map[string]string{"new": "v"}, Removed: []string{"k1"}}); err != nil {
		t.Errorf("one in, one out at the bound: %v", err)
	}
	props := map[string]string{}
	for i := range events.MaxProperties + 1 {
		props[fmt.Sprintf("p%d", i)] = "v"
	}
	for name, p := range map[string]map[string]string{
		"too many properties": props,
		"a value too long":    {"map": strings.Repeat("x", events.MaxPropertyValueBytes+1)},
		"a key too long":      {strings.Repeat("k", events.MaxPropertyKeyBytes+1): "v"},
	} {
		alloc := &eventsv1.GameServerAllocated{GameSession: "gameSessions/g-1", Properties: p, SelfAllocated: true}
		if _, err := events.DecideGameServer(gs, state, events.Allocate{Allocated: alloc}); !invalid(err) {
			t.Errorf("%s: %v, want a validation error", name, err)
		}
	}
	ok := &eventsv1.GameServerAllocated{GameSession: "gameSessions/g-1", Properties: map[string]string{"map": "dust"}, SelfAllocated: true}
	if _, err := events.DecideGameServer(gs, state, events.Allocate{Allocated: ok}); err != nil {
		t.Errorf("a self-allocation within the bounds: %v", err)
	}
}
