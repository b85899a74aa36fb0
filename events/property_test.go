package events_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Property tests on the domain core (pgregory.net/rapid): random command
// sequences against the deciders, checking what must hold whatever the
// sequence. rapid shrinks a failing sequence to a short one.

var propT0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

// gameServerCommand draws any game server command, at second `at`.
func gameServerCommand(t *rapid.T, at time.Time) events.GameServerCommand {
	reason := rapid.SampledFrom([]eventsv1.Reason{eventsv1.Reason_REASON_PROCESS_EXITED, eventsv1.Reason_REASON_HEALTH_CHECK_FAILED,
		eventsv1.Reason_REASON_FLEET_SCALED_DOWN, eventsv1.Reason_REASON_HOST_LOST}).Draw(t, "reason")
	cmds := []func() events.GameServerCommand{
		func() events.GameServerCommand {
			return events.ScheduleGameServer{Host: "hosts/h1", Spec: &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game",
				Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 4}},
				Lists:    map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"v0"}}}}}}
		},
		func() events.GameServerCommand { return counterCommand(t) },
		func() events.GameServerCommand { return listCommand(t) },
		func() events.GameServerCommand {
			return events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: int32(rapid.IntRange(1, 99999).Draw(t, "pid")), Attempt: 1}}
		},
		func() events.GameServerCommand { return events.MarkReady{} },
		func() events.GameServerCommand { return events.RecordSDKConnected{Transport: "grpc-stream"} },
		func() events.GameServerCommand {
			return events.RecordSDKDisconnected{Kind: eventsv1.DisconnectKind_DISCONNECT_KIND_RESET, At: at}
		},
		func() events.GameServerCommand {
			return events.RequestShutdown{Reason: reason, Evidence: &eventsv1.Evidence{Detail: "test"}, Deadline: at.Add(30 * time.Second)}
		},
		func() events.GameServerCommand {
			return events.RecordExit{Exited: &eventsv1.ProcessExited{ExitCode: proto.Int32(int32(rapid.IntRange(0, 3).Draw(t, "code"))), Attempt: 1}}
		},
		func() events.GameServerCommand {
			return events.RecordSignal{Signalled: &eventsv1.ProcessSignalled{Signal: "terminated", Reason: reason}}
		},
		func() events.GameServerCommand { return events.MarkUnhealthy{Reason: reason} },
		func() events.GameServerCommand { return events.Terminate{Reason: reason} },
		func() events.GameServerCommand {
			return events.RecordMissedHeartbeats{Missed: int32(rapid.IntRange(1, 5).Draw(t, "missed")), LastHeartbeat: at}
		},
		func() events.GameServerCommand { return events.RecordHeartbeatsResumed{At: at} },
		func() events.GameServerCommand {
			return events.Allocate{Allocated: &eventsv1.GameServerAllocated{GameSession: "gameSessions/m1"}}
		},
		func() events.GameServerCommand { return roomsAllocation(t) },
		func() events.GameServerCommand { return events.Reserve{Until: at.Add(time.Minute)} },
		func() events.GameServerCommand { return events.EndReservation{Now: at.Add(2 * time.Minute)} },
		func() events.GameServerCommand {
			return events.SetLabels{Set: map[string]string{"mode": rapid.SampledFrom([]string{"a", "b"}).Draw(t, "label")}}
		},
	}
	return rapid.SampledFrom(cmds).Draw(t, "command")()
}

// Whatever the commands, what a game server's Decide returns its Apply
// takes, neither changes the state it is given, and TERMINATED absorbs:
// once terminated, no command yields an event.
func TestGameServerCommandSequences(t *testing.T) {
	const name = "fleets/arena/gameServers/gs-1"
	rapid.Check(t, func(t *rapid.T) {
		var state *eventsv1.GameServerState
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for i := range steps {
			at := propT0.Add(time.Duration(i) * time.Second)
			cmd := gameServerCommand(t, at)
			before := proto.CloneOf(state)
			msgs, err := events.DecideGameServer(name, state, cmd)
			if !proto.Equal(state, before) {
				t.Fatalf("step %d: Decide(%T) changed its input", i, cmd)
			}
			if state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED && len(msgs) > 0 {
				t.Fatalf("step %d: a TERMINATED server took %T: %v", i, cmd, msgs)
			}
			if err != nil {
				continue
			}
			state = applyAll(t, i, cmd, name, at, state, msgs, events.ApplyGameServer)
			checkCountersInRange(t, i, state)
		}
	})
}

