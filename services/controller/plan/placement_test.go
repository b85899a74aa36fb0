package plan

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestPickHost(t *testing.T) {
	hosts := func() []*hostSlot {
		return []*hostSlot{
			{name: "hosts/a", capacity: 4, used: 1},
			{name: "hosts/b", capacity: 4, used: 3},
			{name: "hosts/c", capacity: 2, used: 2},
			{name: "hosts/d", capacity: 4, used: 1},
		}
	}
	for _, tc := range []struct {
		name       string
		scheduling eventsv1.Scheduling
		want       []string // successive picks, each taking a slot
	}{
		{"packed fills the fullest host with room first", eventsv1.Scheduling_SCHEDULING_PACKED, []string{"hosts/b", "hosts/a", "hosts/a", "hosts/a", "hosts/d"}},
		{"distributed spreads over the emptiest, ties by name", eventsv1.Scheduling_SCHEDULING_DISTRIBUTED, []string{"hosts/a", "hosts/d", "hosts/a", "hosts/d", "hosts/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := hosts()
			for i, want := range tc.want {
				h := pickHost(hs, tc.scheduling, nil)
				if h == nil || h.name != want {
					t.Fatalf("pick %d: %v, want %s", i, h, want)
				}
				h.used++
			}
		})
	}
	full := []*hostSlot{{name: "hosts/a", capacity: 1, used: 1}}
	if h := pickHost(full, eventsv1.Scheduling_SCHEDULING_PACKED, nil); h != nil {
		t.Fatalf("picked %s with no room", h.name)
	}
}

func TestScaleDownOrderNeverPicksAllocated(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	row := func(name string, l eventsv1.Lifecycle, age int) projections.Row[*eventsv1.GameServerState] {
		return projections.Row[*eventsv1.GameServerState]{State: &eventsv1.GameServerState{
			Name: name, Lifecycle: l, CreateTime: timestamppb.New(t0.Add(time.Duration(-age) * time.Minute))}}
	}
	got := scaleDownOrder([]projections.Row[*eventsv1.GameServerState]{
		row("alloc", eventsv1.Lifecycle_LIFECYCLE_ALLOCATED, 1),
		row("starting", eventsv1.Lifecycle_LIFECYCLE_STARTING, 1),
		row("ready-old", eventsv1.Lifecycle_LIFECYCLE_READY, 10),
		row("reserved", eventsv1.Lifecycle_LIFECYCLE_RESERVED, 1),
		row("ready-new", eventsv1.Lifecycle_LIFECYCLE_READY, 2),
	}, eventsv1.Scheduling_SCHEDULING_PACKED, nil)
	var names []string
	for _, r := range got {
		names = append(names, r.State.GetName())
	}
	want := []string{"ready-new", "ready-old", "starting"}
	if len(names) != len(want) {
		t.Fatalf("order %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("order %v, want %v", names, want)
		}
	}
}

// Under PACKED, scale-down takes the READY servers of the least used
// hosts first, so that hosts empty out; under DISTRIBUTED, those of the
// busiest, so that the fleet stays spread.
func TestScaleDownOrderEmptiesHostsUnderPacked(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	row := func(name, host string, age int) projections.Row[*eventsv1.GameServerState] {
		return projections.Row[*eventsv1.GameServerState]{State: &eventsv1.GameServerState{Name: name, Host: host,
			Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY, CreateTime: timestamppb.New(t0.Add(time.Duration(-age) * time.Minute))}}
	}
	live := []projections.Row[*eventsv1.GameServerState]{
		row("busy-1", "hosts/busy", 1), row("idle-old", "hosts/idle", 9), row("idle-new", "hosts/idle", 1), row("busy-2", "hosts/busy", 2),
	}
	load := map[string]int32{"hosts/busy": 8, "hosts/idle": 2}
	for _, tc := range []struct {
		sched eventsv1.Scheduling
		want  string
	}{
		{eventsv1.Scheduling_SCHEDULING_PACKED, "idle-new idle-old busy-1 busy-2"},
		{eventsv1.Scheduling_SCHEDULING_DISTRIBUTED, "busy-1 busy-2 idle-new idle-old"},
	} {
		var names []string
		for _, r := range scaleDownOrder(live, tc.sched, load) {
			names = append(names, r.State.GetName())
		}
		if got := strings.Join(names, " "); got != tc.want {
			t.Errorf("%v: order %s, want %s", tc.sched, got, tc.want)
		}
	}
}
