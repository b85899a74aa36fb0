package events_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

const gsName = "fleets/arena/gameServers/gs-1"

const (
	ABSENT        = eventsv1.Lifecycle_LIFECYCLE_UNSPECIFIED
	SCHEDULED     = eventsv1.Lifecycle_LIFECYCLE_SCHEDULED
	STARTING      = eventsv1.Lifecycle_LIFECYCLE_STARTING
	READY         = eventsv1.Lifecycle_LIFECYCLE_READY
	RESERVED      = eventsv1.Lifecycle_LIFECYCLE_RESERVED
	ALLOCATED     = eventsv1.Lifecycle_LIFECYCLE_ALLOCATED
	SHUTTING_DOWN = eventsv1.Lifecycle_LIFECYCLE_SHUTTING_DOWN
	TERMINATED    = eventsv1.Lifecycle_LIFECYCLE_TERMINATED
	UNHEALTHY     = eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY

	CONNECTED    = eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED
	DISCONNECTED = eventsv1.ConnectionState_CONNECTION_STATE_DISCONNECTED
)

// gameServerMatrix is the expected transition table, written from the
// lifecycle of docs/architecture.md ("Aggregates and the event catalogue")
// and independent of the package's own table. Each row is an event type,
// each column the lifecycle state it arrives in (ABS: no server yet). A cell
// is "-" when the event is refused, "=" when it is accepted and the lifecycle
// stays, and otherwise the state it moves the server to.
const gameServerMatrix = `
                     ABS SCH STA REA RES ALL SHU TER UNH
GameServerScheduled  SCH -   -   -   -   -   -   -   -
ProcessStarted       -   STA STA -   -   -   -   -   -
SdkConnected         -   =   =   =   =   =   =   -   =
SdkDisconnected      -   =   =   =   =   =   =   -   =
GameServerReady      -   -   REA -   REA REA -   -   -
GameServerReserved   -   -   -   RES -   -   -   -   -
HealthDegraded       -   -   =   =   =   =   =   -   -
HealthRecovered      -   -   =   =   =   =   =   -   -
GameServerUnhealthy  -   -   UNH UNH UNH UNH -   -   -
GameServerAllocated  -   -   -   ALL ALL -   -   -   -
ShutdownRequested    -   SHU SHU SHU SHU SHU -   -   SHU
ProcessExited        -   -   =   =   =   =   =   -   =
GameServerTerminated -   TER TER TER TER TER TER -   TER
LabelsChanged        -   =   =   =   =   =   =   -   =
ProcessSignalled     -   -   =   =   =   =   =   -   =
CounterChanged       -   =   =   =   =   =   -   -   -
ListChanged          -   =   =   =   =   =   -   -   -
AnnotationsChanged   -   =   =   =   =   =   =   -   =
TrackedPlayerConnected -   =   =   =   =   =   -   -   -
TrackedPlayerDisconnected -   =   =   =   =   =   -   -   -
PlayerCapacitySet    -   =   =   =   =   =   -   -   -
GameServerReallocated -   -   -   -   -   =   -   -   -
`

// gameServerEvents are the game server events of docs/architecture.md's
// event catalogue.
var gameServerEvents = []string{
	"GameServerScheduled", "ProcessStarted", "SdkConnected", "SdkDisconnected", "GameServerReady",
	"GameServerReserved", "HealthDegraded", "HealthRecovered", "GameServerUnhealthy",
	"GameServerAllocated", "ShutdownRequested", "ProcessExited", "GameServerTerminated", "LabelsChanged",
	"ProcessSignalled", "CounterChanged", "ListChanged", "AnnotationsChanged",
	"TrackedPlayerConnected", "TrackedPlayerDisconnected", "PlayerCapacitySet", "GameServerReallocated",
}

var lifecycleAbbrev = map[string]eventsv1.Lifecycle{
	"ABS": ABSENT, "SCH": SCHEDULED, "STA": STARTING, "REA": READY, "RES": RESERVED, "ALL": ALLOCATED,
	"SHU": SHUTTING_DOWN, "TER": TERMINATED, "UNH": UNHEALTHY,
}

// matrixCell is one cell of gameServerMatrix.
type matrixCell struct {
	event string
	from  eventsv1.Lifecycle
	cell  string
}

func parseMatrix(t *testing.T) []matrixCell {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(gameServerMatrix), "\n")
	var columns []eventsv1.Lifecycle
	for _, a := range strings.Fields(lines[0]) {
		l, ok := lifecycleAbbrev[a]
		if !ok {
			t.Fatalf("bad column %q", a)
		}
		columns = append(columns, l)
	}
	if len(columns) != len(eventsv1.Lifecycle_name) {
		t.Fatalf("matrix has %d columns, the proto %d lifecycle states", len(columns), len(eventsv1.Lifecycle_name))
	}
	var out []matrixCell
	var rows []string
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != len(columns)+1 {
			t.Fatalf("row %q has %d cells, want %d", line, len(f)-1, len(columns))
		}
		rows = append(rows, f[0])
		for i, c := range f[1:] {
			if _, ok := lifecycleAbbrev[c]; !ok && c != "-" && c != "=" {
				t.Fatalf("row %s: bad cell %q", f[0], c)
			}
			out = append(out, matrixCell{event: f[0], from: columns[i], cell: c})
		}
	}
	if !slices.Equal(rows, gameServerEvents) {
		t.Fatalf("matrix rows %v, want the catalog %v", rows, gameServerEvents)
	}
	// The matrix covers every event the registry gives the game server.
	gs, _ := events.AggregateOf(events.KindGameServer)
	if !slices.Equal(slices.Sorted(slices.Values(rows)), slices.Sorted(slices.Values(gs.Events))) {
		t.Fatalf("matrix rows %v, the registry's game server events %v", rows, gs.Events)
	}
	return out
}