// roomsAllocation draws an allocation (often into an ALLOCATED server)
// that takes or gives back room on counter rooms and list players, often
// more than there is.
func roomsAllocation(t *rapid.T) events.Allocate {
	c := events.Allocate{Allocated: &eventsv1.GameServerAllocated{GameSession: "gameSessions/m2"}, Again: rapid.Bool().Draw(t, "again")}
	if rapid.Bool().Draw(t, "counter action") {
		a := events.CounterAction{Name: rapid.SampledFrom([]string{"rooms", "rooms", "seats"}).Draw(t, "counter"), Diff: rapid.Int64Range(-3, 3).Draw(t, "diff")}
		if rapid.IntRange(0, 3).Draw(t, "set capacity") == 0 {
			a.Capacity = proto.Int64(rapid.Int64Range(-1, 6).Draw(t, "capacity"))
		}
		c.Counters = append(c.Counters, a)
	}
	if rapid.Bool().Draw(t, "list action") {
		values := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string {
			return fmt.Sprintf("v%d", rapid.IntRange(0, 5).Draw(t, "v"))
		}), 0, 4)
		c.Lists = append(c.Lists, events.ListAction{Name: "players", Add: values.Draw(t, "add"), Delete: values.Draw(t, "delete")})
	}
	return c
}

// counterCommand draws a change of counter rooms (or of one that is not
// there), often out of range.
func counterCommand(t *rapid.T) events.UpdateCounter {
	c := events.UpdateCounter{Name: rapid.SampledFrom([]string{"rooms", "rooms", "rooms", "seats"}).Draw(t, "counter"),
		CountDiff: rapid.Int64Range(-6, 6).Draw(t, "diff")}
	if rapid.Bool().Draw(t, "set count") {
		c.Count = proto.Int64(rapid.Int64Range(-1, 8).Draw(t, "count"))
	}
	if rapid.Bool().Draw(t, "set capacity") {
		c.Capacity = proto.Int64(rapid.Int64Range(-1, 8).Draw(t, "capacity"))
	}
	return c
}

// listCommand draws a change of list players (or of one that is not
// there) over values v0…v5.
func listCommand(t *rapid.T) events.UpdateList {
	values := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string {
		return fmt.Sprintf("v%d", rapid.IntRange(0, 5).Draw(t, "v"))
	}), 0, 4)
	c := events.UpdateList{Name: rapid.SampledFrom([]string{"players", "players", "players", "friends"}).Draw(t, "list")}
	if rapid.IntRange(0, 4).Draw(t, "set") == 0 {
		c.SetValues, c.Values = true, values.Draw(t, "values")
	} else {
		c.Add, c.Remove = values.Draw(t, "add"), values.Draw(t, "remove")
	}
	if rapid.Bool().Draw(t, "set capacity") {
		c.Capacity = proto.Int64(rapid.Int64Range(-1, 6).Draw(t, "capacity"))
	}
	return c
}

// checkCountersInRange fails unless every counter of state is within [0,
// capacity] and every list holds distinct values, at most its capacity.
func checkCountersInRange(t *rapid.T, i int, state *eventsv1.GameServerState) {
	for name, c := range state.GetCounters() {
		if c.GetCount() < 0 || c.GetCount() > c.GetCapacity() {
			t.Fatalf("step %d: counter %s is %d of %d", i, name, c.GetCount(), c.GetCapacity())
		}
	}
	for name, l := range state.GetLists() {
		seen := map[string]bool{}
		for _, v := range l.GetValues() {
			if seen[v] {
				t.Fatalf("step %d: list %s holds %q twice: %v", i, name, v, l.GetValues())
			}
			seen[v] = true
		}
		if int64(len(l.GetValues())) > l.GetCapacity() || l.GetCapacity() > events.MaxListCapacity {
			t.Fatalf("step %d: list %s holds %d values, capacity %d", i, name, len(l.GetValues()), l.GetCapacity())
		}
	}
}

// Whatever the changes of a serving server's counter and list, the count
// stays within [0, capacity] and the list holds distinct values, at most
// its capacity; a change refused changes nothing, and one taken is exactly
// what the command asked (a count moved by its diff, values added at the
// end), with a capacity lowered below them truncating, as Agones does.
func TestCounterAndListChangeSequences(t *testing.T) {
	const name = "fleets/arena/gameServers/gs-1"
	rapid.Check(t, func(t *rapid.T) {
		spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game",
			Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 4}},
			Lists:    map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"v0"}}}}}
		msgs, err := events.DecideGameServer(name, nil, events.ScheduleGameServer{Host: "hosts/h1", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		state := applyAll(t, 0, "schedule", name, propT0, (*eventsv1.GameServerState)(nil), msgs, events.ApplyGameServer)
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for i := range steps {
			at := propT0.Add(time.Duration(i+1) * time.Second)
			var cmd events.GameServerCommand = counterCommand(t)
			if rapid.Bool().Draw(t, "list") {
				cmd = listCommand(t)
			}
			msgs, err := events.DecideGameServer(name, state, cmd)
			if err != nil {
				if len(msgs) > 0 {
					t.Fatalf("step %d: events %v with the refusal %v", i, msgs, err)
				}
				continue
			}
			before := proto.CloneOf(state)
			state = applyAll(t, i, cmd, name, at, state, msgs, events.ApplyGameServer)
			checkCountersInRange(t, i, state)
			if c, ok := cmd.(events.UpdateCounter); ok && c.Count == nil && len(msgs) == 1 {
				// A lowered capacity takes the count down with it (Agones).
				capacity := before.GetCounters()["rooms"].GetCapacity()
				if c.Capacity != nil {
					capacity = *c.Capacity
				}
				if got, want := state.GetCounters()["rooms"].GetCount(), min(before.GetCounters()["rooms"].GetCount()+c.CountDiff, capacity); got != want {
					t.Fatalf("step %d: count %d after a diff of %d, want %d", i, got, c.CountDiff, want)
				}
			}
			if c, ok := cmd.(events.UpdateList); ok && !c.SetValues && len(msgs) == 1 {
				vals := state.GetLists()["players"].GetValues()
				// A lowered capacity keeps the first values (Agones).
				capacity := before.GetLists()["players"].GetCapacity()
				if c.Capacity != nil {
					capacity = *c.Capacity
				}
				if n := min(len(before.GetLists()["players"].GetValues())-len(c.Remove), int(capacity)) + len(c.Add); len(vals) != n {
					t.Fatalf("step %d: %d values after %v, want %d", i, len(vals), c, n)
				}
				if len(c.Add) > 0 && !slices.Equal(vals[len(vals)-len(c.Add):], c.Add) {
					t.Fatalf("step %d: values %v, want %v added at the end", i, vals, c.Add)
				}
			}
		}
	})
}

