package events_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// allocation is a sample GameServerAllocated for the test game session.
func allocation(self bool) *eventsv1.GameServerAllocated {
	return &eventsv1.GameServerAllocated{
		GameSession: gsessName,
		Properties:  map[string]string{"map": "dust"},
		MaxPlayers:  8,
		Players: []*eventsv1.PlayerReservation{
			{PlayerSession: "p1", PlayerId: "alice", PlayerData: "a", Slot: 0},
			{PlayerSession: "p2", PlayerId: "bob", Slot: 1},
		},
		SelfAllocated: self,
	}
}

// serverIn returns a game server in lifecycle l: newServer's states, plus
// RESERVED (reserved until at(90)) and TERMINATED.
func serverIn(t *testing.T, l eventsv1.Lifecycle) *gameServer {
	t.Helper()
	switch l {
	case ABSENT:
		return &gameServer{t: t}
	case RESERVED:
		g := newServer(t, READY)
		g.decide(events.Reserve{Until: at(90)})
		if g.state.GetLifecycle() != RESERVED {
			t.Fatalf("lifecycle %v, want RESERVED", g.state.GetLifecycle())
		}
		return g
	case TERMINATED:
		return terminatedServer(t)
	}
	return newServer(t, l)
}

func TestAllocate(t *testing.T) {
	tests := []struct {
		name string
		from eventsv1.Lifecycle
		self bool
		ok   bool
	}{
		{name: "ready", from: READY, ok: true},
		{name: "ready, by the game itself", from: READY, self: true, ok: true},
		{name: "reserved, by the game itself", from: RESERVED, self: true, ok: true},
		{name: "reserved, by the API", from: RESERVED, self: false},
		{name: "absent", from: ABSENT},
		{name: "scheduled", from: SCHEDULED},
		{name: "starting", from: STARTING},
		{name: "starting, by the game itself", from: STARTING, self: true},
		{name: "allocated", from: ALLOCATED},
		{name: "allocated, by the game itself", from: ALLOCATED, self: true},
		{name: "shutting down", from: SHUTTING_DOWN},
		{name: "unhealthy", from: UNHEALTHY, self: true},
		{name: "terminated", from: TERMINATED},
		{name: "terminated, by the game itself", from: TERMINATED, self: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := serverIn(t, tt.from)
			before := proto.CloneOf(g.state)
			cmd := allocation(tt.self)
			out, err := g.try(events.Allocate{Allocated: cmd})

			if !tt.ok {
				if out != nil {
					t.Errorf("events = %v, want none", types(out))
				}
				te := asTransitionError(t, err)
				if te.From != events.LifecycleName(tt.from) || te.Event != "Allocate" {
					t.Errorf("TransitionError = %+v, want Allocate from %s", te, events.LifecycleName(tt.from))
				}
				if tt.from != ABSENT && te.Aggregate != gsName {
					t.Errorf("TransitionError.Aggregate = %q, want %q", te.Aggregate, gsName)
				}
				if !proto.Equal(g.state, before) {
					t.Errorf("state changed")
				}
				return
			}
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			if len(out) != 1 || !proto.Equal(out[0], allocation(tt.self)) {
				t.Fatalf("events = %v, want [%v]", out, allocation(tt.self))
			}
			if out[0] == cmd {
				t.Errorf("the event is the command's message, not a copy")
			}

			// The folded state carries the allocation and the game session.
			s := g.state
			if s.GetLifecycle() != ALLOCATED || s.GetGameSession() != gsessName || s.GetReservedUntil() != nil {
				t.Errorf("lifecycle %v, game session %q, reserved until %v; want ALLOCATED, %s, none",
					s.GetLifecycle(), s.GetGameSession(), s.GetReservedUntil(), gsessName)
			}
			if !proto.Equal(s.GetAllocation(), allocation(tt.self)) {
				t.Errorf("allocation = %v, want %v", s.GetAllocation(), allocation(tt.self))
			}
			cmd.Players[0].Slot = 99
			cmd.Properties["map"] = "changed"
			if !proto.Equal(s.GetAllocation(), allocation(tt.self)) {
				t.Errorf("state shares memory with the command")
			}
			// Nothing else of the server changed.
			clear := func(s *eventsv1.GameServerState) *eventsv1.GameServerState {
				s = proto.CloneOf(s)
				s.Lifecycle, s.GameSession, s.Allocation, s.ReservedUntil, s.UpdateTime, s.LastAllocatedTime = 0, "", nil, nil, nil, nil
				return s
			}
			if !proto.Equal(clear(before), clear(s)) {
				t.Errorf("Allocate changed more than the allocation:\nbefore %v\nafter  %v", before, s)
			}
			// Agones' agones.dev/last-allocated: any allocation, by a
			// matchmaker, an operator or the game itself.
			if s.GetLastAllocatedTime() == nil {
				t.Errorf("self-allocated %v: no last allocated time", tt.self)
			}

			// A second allocation is refused: one game session at a time.
			_, err = g.try(events.Allocate{Allocated: &eventsv1.GameServerAllocated{GameSession: "gameSessions/other", SelfAllocated: true}})
			if te := asTransitionError(t, err); te.From != "ALLOCATED" {
				t.Errorf("second Allocate: %+v, want refused from ALLOCATED", te)
			}
			if s.GetGameSession() != gsessName {
				t.Errorf("game session = %q after a refused allocation", s.GetGameSession())
			}
		})
	}
}