// samplePayload returns a payload of each game server event type.
func samplePayload(t *testing.T, typ string) proto.Message {
	t.Helper()
	switch typ {
	case "GameServerScheduled":
		return &eventsv1.GameServerScheduled{Host: "hosts/h1", SdkDisconnectGraceSeconds: 30}
	case "ProcessStarted":
		return &eventsv1.ProcessStarted{Pid: 42, Attempt: 1}
	case "SdkConnected":
		return &eventsv1.SdkConnected{Transport: "grpc-stream"}
	case "SdkDisconnected":
		return &eventsv1.SdkDisconnected{Kind: eventsv1.DisconnectKind_DISCONNECT_KIND_RESET, GraceDeadline: tsAt(30)}
	case "GameServerReady":
		return &eventsv1.GameServerReady{}
	case "GameServerReserved":
		return &eventsv1.GameServerReserved{Until: tsAt(60)}
	case "HealthDegraded":
		return &eventsv1.HealthDegraded{MissedPeriods: 1, FailureThreshold: 3, PeriodSeconds: 5}
	case "HealthRecovered":
		return &eventsv1.HealthRecovered{LastHeartbeatTime: tsAt(0)}
	case "GameServerUnhealthy":
		return &eventsv1.GameServerUnhealthy{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED}
	case "GameServerAllocated":
		return &eventsv1.GameServerAllocated{GameSession: "gameSessions/s1"}
	case "ShutdownRequested":
		return &eventsv1.ShutdownRequested{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API}
	case "ProcessExited":
		return &eventsv1.ProcessExited{ExitCode: proto.Int32(0)}
	case "GameServerTerminated":
		return &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_EXITED}
	case "LabelsChanged":
		return &eventsv1.LabelsChanged{Set: map[string]string{"k": "v"}}
	case "ProcessSignalled":
		return &eventsv1.ProcessSignalled{Signal: "terminated", Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN, Deadline: tsAt(30)}
	case "CounterChanged":
		return &eventsv1.CounterChanged{Name: "rooms", Count: 2, Capacity: 10, CountDiff: 1}
	case "ListChanged":
		return &eventsv1.ListChanged{Name: "players", Capacity: 4, Values: []string{"p1", "p2"}, Added: []string{"p2"}}
	case "AnnotationsChanged":
		return &eventsv1.AnnotationsChanged{Set: map[string]string{"agones.dev/sdk-map": "dust"}}
	case "TrackedPlayerConnected":
		return &eventsv1.TrackedPlayerConnected{PlayerId: "alice", Count: 1}
	case "TrackedPlayerDisconnected":
		return &eventsv1.TrackedPlayerDisconnected{PlayerId: "alice"}
	case "PlayerCapacitySet":
		return &eventsv1.PlayerCapacitySet{Capacity: 10}
	case "GameServerReallocated":
		return &eventsv1.GameServerReallocated{GameSession: "gameSessions/s1", Counters: []*eventsv1.CounterChanged{{Name: "rooms", Count: 2, Capacity: 10, CountDiff: 1}}}
	}
	t.Fatalf("no sample payload for %s", typ)
	return nil
}

func TestApplyGameServerTransitionTable(t *testing.T) {
	for _, c := range parseMatrix(t) {
		t.Run(c.event+"/from_"+events.LifecycleName(c.from), func(t *testing.T) {
			var state *eventsv1.GameServerState
			if c.from != ABSENT {
				// With the counter and the list the samples change.
				state = &eventsv1.GameServerState{Name: gsName, Lifecycle: c.from,
					Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 10}},
					Lists:    map[string]*eventsv1.List{"players": {Capacity: 4, Values: []string{"p1"}}}}
			}
			data := samplePayload(t, c.event)
			if got := events.TypeOf(data); got != c.event {
				t.Fatalf("sample payload of %s is a %s", c.event, got)
			}
			next, err := applyChecked(t, events.ApplyGameServer, state, events.New(gsName, at(1), data))

			if c.cell == "-" {
				if next != nil {
					t.Errorf("state = %v, want nil with the error", next)
				}
				te := asTransitionError(t, err)
				want := events.TransitionError{Aggregate: gsName, From: events.LifecycleName(c.from), Event: c.event}
				if *te != want {
					t.Errorf("TransitionError = %+v, want %+v", *te, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ApplyGameServer: %v, want it accepted", err)
			}
			want := c.from
			if c.cell != "=" {
				want = lifecycleAbbrev[c.cell]
			}
			if next.GetLifecycle() != want {
				t.Errorf("lifecycle = %v, want %v", next.GetLifecycle(), want)
			}
			if !proto.Equal(next.GetUpdateTime(), tsAt(1)) {
				t.Errorf("update time = %v, want %v", next.GetUpdateTime(), tsAt(1))
			}
		})
	}
}

func TestApplyGameServerForeignEvent(t *testing.T) {
	state := &eventsv1.GameServerState{Name: gsName, Lifecycle: READY}
	_, err := events.ApplyGameServer(state, events.New(gsName, t0, &eventsv1.FleetDeleted{}))
	if err == nil {
		t.Fatal("ApplyGameServer(FleetDeleted) succeeded, want an error")
	}
	var te *events.TransitionError
	if errors.As(err, &te) {
		t.Errorf("err = %v, want a plain error, not a TransitionError", err)
	}
}

// gameServer drives one game server through commands and events, one
// second per event, checking that neither Decide nor Apply modifies its input.
type gameServer struct {
	t     *testing.T
	state *eventsv1.GameServerState
	clock int
}

// decide runs cmd, applies its events and returns them.
func (g *gameServer) decide(cmd events.GameServerCommand) []proto.Message {
	g.t.Helper()
	out, err := g.try(cmd)
	if err != nil {
		g.t.Fatalf("DecideGameServer(%T): %v", cmd, err)
	}
	return out
}

// try is decide that returns the error.
func (g *gameServer) try(cmd events.GameServerCommand) ([]proto.Message, error) {
	g.t.Helper()
	before := proto.Clone(g.state)
	out, err := events.DecideGameServer(gsName, g.state, cmd)
	if !proto.Equal(before, g.state) {
		g.t.Fatalf("DecideGameServer(%T) modified the state", cmd)
	}
	if err != nil {
		if out != nil {
			g.t.Errorf("DecideGameServer(%T) returned events with its error", cmd)
		}
		return nil, err
	}
	for _, m := range out {
		g.apply(m)
	}
	return out, nil
}

// apply folds one event.
func (g *gameServer) apply(m proto.Message) {
	g.t.Helper()
	g.clock++
	next, err := applyChecked(g.t, events.ApplyGameServer, g.state, events.New(gsName, at(g.clock), m))
	if err != nil {
		g.t.Fatalf("ApplyGameServer(%s): %v", events.TypeOf(m), err)
	}
	g.state = next
}

// fleetSpec is a normalized fleet spec, as a FleetCreated carries it.
func fleetSpec(t *testing.T) *eventsv1.FleetSpec {
	t.Helper()
	out, err := events.DecideFleet(fleetName, nil, events.CreateFleet{Spec: minimalSpec()})
	if err != nil {
		t.Fatal(err)
	}
	return out[0].(*eventsv1.FleetCreated).GetSpec()
}

