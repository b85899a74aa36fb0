package apiserver

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// The converters cast enums by number between the API and the events; this
// checks every pair names the same thing.
func TestEnumsMatchByNumber(t *testing.T) {
	for _, tc := range []struct {
		name        string
		api, events protoreflect.EnumDescriptor
		eventPrefix string
	}{
		{"lifecycle", tetherv1.GameServer_STATE_UNSPECIFIED.Descriptor(), eventsv1.Lifecycle_LIFECYCLE_UNSPECIFIED.Descriptor(), "LIFECYCLE_"},
		{"connection", tetherv1.ConnectionStatus_STATE_UNSPECIFIED.Descriptor(), eventsv1.ConnectionState_CONNECTION_STATE_UNSPECIFIED.Descriptor(), "CONNECTION_STATE_"},
		{"health", tetherv1.HealthStatus_STATE_UNSPECIFIED.Descriptor(), eventsv1.HealthState_HEALTH_STATE_UNSPECIFIED.Descriptor(), "HEALTH_STATE_"},
		{"scheduling", tetherv1.Fleet_SCHEDULING_UNSPECIFIED.Descriptor(), eventsv1.Scheduling_SCHEDULING_UNSPECIFIED.Descriptor(), "SCHEDULING_"},
		{"host", tetherv1.Host_STATE_UNSPECIFIED.Descriptor(), eventsv1.HostStatus_HOST_STATUS_UNSPECIFIED.Descriptor(), "HOST_STATUS_"},
		{"protocol", tetherv1.PortSpec_PROTOCOL_UNSPECIFIED.Descriptor(), eventsv1.Protocol_PROTOCOL_UNSPECIFIED.Descriptor(), "PROTOCOL_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			av, ev := tc.api.Values(), tc.events.Values()
			if av.Len() != ev.Len() {
				t.Fatalf("%d API values, %d event values", av.Len(), ev.Len())
			}
			for i := range av.Len() {
				a := av.Get(i)
				e := ev.ByNumber(a.Number())
				if e == nil {
					t.Fatalf("API %s (%d) has no event value", a.Name(), a.Number())
				}
				en := strings.TrimPrefix(string(e.Name()), tc.eventPrefix)
				if a.Number() == 0 {
					continue // both *_UNSPECIFIED
				}
				if string(a.Name()) != en {
					t.Errorf("number %d: API %s, events %s", a.Number(), a.Name(), e.Name())
				}
			}
		})
	}
}