func TestReadyAfterAllocation(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) *gameServer
	}{
		{name: "allocated from ready", setup: func(t *testing.T) *gameServer { return newServer(t, READY) }},
		{name: "allocated from reserved", setup: func(t *testing.T) *gameServer { return serverIn(t, RESERVED) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.setup(t)
			g.decide(events.Allocate{Allocated: allocation(true)})

			// The game calls Ready again: the server is reused.
			if got := types(g.decide(events.MarkReady{})); !slices.Equal(got, []string{"GameServerReady"}) {
				t.Fatalf("events = %v", got)
			}
			s := g.state
			if s.GetLifecycle() != READY || s.GetGameSession() != "" || s.GetAllocation() != nil || s.GetReservedUntil() != nil || !s.GetEverReady() {
				t.Errorf("after Ready: lifecycle %v, game session %q, allocation %v, reserved until %v, ever ready %v; want READY, cleared, true",
					s.GetLifecycle(), s.GetGameSession(), s.GetAllocation(), s.GetReservedUntil(), s.GetEverReady())
			}

			// And it can hold the next match.
			next := &eventsv1.GameServerAllocated{GameSession: "gameSessions/match-2"}
			g.decide(events.Allocate{Allocated: next})
			if g.state.GetGameSession() != "gameSessions/match-2" || !proto.Equal(g.state.GetAllocation(), next) {
				t.Errorf("second match: game session %q, allocation %v", g.state.GetGameSession(), g.state.GetAllocation())
			}
		})
	}
}

func TestReserve(t *testing.T) {
	tests := []struct {
		name string
		from eventsv1.Lifecycle
		ok   bool
	}{
		{name: "ready", from: READY, ok: true},
		{name: "starting", from: STARTING},
		{name: "reserved", from: RESERVED},
		{name: "allocated", from: ALLOCATED},
		{name: "shutting down", from: SHUTTING_DOWN},
		{name: "unhealthy", from: UNHEALTHY},
		{name: "terminated", from: TERMINATED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := serverIn(t, tt.from)
			out, err := g.try(events.Reserve{Until: at(300)})
			if !tt.ok {
				if te := asTransitionError(t, err); te.From != events.LifecycleName(tt.from) || te.Event != "GameServerReserved" {
					t.Errorf("TransitionError = %+v", te)
				}
				return
			}
			want := &eventsv1.GameServerReserved{Until: tsAt(300)}
			if err != nil || len(out) != 1 || !proto.Equal(out[0], want) {
				t.Fatalf("= %v, %v; want [%v]", out, err, want)
			}
			if g.state.GetLifecycle() != RESERVED || !proto.Equal(g.state.GetReservedUntil(), tsAt(300)) || g.state.GetGameSession() != "" {
				t.Errorf("state = %v", g.state)
			}
		})
	}
}