// newServer returns a game server driven to lifecycle l (one of SCHEDULED,
// STARTING, READY, ALLOCATED, SHUTTING_DOWN, UNHEALTHY) by the usual path,
// with its SDK connected from STARTING on.
func newServer(t *testing.T, l eventsv1.Lifecycle) *gameServer {
	t.Helper()
	g := &gameServer{t: t}
	g.decide(events.ScheduleGameServer{Host: "hosts/h1", Spec: fleetSpec(t)})
	if l == SCHEDULED {
		return g
	}
	g.decide(events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: 100, Address: "10.0.0.1", Attempt: 1, Ports: []*eventsv1.Port{{Name: "game", Port: 7777}}}})
	g.decide(events.RecordSDKConnected{Transport: "grpc-stream"})
	if l == STARTING {
		return g
	}
	g.decide(events.MarkReady{})
	switch l {
	case READY:
	case ALLOCATED:
		g.apply(&eventsv1.GameServerAllocated{GameSession: "gameSessions/s1"})
	case SHUTTING_DOWN:
		g.decide(events.RequestShutdown{
			Reason:   eventsv1.Reason_REASON_FLEET_SCALED_DOWN,
			Evidence: &eventsv1.Evidence{RequestedBy: "controllers/c1"},
			Deadline: at(100),
		})
	case UNHEALTHY:
		g.decide(events.MarkUnhealthy{
			Reason:   eventsv1.Reason_REASON_HEALTH_CHECK_FAILED,
			Evidence: &eventsv1.Evidence{MissedPeriods: 3, FailureThreshold: 3, PeriodSeconds: 5},
		})
	default:
		t.Fatalf("newServer(%v) not supported", l)
	}
	if g.state.GetLifecycle() != l {
		t.Fatalf("newServer: lifecycle %v, want %v", g.state.GetLifecycle(), l)
	}
	return g
}

func TestGameServerHappyPath(t *testing.T) {
	g := &gameServer{t: t}
	steps := []struct {
		name          string
		cmd           events.GameServerCommand
		event         proto.Message // applied directly when cmd is nil
		wantEvents    []string
		wantLifecycle eventsv1.Lifecycle
	}{
		{name: "schedule", cmd: events.ScheduleGameServer{Host: "hosts/h1", Spec: fleetSpec(t)}, wantEvents: []string{"GameServerScheduled"}, wantLifecycle: SCHEDULED},
		{name: "process started", cmd: events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: 100, Attempt: 1}}, wantEvents: []string{"ProcessStarted"}, wantLifecycle: STARTING},
		{name: "sdk connected", cmd: events.RecordSDKConnected{Transport: "grpc-stream", RemoteAddress: "127.0.0.1:5000"}, wantEvents: []string{"SdkConnected"}, wantLifecycle: STARTING},
		{name: "ready", cmd: events.MarkReady{}, wantEvents: []string{"GameServerReady"}, wantLifecycle: READY},
		{name: "allocated", event: &eventsv1.GameServerAllocated{GameSession: "gameSessions/s1"}, wantLifecycle: ALLOCATED},
		{name: "ready again (reuse)", cmd: events.MarkReady{}, wantEvents: []string{"GameServerReady"}, wantLifecycle: READY},
		{name: "shutdown requested", cmd: events.RequestShutdown{Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN, Deadline: at(100)}, wantEvents: []string{"ShutdownRequested"}, wantLifecycle: SHUTTING_DOWN},
		{name: "process exited", cmd: events.RecordExit{Exited: &eventsv1.ProcessExited{ExitCode: proto.Int32(0), Attempt: 1}}, wantEvents: []string{"ProcessExited", "GameServerTerminated"}, wantLifecycle: TERMINATED},
	}
	for _, s := range steps {
		if s.cmd != nil {
			if got := types(g.decide(s.cmd)); !slices.Equal(got, s.wantEvents) {
				t.Fatalf("%s: events %v, want %v", s.name, got, s.wantEvents)
			}
		} else {
			g.apply(s.event)
		}
		if got := g.state.GetLifecycle(); got != s.wantLifecycle {
			t.Fatalf("%s: lifecycle %v, want %v", s.name, got, s.wantLifecycle)
		}
		switch s.name {
		case "allocated":
			if g.state.GetGameSession() != "gameSessions/s1" {
				t.Errorf("%s: game session %q", s.name, g.state.GetGameSession())
			}
		case "ready again (reuse)":
			if g.state.GetGameSession() != "" || !g.state.GetEverReady() {
				t.Errorf("%s: game session %q, ever ready %v; want cleared, true", s.name, g.state.GetGameSession(), g.state.GetEverReady())
			}
		}
	}
	if g.state.GetReason() != eventsv1.Reason_REASON_FLEET_SCALED_DOWN || g.state.GetPid() != 0 {
		t.Errorf("terminated with reason %v, pid %d; want FLEET_SCALED_DOWN, 0", g.state.GetReason(), g.state.GetPid())
	}
	if c := g.state.GetConnection(); c != eventsv1.ConnectionState_CONNECTION_STATE_DISCONNECTED {
		t.Errorf("terminated with connection %v, want DISCONNECTED: its process is gone", c)
	}
	if !proto.Equal(g.state.GetCreateTime(), tsAt(1)) || !proto.Equal(g.state.GetUpdateTime(), tsAt(g.clock)) {
		t.Errorf("create %v, update %v; want %v, %v", g.state.GetCreateTime(), g.state.GetUpdateTime(), tsAt(1), tsAt(g.clock))
	}
}