// gameSessionCommand draws any game session command on players p0…p5.
func gameSessionCommand(t *rapid.T, at time.Time) events.GameSessionCommand {
	player := fmt.Sprintf("p%d", rapid.IntRange(0, 5).Draw(t, "player"))
	cmds := []func() events.GameSessionCommand{
		func() events.GameSessionCommand {
			return events.ReservePlayer{PlayerSession: player, PlayerID: "u-" + player, Now: at}
		},
		func() events.GameSessionCommand {
			return events.AcceptPlayer{PlayerSession: player, TokenGeneration: int64(rapid.IntRange(0, 2).Draw(t, "generation")), Now: at}
		},
		func() events.GameSessionCommand { return events.ReissueToken{PlayerSession: player, Now: at} },
		func() events.GameSessionCommand { return events.DisconnectPlayer{PlayerSession: player} },
		func() events.GameSessionCommand { return events.RemovePlayer{PlayerSession: player} },
		func() events.GameSessionCommand { return events.ExpirePlayers{Now: at} },
		func() events.GameSessionCommand {
			return events.TrackSeat{PlayerID: "u-" + player, Connected: rapid.Bool().Draw(t, "connected"), Now: at}
		},
		func() events.GameSessionCommand {
			return events.EndGameSession{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED}
		},
	}
	return rapid.SampledFrom(cmds).Draw(t, "command")()
}

// Whatever the commands, a game session never seats more players than its
// maximum, Apply takes what Decide returns, inputs are never changed, and
// ENDED absorbs.
func TestGameSessionCommandSequences(t *testing.T) {
	const name = "gameSessions/m1"
	rapid.Check(t, func(t *rapid.T) {
		maxPlayers := int32(rapid.IntRange(1, 4).Draw(t, "max"))
		created := &eventsv1.GameSessionCreated{GameServer: "fleets/arena/gameServers/gs-1", Policy: &eventsv1.GameSessionPolicy{
			MaxPlayers: maxPlayers, ReservationTimeoutSeconds: 10, ReconnectWindowSeconds: int32(rapid.IntRange(0, 20).Draw(t, "window")),
		}}
		state, err := events.ApplyGameSession(nil, events.New(name, propT0, created))
		if err != nil {
			t.Fatal(err)
		}
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for i := range steps {
			at := propT0.Add(time.Duration(i) * time.Second)
			cmd := gameSessionCommand(t, at)
			before := proto.CloneOf(state)
			msgs, err := events.DecideGameSession(name, state, cmd)
			if !proto.Equal(state, before) {
				t.Fatalf("step %d: Decide(%T) changed its input", i, cmd)
			}
			if state.GetStatus() == eventsv1.GameSessionStatus_GAME_SESSION_STATUS_ENDED && len(msgs) > 0 {
				t.Fatalf("step %d: an ENDED game session took %T: %v", i, cmd, msgs)
			}
			if err != nil {
				continue // the command does not apply here: refused, with its reason
			}
			state = applyAll(t, i, cmd, name, at, state, msgs, events.ApplyGameSession)
			if n := events.SeatsTaken(state); n > int(maxPlayers) {
				t.Fatalf("step %d: %d seats taken, the maximum is %d", i, n, maxPlayers)
			}
		}
	})
}

// applyAll folds what Decide returned for cmd at step i into state, failing
// if Apply refuses any of it or changes the state it is given.
func applyAll[S proto.Message](t *rapid.T, i int, cmd any, name string, at time.Time, state S, msgs []proto.Message,
	apply func(S, events.Envelope) (S, error)) S {
	for _, m := range msgs {
		before := proto.Clone(state)
		next, err := apply(state, events.New(name, at, m))
		if err != nil {
			t.Fatalf("step %d: Apply refused what Decide(%T) returned: %s: %v", i, cmd, events.TypeOf(m), err)
		}
		if !proto.Equal(state, before) {
			t.Fatalf("step %d: Apply(%s) changed its input", i, events.TypeOf(m))
		}
		state = next
	}
	return state
}