func TestEndReservation(t *testing.T) {
	// serverIn reserves until at(90).
	tests := []struct {
		name      string
		from      eventsv1.Lifecycle
		now       time.Time
		wantReady bool
	}{
		{name: "reserved, before the end", from: RESERVED, now: at(89)},
		{name: "reserved, a nanosecond before the end", from: RESERVED, now: at(90).Add(-time.Nanosecond)},
		{name: "reserved, at exactly the end", from: RESERVED, now: at(90), wantReady: true},
		{name: "reserved, after the end", from: RESERVED, now: at(1000), wantReady: true},
		{name: "ready", from: READY, now: at(1000)},
		{name: "starting", from: STARTING, now: at(1000)},
		{name: "allocated", from: ALLOCATED, now: at(1000)},
		{name: "shutting down", from: SHUTTING_DOWN, now: at(1000)},
		{name: "unhealthy", from: UNHEALTHY, now: at(1000)},
		{name: "terminated", from: TERMINATED, now: at(1000)},
		{name: "absent", from: ABSENT, now: at(1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := serverIn(t, tt.from)
			before := proto.CloneOf(g.state)
			out, err := g.try(events.EndReservation{Now: tt.now})
			if err != nil {
				t.Fatalf("EndReservation: %v", err)
			}
			if !tt.wantReady {
				if len(out) != 0 {
					t.Errorf("events = %v, want none", types(out))
				}
				if !proto.Equal(g.state, before) {
					t.Errorf("state changed")
				}
				return
			}
			want := &eventsv1.GameServerReady{ReservationEnded: true}
			if len(out) != 1 || !proto.Equal(out[0], want) {
				t.Fatalf("events = %v, want [%v]", out, want)
			}
			// The server is back in the pool as it was before the reservation.
			s := g.state
			if s.GetLifecycle() != READY || s.GetReservedUntil() != nil || s.GetGameSession() != "" || s.GetAllocation() != nil {
				t.Errorf("state = %v, want READY with no reservation", s)
			}
			if !s.GetEverReady() {
				t.Errorf("ever ready = false, want it kept from the Ready before the reservation")
			}
			if again := g.decide(events.EndReservation{Now: tt.now}); len(again) != 0 {
				t.Errorf("second EndReservation = %v, want none", types(again))
			}
			g.decide(events.Allocate{Allocated: allocation(false)})
			if g.state.GetLifecycle() != ALLOCATED {
				t.Errorf("allocate after the reservation ended: lifecycle %v", g.state.GetLifecycle())
			}
		})
	}
}

// TestReservationEndedOnlyFromReserved checks that a reservation's end
// cannot return a server to READY from anywhere but RESERVED: from
// ALLOCATED it would free a server holding a match, from STARTING it would
// make a server READY that never called Ready.
func TestReservationEndedOnlyFromReserved(t *testing.T) {
	for _, l := range []eventsv1.Lifecycle{STARTING, ALLOCATED} {
		t.Run(events.LifecycleName(l), func(t *testing.T) {
			g := serverIn(t, l)
			next, err := applyChecked(t, events.ApplyGameServer, g.state, events.New(gsName, at(100), &eventsv1.GameServerReady{ReservationEnded: true}))
			if next != nil {
				t.Errorf("state = %v, want nil with the error", next)
			}
			if te := asTransitionError(t, err); te.From != events.LifecycleName(l) || te.Event != "GameServerReady" || te.Aggregate != gsName {
				t.Errorf("TransitionError = %+v", te)
			}
		})
	}
	// A plain Ready is still allowed from both.
	for _, l := range []eventsv1.Lifecycle{STARTING, ALLOCATED} {
		g := serverIn(t, l)
		g.decide(events.MarkReady{})
		if g.state.GetLifecycle() != READY || !g.state.GetEverReady() {
			t.Errorf("Ready from %v: lifecycle %v, ever ready %v", l, g.state.GetLifecycle(), g.state.GetEverReady())
		}
	}
}