func TestScheduleGameServer(t *testing.T) {
	spec := fleetSpec(t)
	spec.Labels = map[string]string{"region": "eu"}
	g := &gameServer{t: t}
	g.decide(events.ScheduleGameServer{Host: "hosts/h1", Spec: spec})
	want := &eventsv1.GameServerState{
		Name:                      gsName,
		Host:                      "hosts/h1",
		Lifecycle:                 SCHEDULED,
		Template:                  spec.GetTemplate(),
		HealthPolicy:              spec.GetHealth(),
		SdkDisconnectGraceSeconds: 30,
		Labels:                    map[string]string{"region": "eu"},
		PlayerSessionPolicy:       spec.GetPlayerSessions(),
		CreateTime:                tsAt(1),
		UpdateTime:                tsAt(1),
	}
	if !proto.Equal(g.state, want) {
		t.Fatalf("state =\n%v\nwant\n%v", g.state, want)
	}
	spec.Labels["region"] = "changed"
	spec.Template.Command = "changed"
	if g.state.GetLabels()["region"] != "eu" || g.state.GetTemplate().GetCommand() == "changed" {
		t.Errorf("state shares memory with the fleet spec")
	}

	tests := []struct {
		name  string
		state *eventsv1.GameServerState
		host  string
		check func(t *testing.T, err error)
	}{
		{name: "bad host name", host: "h1", check: func(t *testing.T, err error) {
			if !errors.Is(err, events.ErrInvalidName) {
				t.Errorf("err = %v, want ErrInvalidName", err)
			}
		}},
		{name: "bad host id", host: "hosts/H1", check: func(t *testing.T, err error) {
			if !errors.Is(err, events.ErrInvalidName) {
				t.Errorf("err = %v, want ErrInvalidName", err)
			}
		}},
		{name: "already scheduled", state: g.state, host: "hosts/h2", check: func(t *testing.T, err error) {
			if te := asTransitionError(t, err); te.From != "SCHEDULED" {
				t.Errorf("From = %q, want SCHEDULED", te.From)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := events.DecideGameServer(gsName, tt.state, events.ScheduleGameServer{Host: tt.host, Spec: fleetSpec(t)})
			if out != nil {
				t.Errorf("events = %v, want none", types(out))
			}
			tt.check(t, err)
		})
	}
}

func TestRecordProcessStart(t *testing.T) {
	g := newServer(t, SCHEDULED)
	started := &eventsv1.ProcessStarted{Pid: 100, Address: "10.0.0.1", LogPath: "/var/log/gs-1.log", Attempt: 1, Ports: []*eventsv1.Port{{Name: "game", Port: 7777, Protocol: eventsv1.Protocol_PROTOCOL_UDP}}}
	g.decide(events.RecordProcessStart{Started: started})
	s := g.state
	if s.GetLifecycle() != STARTING || s.GetPid() != 100 || s.GetAddress() != "10.0.0.1" || s.GetLogPath() != "/var/log/gs-1.log" || s.GetStartAttempts() != 1 {
		t.Errorf("state after ProcessStarted = %v", s)
	}
	if !proto.Equal(s.GetPorts()[0], started.GetPorts()[0]) {
		t.Errorf("ports = %v, want %v", s.GetPorts(), started.GetPorts())
	}
	if s.GetHealth() != eventsv1.HealthState_HEALTH_STATE_HEALTHY {
		t.Errorf("health = %v, want HEALTHY", s.GetHealth())
	}
	started.Ports[0].Port = 1
	if s.GetPorts()[0].GetPort() != 7777 {
		t.Errorf("state shares the command's ports")
	}
}

func TestRecordSDKDisconnected(t *testing.T) {
	tests := []struct {
		name  string
		l     eventsv1.Lifecycle
		grace int32
	}{
		{name: "starting", l: STARTING, grace: 30},
		{name: "ready", l: READY, grace: 30},
		{name: "allocated", l: ALLOCATED, grace: 45},
		{name: "shutting down", l: SHUTTING_DOWN, grace: 30},
		{name: "unhealthy", l: UNHEALTHY, grace: 30},
		{name: "no grace", l: READY, grace: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newServer(t, tt.l)
			g.state.SdkDisconnectGraceSeconds = tt.grace
			before := proto.CloneOf(g.state)
			closed := at(500)

			out := g.decide(events.RecordSDKDisconnected{Kind: eventsv1.DisconnectKind_DISCONNECT_KIND_KEEPALIVE_TIMEOUT, At: closed, Detail: "keepalive"})

			if got := types(out); !slices.Equal(got, []string{"SdkDisconnected"}) {
				t.Fatalf("events = %v, want [SdkDisconnected]", got)
			}
			wantDeadline := timestamppb.New(closed.Add(time.Duration(tt.grace) * time.Second))
			if d := out[0].(*eventsv1.SdkDisconnected); !proto.Equal(d.GetGraceDeadline(), wantDeadline) || d.GetDetail() != "keepalive" {
				t.Errorf("event = %v, want grace deadline %v", d, wantDeadline.AsTime())
			}
			s := g.state
			if s.GetLifecycle() != tt.l {
				t.Errorf("lifecycle = %v, want %v unchanged", s.GetLifecycle(), tt.l)
			}
			if s.GetConnection() != DISCONNECTED || !proto.Equal(s.GetGraceDeadline(), wantDeadline) || !proto.Equal(s.GetConnectionSince(), tsAt(g.clock)) {
				t.Errorf("connection %v since %v, deadline %v; want DISCONNECTED since %v, deadline %v",
					s.GetConnection(), s.GetConnectionSince(), s.GetGraceDeadline(), tsAt(g.clock), wantDeadline)
			}
			if s.GetHealth() != before.GetHealth() || s.GetReason() != before.GetReason() {
				t.Errorf("health %v, reason %v changed from %v, %v", s.GetHealth(), s.GetReason(), before.GetHealth(), before.GetReason())
			}
			h := s.GetConnectionHistory()
			wantLast := &eventsv1.ConnectionChange{Time: tsAt(g.clock), Kind: eventsv1.DisconnectKind_DISCONNECT_KIND_KEEPALIVE_TIMEOUT}
			if len(h) != len(before.GetConnectionHistory())+1 || !proto.Equal(h[len(h)-1], wantLast) {
				t.Errorf("connection history = %v, want one more entry %v", h, wantLast)
			}

			// Reconnecting closes the grace window.
			if got := types(g.decide(events.RecordSDKConnected{Transport: "grpc"})); !slices.Equal(got, []string{"SdkConnected"}) {
				t.Fatalf("reconnect events = %v, want [SdkConnected]", got)
			}
			if g.state.GetConnection() != CONNECTED || g.state.GetGraceDeadline() != nil || g.state.GetLifecycle() != tt.l {
				t.Errorf("after reconnect: connection %v, deadline %v, lifecycle %v", g.state.GetConnection(), g.state.GetGraceDeadline(), g.state.GetLifecycle())
			}
		})
	}
}

func TestRecordSDKConnected(t *testing.T) {
	tests := []struct {
		name       string
		connection eventsv1.ConnectionState
		wantEvent  bool
	}{
		{name: "never connected", connection: eventsv1.ConnectionState_CONNECTION_STATE_UNSPECIFIED, wantEvent: true},
		{name: "already connected is a no-op", connection: CONNECTED, wantEvent: false},
		{name: "disconnected", connection: DISCONNECTED, wantEvent: true},
		{name: "unknown", connection: eventsv1.ConnectionState_CONNECTION_STATE_UNKNOWN, wantEvent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := &eventsv1.GameServerState{Name: gsName, Lifecycle: READY, Connection: tt.connection}
			out, err := events.DecideGameServer(gsName, state, events.RecordSDKConnected{Transport: "rest", RemoteAddress: "127.0.0.1:1"})
			if err != nil {
				t.Fatal(err)
			}
			if !tt.wantEvent {
				if len(out) != 0 {
					t.Errorf("events = %v, want none", types(out))
				}
				return
			}
			want := &eventsv1.SdkConnected{Transport: "rest", RemoteAddress: "127.0.0.1:1"}
			if len(out) != 1 || !proto.Equal(out[0], want) {
				t.Errorf("events = %v, want [%v]", out, want)
			}
		})
	}
}

