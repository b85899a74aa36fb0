package apiserver

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Event data, a server's state at a time and evidence spell enum values as
// the API does: READY, not LIFECYCLE_READY; in nested messages and lists
// too.
func TestEventEnumsAreSpeltAsTheAPIs(t *testing.T) {
	for _, tc := range []struct {
		msg  proto.Message
		path []string // to the enum value, list indexes as "0"
		want string
	}{
		{&eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED}, []string{"reason"}, "HEALTH_CHECK_FAILED"},
		{&eventsv1.GameServerState{Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY}, []string{"lifecycle"}, "READY"},
		{&eventsv1.GameServerState{Connection: eventsv1.ConnectionState_CONNECTION_STATE_DISCONNECTED}, []string{"connection"}, "DISCONNECTED"},
		{&eventsv1.GameServerState{Ports: []*eventsv1.Port{{Name: "game", Protocol: eventsv1.Protocol_PROTOCOL_UDP}}}, []string{"ports", "0", "protocol"}, "UDP"},
		{&eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Scheduling: eventsv1.Scheduling_SCHEDULING_DISTRIBUTED}}, []string{"spec", "scheduling"}, "DISTRIBUTED"},
	} {
		s, err := toStruct(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		if got := lookup(s, tc.path); got != tc.want {
			t.Errorf("%T %s: %q, want %q (JSON %v)", tc.msg, strings.Join(tc.path, "."), got, tc.want, s)
		}
	}
}

// Every enum value of every event type loses exactly its enum's prefix,
// so no two values of an enum share a name once renamed.
func TestEveryEventEnumValueHasItsPrefixRemoved(t *testing.T) {
	n := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("tether.events.v1", func(fd protoreflect.FileDescriptor) bool {
		enums := fd.Enums()
		for i := range enums.Len() {
			e := enums.Get(i)
			prefix := upperSnake(string(e.Name())) + "_"
			seen := map[string]bool{}
			values := e.Values()
			for j := range values.Len() {
				v := values.Get(j)
				got := enumName(v)
				if !strings.HasPrefix(string(v.Name()), prefix) || got == string(v.Name()) || got == "" {
					t.Errorf("%s: %s renamed %q: it does not carry the prefix %s", e.FullName(), v.Name(), got, prefix)
				}
				if seen[got] {
					t.Errorf("%s: two values named %q", e.FullName(), got)
				}
				seen[got] = true
				n++
			}
		}
		return true
	})
	if n == 0 {
		t.Fatal("no event enum found")
	}
}

// lookup follows path through s's objects and lists to a string.
func lookup(s *structpb.Struct, path []string) string {
	v := structpb.NewStructValue(s)
	for _, p := range path {
		if l := v.GetListValue(); l != nil {
			i := int(p[0] - '0')
			if i >= len(l.GetValues()) {
				return ""
			}
			v = l.GetValues()[i]
			continue
		}
		v = v.GetStructValue().GetFields()[p]
		if v == nil {
			return ""
		}
	}
	return v.GetStringValue()
}