// TestReserveEndAllocateCycle runs a server through repeated reservations.
func TestReserveEndAllocateCycle(t *testing.T) {
	g := newServer(t, READY)
	steps := []struct {
		name          string
		cmd           events.GameServerCommand
		wantEvents    []string
		wantLifecycle eventsv1.Lifecycle
	}{
		{name: "reserve", cmd: events.Reserve{Until: at(50)}, wantEvents: []string{"GameServerReserved"}, wantLifecycle: RESERVED},
		{name: "too early", cmd: events.EndReservation{Now: at(49)}, wantEvents: []string{}, wantLifecycle: RESERVED},
		{name: "ended", cmd: events.EndReservation{Now: at(50)}, wantEvents: []string{"GameServerReady"}, wantLifecycle: READY},
		{name: "reserve again", cmd: events.Reserve{Until: at(100)}, wantEvents: []string{"GameServerReserved"}, wantLifecycle: RESERVED},
		{name: "the game allocates itself", cmd: events.Allocate{Allocated: allocation(true)}, wantEvents: []string{"GameServerAllocated"}, wantLifecycle: ALLOCATED},
		{name: "the old reservation's end does nothing", cmd: events.EndReservation{Now: at(200)}, wantEvents: []string{}, wantLifecycle: ALLOCATED},
		{name: "ready again", cmd: events.MarkReady{}, wantEvents: []string{"GameServerReady"}, wantLifecycle: READY},
		{name: "reserve without an end (Agones' Reserve(0))", cmd: events.Reserve{}, wantEvents: []string{"GameServerReserved"}, wantLifecycle: RESERVED},
		{name: "no time ends it", cmd: events.EndReservation{Now: at(1 << 20)}, wantEvents: []string{}, wantLifecycle: RESERVED},
		{name: "the game says otherwise", cmd: events.MarkReady{}, wantEvents: []string{"GameServerReady"}, wantLifecycle: READY},
	}
	for _, s := range steps {
		if got := types(g.decide(s.cmd)); !slices.Equal(got, s.wantEvents) {
			t.Fatalf("%s: events %v, want %v", s.name, got, s.wantEvents)
		}
		if got := g.state.GetLifecycle(); got != s.wantLifecycle {
			t.Fatalf("%s: lifecycle %v, want %v", s.name, got, s.wantLifecycle)
		}
		if s.wantLifecycle == ALLOCATED && g.state.GetGameSession() != gsessName {
			t.Errorf("%s: game session %q", s.name, g.state.GetGameSession())
		}
	}
}

// A process exit's evidence carries the agent's last heartbeat when it
// knows it (heartbeats are not events), else the last one the events show.
func TestExitEvidenceLastHeartbeat(t *testing.T) {
	connected := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	state := &eventsv1.GameServerState{Name: gsName, Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY, EverReady: true,
		LastHeartbeatTime: timestamppb.New(connected)}
	for _, tt := range []struct {
		name string
		beat time.Time
		want time.Time
	}{
		{"agent knows", connected.Add(42 * time.Second), connected.Add(42 * time.Second)},
		{"agent does not know", time.Time{}, connected},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := events.DecideGameServer(gsName, state, events.RecordExit{Exited: &eventsv1.ProcessExited{Signal: "killed", Attempt: 1}, LastHeartbeat: tt.beat})
			if err != nil {
				t.Fatal(err)
			}
			term := out[len(out)-1].(*eventsv1.GameServerTerminated)
			if got := term.GetEvidence().GetLastHeartbeatTime().AsTime(); !got.Equal(tt.want) {
				t.Fatalf("last heartbeat %v, want %v", got, tt.want)
			}
		})
	}
}

// An allocation's labels and annotations (an Agones allocation's metadata)
// are set on the server with it, its other labels kept, and refused as
// SetLabels and SetAnnotations refuse them.
func TestAllocationSetsLabelsAndAnnotations(t *testing.T) {
	g := newServer(t, READY)
	g.decide(events.SetLabels{Set: map[string]string{"mode": "ctf"}})
	a := allocation(false)
	a.Labels = map[string]string{"match": "m-1"}
	a.Annotations = map[string]string{"agones.dev/sdk-map": "dust"}
	g.decide(events.Allocate{Allocated: a})
	if l := g.state.GetLabels(); l["mode"] != "ctf" || l["match"] != "m-1" {
		t.Fatalf("labels %v, want mode=ctf kept and match=m-1 set", l)
	}
	if an := g.state.GetAnnotations(); an["agones.dev/sdk-map"] != "dust" {
		t.Fatalf("annotations %v", an)
	}
	for name, bad := range map[string]*eventsv1.GameServerAllocated{
		"a label key with a space": {GameSession: gsessName, Labels: map[string]string{"a b": "1"}},
		"an empty annotation key":  {GameSession: gsessName, Annotations: map[string]string{"": "1"}},
	} {
		if _, err := events.DecideGameServer(gsName, newServer(t, READY).state, events.Allocate{Allocated: bad}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