func TestRecordExit(t *testing.T) {
	tests := []struct {
		name         string
		from         eventsv1.Lifecycle
		exited       *eventsv1.ProcessExited
		wantEvents   []string
		wantReason   eventsv1.Reason
		wantEvidence func(s *eventsv1.GameServerState) *eventsv1.Evidence // from the state before the exit
		wantFinal    eventsv1.Lifecycle
	}{
		{
			name:       "exit code after ready",
			from:       READY,
			exited:     &eventsv1.ProcessExited{ExitCode: proto.Int32(3), Attempt: 1},
			wantEvents: []string{"ProcessExited", "GameServerTerminated"},
			wantReason: eventsv1.Reason_REASON_PROCESS_EXITED,
			wantEvidence: func(s *eventsv1.GameServerState) *eventsv1.Evidence {
				return &eventsv1.Evidence{ExitCode: proto.Int32(3), StartAttempts: 1, LastHeartbeatTime: s.GetLastHeartbeatTime(), ConnectionHistory: s.GetConnectionHistory()}
			},
			wantFinal: TERMINATED,
		},
		{
			name:       "exit code zero is kept",
			from:       ALLOCATED,
			exited:     &eventsv1.ProcessExited{ExitCode: proto.Int32(0), Attempt: 1},
			wantEvents: []string{"ProcessExited", "GameServerTerminated"},
			wantReason: eventsv1.Reason_REASON_PROCESS_EXITED,
			wantEvidence: func(s *eventsv1.GameServerState) *eventsv1.Evidence {
				return &eventsv1.Evidence{ExitCode: proto.Int32(0), StartAttempts: 1, LastHeartbeatTime: s.GetLastHeartbeatTime(), ConnectionHistory: s.GetConnectionHistory()}
			},
			wantFinal: TERMINATED,
		},
		{
			name:       "signal after ready",
			from:       READY,
			exited:     &eventsv1.ProcessExited{Signal: "killed", Attempt: 1},
			wantEvents: []string{"ProcessExited", "GameServerTerminated"},
			wantReason: eventsv1.Reason_REASON_PROCESS_EXITED,
			wantEvidence: func(s *eventsv1.GameServerState) *eventsv1.Evidence {
				return &eventsv1.Evidence{Signal: "killed", StartAttempts: 1, LastHeartbeatTime: s.GetLastHeartbeatTime(), ConnectionHistory: s.GetConnectionHistory()}
			},
			wantFinal: TERMINATED,
		},
		{
			name:       "crash before ready without restart",
			from:       STARTING,
			exited:     &eventsv1.ProcessExited{ExitCode: proto.Int32(1), BeforeReady: true, Attempt: 3},
			wantEvents: []string{"ProcessExited", "GameServerTerminated"},
			wantReason: eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY,
			wantEvidence: func(s *eventsv1.GameServerState) *eventsv1.Evidence {
				return &eventsv1.Evidence{ExitCode: proto.Int32(1), StartAttempts: 3, LastHeartbeatTime: s.GetLastHeartbeatTime(), ConnectionHistory: s.GetConnectionHistory()}
			},
			wantFinal: TERMINATED,
		},
		{
			name:       "crash before ready with restart",
			from:       STARTING,
			exited:     &eventsv1.ProcessExited{ExitCode: proto.Int32(1), BeforeReady: true, Attempt: 1, WillRestart: true},
			wantEvents: []string{"ProcessExited"},
			wantFinal:  STARTING,
		},
		{
			name:       "exit while shutting down keeps the shutdown reason",
			from:       SHUTTING_DOWN,
			exited:     &eventsv1.ProcessExited{ExitCode: proto.Int32(0), Attempt: 1},
			wantEvents: []string{"ProcessExited", "GameServerTerminated"},
			wantReason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN,
			wantEvidence: func(s *eventsv1.GameServerState) *eventsv1.Evidence {
				return &eventsv1.Evidence{RequestedBy: "controllers/c1", ExitCode: proto.Int32(0), StartAttempts: 1, LastHeartbeatTime: s.GetLastHeartbeatTime(), ConnectionHistory: s.GetConnectionHistory()}
			},
			wantFinal: TERMINATED,
		},
		{
			name:       "killed at the shutdown deadline keeps the shutdown reason",
			from:       SHUTTING_DOWN,
			exited:     &eventsv1.ProcessExited{Signal: "killed", BeforeReady: true, Attempt: 1},
			wantEvents: []string{"ProcessExited", "GameServerTerminated"},
			wantReason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN,
			wantEvidence: func(s *eventsv1.GameServerState) *eventsv1.Evidence {
				return &eventsv1.Evidence{RequestedBy: "controllers/c1", Signal: "killed", StartAttempts: 1, LastHeartbeatTime: s.GetLastHeartbeatTime(), ConnectionHistory: s.GetConnectionHistory()}
			},
			wantFinal: TERMINATED,
		},
		{
			name:       "exit while unhealthy keeps the health reason",
			from:       UNHEALTHY,
			exited:     &eventsv1.ProcessExited{Signal: "killed", Attempt: 1},
			wantEvents: []string{"ProcessExited", "GameServerTerminated"},
			wantReason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED,
			wantEvidence: func(s *eventsv1.GameServerState) *eventsv1.Evidence {
				return &eventsv1.Evidence{MissedPeriods: 3, FailureThreshold: 3, PeriodSeconds: 5, Signal: "killed", StartAttempts: 1, LastHeartbeatTime: s.GetLastHeartbeatTime(), ConnectionHistory: s.GetConnectionHistory()}
			},
			wantFinal: TERMINATED,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newServer(t, tt.from)
			before := proto.CloneOf(g.state)

			out := g.decide(events.RecordExit{Exited: tt.exited})

			if got := types(out); !slices.Equal(got, tt.wantEvents) {
				t.Fatalf("events = %v, want %v", got, tt.wantEvents)
			}
			if !proto.Equal(out[0], tt.exited) {
				t.Errorf("ProcessExited = %v, want %v", out[0], tt.exited)
			}
			if g.state.GetLifecycle() != tt.wantFinal || g.state.GetPid() != 0 {
				t.Errorf("lifecycle %v, pid %d; want %v, 0", g.state.GetLifecycle(), g.state.GetPid(), tt.wantFinal)
			}
			if len(out) < 2 {
				return
			}
			term := out[1].(*eventsv1.GameServerTerminated)
			want := &eventsv1.GameServerTerminated{Reason: tt.wantReason, Evidence: tt.wantEvidence(before)}
			if !proto.Equal(term, want) {
				t.Errorf("GameServerTerminated =\n%v\nwant\n%v", term, want)
			}
			if g.state.GetReason() != tt.wantReason || !proto.Equal(g.state.GetEvidence(), want.GetEvidence()) {
				t.Errorf("state reason %v, evidence %v; want %v, %v", g.state.GetReason(), g.state.GetEvidence(), tt.wantReason, want.GetEvidence())
			}
		})
	}
}

