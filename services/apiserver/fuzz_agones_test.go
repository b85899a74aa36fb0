package apiserver

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tetherhq/tether/events"
	agonesallocation "github.com/tetherhq/tether/proto/allocation"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Any body of Agones' REST allocation (POST /gameserverallocation, decoded
// as the gateway decodes it) is refused with INVALID_ARGUMENT and a field,
// or UNIMPLEMENTED for a player selector, or becomes Tether allocation
// requests that parseAllocation takes; and whatever their counter and
// list actions, deciding them on a server with rooms never leaves a count
// or a list past its capacity.
func FuzzAgonesAllocationJSON(f *testing.F) {
	for _, body := range []string{
		`{"namespace":"default","gameServerSelectors":[{"matchLabels":{"agones.dev/fleet":"lobby"}}],"metadata":{"labels":{"match":"m-1"}}}`,
		`{"gameServerSelectors":[{"matchLabels":{"agones.dev/fleet":"lobby"},"gameServerState":"ALLOCATED","counters":{"rooms":{"minAvailable":"1"}}},` +
			`{"matchLabels":{"agones.dev/fleet":"lobby"},"lists":{"players":{"minAvailable":"2","containsValue":"p1"}}}],` +
			`"priorities":[{"type":"List","key":"players","order":"Descending"}],` +
			`"counters":{"rooms":{"action":"Increment","amount":"1","capacity":"3"}},"lists":{"players":{"addValues":["p1","p2"],"deleteValues":["p9"]}}}`,
		`{"scheduling":"Distributed","requiredGameServerSelector":{"matchLabels":{"mode":"ranked"}},"preferredGameServerSelectors":[{}]}`,
		`{"gameServerSelectors":[{"players":{"minAvailable":"1"}}]}`,
		`{"counters":{"rooms":{"action":"Decrement","amount":"-3"}}}`,
		`{"multiClusterSetting":{"enabled":true}}`,
	} {
		f.Add([]byte(body))
	}
	decode := protojson.UnmarshalOptions{DiscardUnknown: false}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req agonesallocation.AllocationRequest
		if decode.Unmarshal(body, &req) != nil {
			return // the gateway answers 400 before the handler
		}
		treqs, err := agonesRequests(&req)
		if err != nil {
			if ae, ok := errors.AsType[*apiError](err); ok && ae.code == codes.Unimplemented && ae.field != "" {
				return
			}
			if !refusedAsInvalid(err) {
				t.Fatalf("refused, but not as INVALID_ARGUMENT or UNIMPLEMENTED with a field: %v", err)
			}
			return
		}
		if len(treqs) == 0 {
			t.Fatal("accepted with no selector to try")
		}
		for _, treq := range treqs {
			want, err := parseAllocation(treq)
			if err != nil {
				if !refusedAsInvalid(err) {
					t.Fatalf("refused, but not as INVALID_ARGUMENT with a field: %v", err)
				}
				continue
			}
			if len(want.queries) != 1 {
				t.Fatalf("one selector made %d queries", len(want.queries))
			}
			for _, state := range []*eventsv1.GameServerState{roomsServer(eventsv1.Lifecycle_LIFECYCLE_READY), roomsServer(eventsv1.Lifecycle_LIFECYCLE_ALLOCATED)} {
				msgs, err := events.DecideGameServer(state.GetName(), state, events.Allocate{
					Allocated: &eventsv1.GameServerAllocated{GameSession: "gameSessions/s1", Labels: treq.GetLabels(), Annotations: treq.GetAnnotations()},
					Again:     state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_ALLOCATED, Counters: want.counters, Lists: want.lists})
				if err != nil {
					continue // refused: no room, or metadata a server cannot hold
				}
				after := state
				for _, m := range msgs {
					if after, err = events.ApplyGameServer(after, events.New(state.GetName(), fuzzAt, m)); err != nil {
						t.Fatalf("decided %v, which does not fold: %v", m, err)
					}
				}
				for name, c := range after.GetCounters() {
					if c.GetCount() < 0 || c.GetCount() > c.GetCapacity() {
						t.Fatalf("counter %s %d of %d after the allocation", name, c.GetCount(), c.GetCapacity())
					}
				}
				for name, l := range after.GetLists() {
					if int64(len(l.GetValues())) > l.GetCapacity() {
						t.Fatalf("list %s holds %d of %d after the allocation", name, len(l.GetValues()), l.GetCapacity())
					}
				}
			}
		}
	})
}

// roomsServer is a server of fleet lobby in lifecycle l with counter rooms
// (2 of 4) and list players ([p1] of 3).
func roomsServer(l eventsv1.Lifecycle) *eventsv1.GameServerState {
	return &eventsv1.GameServerState{
		Name: events.GameServerName("lobby", "gs-1"), Host: "hosts/h1", Lifecycle: l, GameSession: "gameSessions/s0",
		Counters: map[string]*eventsv1.Counter{"rooms": {Count: 2, Capacity: 4}},
		Lists:    map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"p1"}}},
	}
}