func TestRecordExitRefused(t *testing.T) {
	tests := []struct {
		name string
		from eventsv1.Lifecycle
	}{
		{name: "scheduled has no process", from: SCHEDULED},
		{name: "terminated", from: TERMINATED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := &eventsv1.GameServerState{Name: gsName, Lifecycle: tt.from}
			out, err := events.DecideGameServer(gsName, state, events.RecordExit{Exited: &eventsv1.ProcessExited{ExitCode: proto.Int32(0)}})
			if out != nil {
				t.Errorf("events = %v, want none", types(out))
			}
			if te := asTransitionError(t, err); te.Event != "ProcessExited" || te.From != events.LifecycleName(tt.from) {
				t.Errorf("TransitionError = %+v", te)
			}
		})
	}
}

func TestRestartBeforeReady(t *testing.T) {
	g := newServer(t, STARTING)

	out := g.decide(events.RecordExit{Exited: &eventsv1.ProcessExited{ExitCode: proto.Int32(1), BeforeReady: true, Attempt: 1, WillRestart: true}})
	if got := types(out); !slices.Equal(got, []string{"ProcessExited"}) {
		t.Fatalf("exit events = %v, want [ProcessExited]", got)
	}
	if g.state.GetLifecycle() != STARTING || g.state.GetPid() != 0 {
		t.Fatalf("after exit: lifecycle %v, pid %d; want STARTING, 0", g.state.GetLifecycle(), g.state.GetPid())
	}

	g.decide(events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: 200, Attempt: 2}})
	if g.state.GetLifecycle() != STARTING || g.state.GetPid() != 200 || g.state.GetStartAttempts() != 2 {
		t.Fatalf("after restart: lifecycle %v, pid %d, attempts %d; want STARTING, 200, 2", g.state.GetLifecycle(), g.state.GetPid(), g.state.GetStartAttempts())
	}

	// The first process's SDK connection died with it: the new process's
	// first SDK call is a new connection, not a no-op.
	if got := types(g.decide(events.RecordSDKConnected{Transport: "grpc-stream"})); !slices.Equal(got, []string{"SdkConnected"}) {
		t.Fatalf("connect of the restarted process: events %v, want [SdkConnected]", got)
	}
	if !proto.Equal(g.state.GetConnectionSince(), tsAt(g.clock)) {
		t.Errorf("connection since %v, want the new connection's %v", g.state.GetConnectionSince(), tsAt(g.clock))
	}

	out = g.decide(events.RecordExit{Exited: &eventsv1.ProcessExited{ExitCode: proto.Int32(1), BeforeReady: true, Attempt: 2}})
	if got := types(out); !slices.Equal(got, []string{"ProcessExited", "GameServerTerminated"}) {
		t.Fatalf("final exit events = %v", got)
	}
	term := out[1].(*eventsv1.GameServerTerminated)
	if term.GetReason() != eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY || term.GetEvidence().GetStartAttempts() != 2 {
		t.Errorf("terminated %v, want PROCESS_CRASHED_BEFORE_READY after 2 attempts", term)
	}
	if g.state.GetLifecycle() != TERMINATED {
		t.Errorf("lifecycle %v, want TERMINATED", g.state.GetLifecycle())
	}
}

func TestRequestShutdown(t *testing.T) {
	tests := []struct {
		name string
		from eventsv1.Lifecycle
	}{
		{name: "scheduled", from: SCHEDULED},
		{name: "starting", from: STARTING},
		{name: "ready", from: READY},
		{name: "allocated", from: ALLOCATED},
		{name: "unhealthy", from: UNHEALTHY},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newServer(t, tt.from)
			evidence := &eventsv1.Evidence{RequestedBy: "users/alice"}
			out := g.decide(events.RequestShutdown{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API, Evidence: evidence, Deadline: at(300)})
			want := &eventsv1.ShutdownRequested{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API, Evidence: &eventsv1.Evidence{RequestedBy: "users/alice"}, Deadline: tsAt(300)}
			if len(out) != 1 || !proto.Equal(out[0], want) {
				t.Fatalf("events = %v, want [%v]", out, want)
			}
			evidence.RequestedBy = "changed"
			s := g.state
			if s.GetLifecycle() != SHUTTING_DOWN || s.GetReason() != want.GetReason() || !proto.Equal(s.GetEvidence(), want.GetEvidence()) || !proto.Equal(s.GetShutdownDeadline(), tsAt(300)) {
				t.Errorf("state = %v", s)
			}

			after := proto.CloneOf(g.state)
			again := g.decide(events.RequestShutdown{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, Deadline: at(400)})
			if len(again) != 0 {
				t.Errorf("second RequestShutdown events = %v, want none", types(again))
			}
			if !proto.Equal(after, g.state) {
				t.Errorf("second RequestShutdown changed the state")
			}
		})
	}
}

func TestMarkUnhealthy(t *testing.T) {
	g := newServer(t, READY)
	before := proto.CloneOf(g.state)
	ev := &eventsv1.Evidence{MissedPeriods: 3, FailureThreshold: 3, PeriodSeconds: 5, LastHeartbeatTime: tsAt(-15)}
	out := g.decide(events.MarkUnhealthy{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, Evidence: ev})
	if got := types(out); !slices.Equal(got, []string{"GameServerUnhealthy"}) {
		t.Fatalf("events = %v", got)
	}
	s := g.state
	if s.GetLifecycle() != UNHEALTHY || s.GetHealth() != eventsv1.HealthState_HEALTH_STATE_FAILED || s.GetReason() != eventsv1.Reason_REASON_HEALTH_CHECK_FAILED || !proto.Equal(s.GetEvidence(), ev) {
		t.Errorf("state = %v", s)
	}
	if s.GetConnection() != before.GetConnection() || s.GetPid() != before.GetPid() {
		t.Errorf("connection or process changed: %v", s)
	}
	ev.MissedPeriods = 99
	if s.GetEvidence().GetMissedPeriods() != 3 {
		t.Errorf("state shares the command's evidence")
	}

	// A second verdict is refused: UNHEALTHY is terminal for the server.
	_, err := g.try(events.MarkUnhealthy{Reason: eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED})
	if te := asTransitionError(t, err); te.From != "UNHEALTHY" || te.Event != "GameServerUnhealthy" {
		t.Errorf("TransitionError = %+v", te)
	}
}

func TestTerminateWithoutExit(t *testing.T) {
	g := newServer(t, ALLOCATED)
	if c := g.state.GetConnection(); c != eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED {
		t.Fatalf("allocated with connection %v, want CONNECTED", c)
	}
	ev := &eventsv1.Evidence{Detail: "host h1 lost"}
	g.decide(events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST, Evidence: ev})
	if g.state.GetLifecycle() != TERMINATED || g.state.GetReason() != eventsv1.Reason_REASON_HOST_LOST || !proto.Equal(g.state.GetEvidence(), ev) || g.state.GetPid() != 0 {
		t.Errorf("state = %v", g.state)
	}
	if c := g.state.GetConnection(); c != eventsv1.ConnectionState_CONNECTION_STATE_DISCONNECTED {
		t.Errorf("terminated with connection %v, want DISCONNECTED", c)
	}
}

// terminatedServer is a server that was ready and connected when its host
// was lost; nothing saw its process exit.
func terminatedServer(t *testing.T) *gameServer {
	g := newServer(t, READY)
	g.decide(events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST})
	if g.state.GetLifecycle() != TERMINATED {
		t.Fatalf("lifecycle %v, want TERMINATED", g.state.GetLifecycle())
	}
	return g
}

func TestNothingAfterTerminated(t *testing.T) {
	tests := []struct {
		name string
		cmd  events.GameServerCommand
	}{
		{name: "schedule", cmd: events.ScheduleGameServer{Host: "hosts/h1", Spec: minimalSpec()}},
		{name: "process start", cmd: events.RecordProcessStart{Started: &eventsv1.ProcessStarted{Pid: 1, Attempt: 2}}},
		{name: "ready", cmd: events.MarkReady{}},
		{name: "sdk connected", cmd: events.RecordSDKConnected{Transport: "grpc"}},
		{name: "sdk disconnected", cmd: events.RecordSDKDisconnected{At: at(50)}},
		{name: "shutdown", cmd: events.RequestShutdown{Reason: eventsv1.Reason_REASON_FLEET_DELETED, Deadline: at(60)}},
		{name: "exit", cmd: events.RecordExit{Exited: &eventsv1.ProcessExited{Signal: "killed"}}},
		{name: "exit with restart", cmd: events.RecordExit{Exited: &eventsv1.ProcessExited{Signal: "killed", WillRestart: true}}},
		{name: "unhealthy", cmd: events.MarkUnhealthy{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED}},
		{name: "terminate again", cmd: events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST}},
		{name: "labels", cmd: events.SetLabels{Set: map[string]string{"k": "v"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := terminatedServer(t)
			out, err := g.try(tt.cmd)
			if out != nil {
				t.Errorf("events = %v, want none", types(out))
			}
			if te := asTransitionError(t, err); te.From != "TERMINATED" || te.Aggregate != gsName {
				t.Errorf("TransitionError = %+v, want From TERMINATED on %s", te, gsName)
			}
		})
	}
}

func TestHealthChangesOnlyHealth(t *testing.T) {
	// The health dimension: what HealthDegraded and HealthRecovered may change.
	clearHealth := func(s *eventsv1.GameServerState) *eventsv1.GameServerState {
		s = proto.CloneOf(s)
		s.Health, s.MissedPeriods, s.LastHeartbeatTime, s.UpdateTime = 0, 0, nil, nil
		return s
	}
	for _, l := range []eventsv1.Lifecycle{STARTING, READY, ALLOCATED, SHUTTING_DOWN} {
		t.Run(events.LifecycleName(l), func(t *testing.T) {
			g := newServer(t, l)
			g.decide(events.RecordSDKDisconnected{Kind: eventsv1.DisconnectKind_DISCONNECT_KIND_RESET, At: at(20)})
			before := proto.CloneOf(g.state)

			g.apply(&eventsv1.HealthDegraded{MissedPeriods: 2, FailureThreshold: 3, PeriodSeconds: 5, LastHeartbeatTime: tsAt(-10)})
			s := g.state
			if s.GetHealth() != eventsv1.HealthState_HEALTH_STATE_DEGRADED || s.GetMissedPeriods() != 2 || !proto.Equal(s.GetLastHeartbeatTime(), tsAt(-10)) {
				t.Errorf("after HealthDegraded: health %v, missed %d, heartbeat %v", s.GetHealth(), s.GetMissedPeriods(), s.GetLastHeartbeatTime())
			}
			if !proto.Equal(clearHealth(before), clearHealth(s)) {
				t.Errorf("HealthDegraded changed more than health:\nbefore %v\nafter  %v", before, s)
			}

			g.apply(&eventsv1.HealthRecovered{LastHeartbeatTime: tsAt(30)})
			s = g.state
			if s.GetHealth() != eventsv1.HealthState_HEALTH_STATE_HEALTHY || s.GetMissedPeriods() != 0 || !proto.Equal(s.GetLastHeartbeatTime(), tsAt(30)) {
				t.Errorf("after HealthRecovered: health %v, missed %d, heartbeat %v", s.GetHealth(), s.GetMissedPeriods(), s.GetLastHeartbeatTime())
			}
			if !proto.Equal(clearHealth(before), clearHealth(s)) {
				t.Errorf("HealthRecovered changed more than health:\nbefore %v\nafter  %v", before, s)
			}
		})
	}
}

func TestConnectionHistoryBounded(t *testing.T) {
	g := newServer(t, READY) // one connect so far
	for i := range 2*events.MaxConnectionHistory + 3 {
		if i%2 == 0 {
			g.decide(events.RecordSDKDisconnected{Kind: eventsv1.DisconnectKind_DISCONNECT_KIND_RESET, At: at(g.clock)})
		} else {
			g.decide(events.RecordSDKConnected{Transport: "grpc"})
		}
		if n := len(g.state.GetConnectionHistory()); n > events.MaxConnectionHistory {
			t.Fatalf("after %d changes the history has %d entries, want at most %d", i+2, n, events.MaxConnectionHistory)
		}
	}
	h := g.state.GetConnectionHistory()
	if len(h) != events.MaxConnectionHistory {
		t.Fatalf("history has %d entries, want %d", len(h), events.MaxConnectionHistory)
	}
	// The newest entries are kept, oldest first; the last one was a disconnect.
	for i, c := range h {
		wantTime := tsAt(g.clock - len(h) + 1 + i)
		wantConnected := (len(h)-1-i)%2 == 1
		if !proto.Equal(c.GetTime(), wantTime) || c.GetConnected() != wantConnected {
			t.Errorf("history[%d] = %v, want time %v, connected %v", i, c, wantTime.AsTime(), wantConnected)
		}
	}

	out := g.decide(events.RecordExit{Exited: &eventsv1.ProcessExited{Signal: "killed"}})
	if got := out[1].(*eventsv1.GameServerTerminated).GetEvidence().GetConnectionHistory(); len(got) != events.MaxConnectionHistory {
		t.Errorf("evidence history has %d entries, want %d", len(got), events.MaxConnectionHistory)
	}
}

func TestReserveAndAllocate(t *testing.T) {
	g := newServer(t, READY)
	g.apply(&eventsv1.GameServerReserved{Until: tsAt(90)})
	if g.state.GetLifecycle() != RESERVED || !proto.Equal(g.state.GetReservedUntil(), tsAt(90)) {
		t.Fatalf("after reserve: %v", g.state)
	}
	g.decide(events.MarkReady{})
	if g.state.GetLifecycle() != READY || g.state.GetReservedUntil() != nil {
		t.Fatalf("ready after reserve: lifecycle %v, reserved until %v", g.state.GetLifecycle(), g.state.GetReservedUntil())
	}
	g.apply(&eventsv1.GameServerReserved{Until: tsAt(90)})
	g.apply(&eventsv1.GameServerAllocated{GameSession: "gameSessions/s2"})
	if g.state.GetLifecycle() != ALLOCATED || g.state.GetReservedUntil() != nil || g.state.GetGameSession() != "gameSessions/s2" {
		t.Fatalf("allocated after reserve: %v", g.state)
	}
}

func TestSetLabels(t *testing.T) {
	tests := []struct {
		name      string
		initial   map[string]string
		cmd       events.SetLabels
		want      map[string]string
		wantField string
	}{
		{name: "add to none", cmd: events.SetLabels{Set: map[string]string{"map": "dust"}}, want: map[string]string{"map": "dust"}},
		{name: "set and remove", initial: map[string]string{"region": "eu", "mode": "x"}, cmd: events.SetLabels{Set: map[string]string{"map": "dust", "mode": "y"}, Removed: []string{"region"}}, want: map[string]string{"mode": "y", "map": "dust"}},
		{name: "remove missing", initial: map[string]string{"a": "1"}, cmd: events.SetLabels{Removed: []string{"b"}}, want: map[string]string{"a": "1"}},
		{name: "bad key", cmd: events.SetLabels{Set: map[string]string{"a=b": "1"}}, wantField: "labels"},
		{name: "bad value", cmd: events.SetLabels{Set: map[string]string{"a": "1\n2"}}, wantField: "labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newServer(t, READY)
			g.state.Labels = tt.initial
			out, err := g.try(tt.cmd)
			if tt.wantField != "" {
				if ve := asValidationError(t, err); ve.Field != tt.wantField {
					t.Errorf("Field = %q, want %q", ve.Field, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := types(out); !slices.Equal(got, []string{"LabelsChanged"}) {
				t.Fatalf("events = %v", got)
			}
			if !maps.Equal(g.state.GetLabels(), tt.want) {
				t.Errorf("labels = %v, want %v", g.state.GetLabels(), tt.want)
			}
			if g.state.GetLifecycle() != READY {
				t.Errorf("lifecycle = %v, want READY", g.state.GetLifecycle())
			}
		})
	}
}

func TestReadyIsRefusedOutsideTheTable(t *testing.T) {
	tests := []struct {
		name string
		from eventsv1.Lifecycle
	}{
		{name: "scheduled", from: SCHEDULED},
		{name: "shutting down", from: SHUTTING_DOWN},
		{name: "unhealthy", from: UNHEALTHY},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newServer(t, tt.from)
			_, err := g.try(events.MarkReady{})
			if te := asTransitionError(t, err); te.From != events.LifecycleName(tt.from) || te.Event != "GameServerReady" {
				t.Errorf("TransitionError = %+v", te)
			}
		})
	}
}

func TestLifecycleName(t *testing.T) {
	tests := []struct {
		in   eventsv1.Lifecycle
		want string
	}{
		{in: ABSENT, want: "ABSENT"},
		{in: SCHEDULED, want: "SCHEDULED"},
		{in: STARTING, want: "STARTING"},
		{in: READY, want: "READY"},
		{in: RESERVED, want: "RESERVED"},
		{in: ALLOCATED, want: "ALLOCATED"},
		{in: SHUTTING_DOWN, want: "SHUTTING_DOWN"},
		{in: TERMINATED, want: "TERMINATED"},
		{in: UNHEALTHY, want: "UNHEALTHY"},
		{in: eventsv1.Lifecycle(99), want: "99"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := events.LifecycleName(tt.in); got != tt.want {
				t.Errorf("LifecycleName(%d) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestReasonName(t *testing.T) {
	tests := []struct {
		in   eventsv1.Reason
		want string
	}{
		{in: eventsv1.Reason_REASON_UNSPECIFIED, want: ""},
		{in: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED, want: "HEALTH_CHECK_FAILED"},
		{in: eventsv1.Reason_REASON_PROCESS_EXITED, want: "PROCESS_EXITED"},
		{in: eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY, want: "PROCESS_CRASHED_BEFORE_READY"},
		{in: eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED, want: "SDK_DISCONNECT_GRACE_EXPIRED"},
		{in: eventsv1.Reason_REASON_HOST_LOST, want: "HOST_LOST"},
		{in: eventsv1.Reason_REASON_FLEET_SCALED_DOWN, want: "FLEET_SCALED_DOWN"},
		{in: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_GAME, want: "SHUTDOWN_REQUESTED_BY_GAME"},
		{in: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API, want: "SHUTDOWN_REQUESTED_BY_API"},
		{in: eventsv1.Reason_REASON_READY_TIMEOUT, want: "READY_TIMEOUT"},
		{in: eventsv1.Reason_REASON_FLEET_DELETED, want: "FLEET_DELETED"},
		{in: eventsv1.Reason_REASON_PROCESS_START_FAILED, want: "PROCESS_START_FAILED"},
		{in: eventsv1.Reason_REASON_HOST_SHUTDOWN, want: "HOST_SHUTDOWN"},
		{in: eventsv1.Reason_REASON_AGENT_RESTARTED, want: "AGENT_RESTARTED"},
		{in: eventsv1.Reason_REASON_HOST_DRAINING, want: "HOST_DRAINING"},
		{in: eventsv1.Reason_REASON_FLEET_UPDATED, want: "FLEET_UPDATED"},
		{in: eventsv1.Reason(99), want: "99"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(int32(tt.in)), func(t *testing.T) {
			if got := events.ReasonName(tt.in); got != tt.want {
				t.Errorf("ReasonName(%d) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	// Every reason the proto declares is covered above.
	covered := map[eventsv1.Reason]bool{}
	for _, tt := range tests {
		covered[tt.in] = true
	}
	for v := range eventsv1.Reason_name {
		if !covered[eventsv1.Reason(v)] {
			t.Errorf("reason %v has no case", eventsv1.Reason(v))
		}
	}
}

// NotReadyAfter is derived from the transition table: the events that
// move a server's lifecycle anywhere but READY.
func TestNotReadyAfter(t *testing.T) {
	for _, typ := range []string{"GameServerAllocated", "GameServerReserved", "ShutdownRequested", "GameServerUnhealthy",
		"GameServerTerminated", "GameServerScheduled", "ProcessStarted"} {
		if !events.NotReadyAfter(typ) {
			t.Errorf("a server may be READY after %s", typ)
		}
	}
	for _, typ := range []string{"GameServerReady", "SdkConnected", "SdkDisconnected", "HealthDegraded", "HealthRecovered",
		"LabelsChanged", "ProcessExited", "ProcessSignalled", "FleetCreated", ""} {
		if events.NotReadyAfter(typ) {
			t.Errorf("a server is never READY after %s", typ)
		}
	}
}
