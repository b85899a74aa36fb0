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

const gsessID = "match-1"

var gsessName = events.GameSessionName(gsessID)

// psName is the resource name of a player session of the test game session.
func psName(id string) string { return events.PlayerSessionName(gsessID, id) }

const (
	psUNSPECIFIED  = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_UNSPECIFIED
	psRESERVED     = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_RESERVED
	psACTIVE       = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_ACTIVE
	psDISCONNECTED = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_DISCONNECTED
	psCOMPLETED    = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_COMPLETED
	psTIMED_OUT    = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_TIMED_OUT

	gsessABSENT = eventsv1.GameSessionStatus_GAME_SESSION_STATUS_UNSPECIFIED
	gsessACTIVE = eventsv1.GameSessionStatus_GAME_SESSION_STATUS_ACTIVE
	gsessENDED  = eventsv1.GameSessionStatus_GAME_SESSION_STATUS_ENDED

	endLEFT         = eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_LEFT
	endWINDOW       = eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_RECONNECT_WINDOW_EXPIRED
	endSESSIONENDED = eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_GAME_SESSION_ENDED
)

// testPolicy is the policy of most test sessions: 4 seats, 30 s to take a
// reservation, 60 s to reconnect.
func testPolicy() *eventsv1.GameSessionPolicy {
	return &eventsv1.GameSessionPolicy{MaxPlayers: 4, ReservationTimeoutSeconds: 30, ReconnectWindowSeconds: 60}
}

// asRefusedError returns err as a *RefusedError, failing the test if it is
// not one.
func asRefusedError(t *testing.T, err error) *events.RefusedError {
	t.Helper()
	var re *events.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v (%T), want an *events.RefusedError", err, err)
	}
	return re
}

// wantRefused fails the test unless err is a *RefusedError with reason.
func wantRefused(t *testing.T, err error, reason string) {
	t.Helper()
	if re := asRefusedError(t, err); re.Reason != reason {
		t.Errorf("Reason = %q (%s), want %q", re.Reason, re.Msg, reason)
	}
}

// player is a player session state of the test game session, built
// directly (not folded) for table tests.
func player(id string, slot int32, status eventsv1.PlayerSessionStatus) *eventsv1.PlayerSessionState {
	return &eventsv1.PlayerSessionState{Name: psName(id), PlayerId: "player-" + id, Slot: slot, Status: status, CreateTime: tsAt(0), UpdateTime: tsAt(0)}
}

// withDeadline sets the deadline that fits p's status: the reservation's
// while RESERVED, the reconnect window's while DISCONNECTED.
func withDeadline(p *eventsv1.PlayerSessionState, d *timestamppb.Timestamp) *eventsv1.PlayerSessionState {
	switch p.GetStatus() {
	case psRESERVED:
		p.ReservationDeadline = d
	case psDISCONNECTED:
		p.ReconnectDeadline = d
	}
	return p
}

// sessionState is an ACTIVE game session holding players, built directly.
func sessionState(policy *eventsv1.GameSessionPolicy, players ...*eventsv1.PlayerSessionState) *eventsv1.GameSessionState {
	return &eventsv1.GameSessionState{
		Name: gsessName, GameServer: gsName, Status: gsessACTIVE, Policy: policy, Players: players,
		CreateTime: tsAt(0), UpdateTime: tsAt(0),
	}
}

// gameSession drives a game session through commands and events, one second
// per event, checking that neither Decide nor Apply modifies its input.
type gameSession struct {
	t     *testing.T
	state *eventsv1.GameSessionState
	clock int
}

// decide runs cmd, applies its events and returns them.
func (g *gameSession) decide(cmd events.GameSessionCommand) []proto.Message {
	g.t.Helper()
	out, err := g.try(cmd)
	if err != nil {
		g.t.Fatalf("DecideGameSession(%T): %v", cmd, err)
	}
	return out
}

// try is decide that returns the error.
func (g *gameSession) try(cmd events.GameSessionCommand) ([]proto.Message, error) {
	g.t.Helper()
	before := proto.CloneOf(g.state)
	out, err := events.DecideGameSession(gsessName, g.state, cmd)
	if !proto.Equal(before, g.state) {
		g.t.Fatalf("DecideGameSession(%T) modified the state", cmd)
	}
	if err != nil {
		if out != nil {
			g.t.Errorf("DecideGameSession(%T) returned events with its error", cmd)
		}
		return nil, err
	}
	for _, m := range out {
		g.apply(m)
	}
	return out, nil
}

// apply folds one event.
func (g *gameSession) apply(m proto.Message) {
	g.t.Helper()
	g.clock++
	next, err := applyChecked(g.t, events.ApplyGameSession, g.state, events.New(gsessName, at(g.clock), m))
	if err != nil {
		g.t.Fatalf("ApplyGameSession(%s): %v", events.TypeOf(m), err)
	}
	g.state = next
}

// player returns the state of player session id, failing if there is none.
func (g *gameSession) player(id string) *eventsv1.PlayerSessionState {
	g.t.Helper()
	p := events.FindPlayer(g.state, id)
	if p == nil {
		g.t.Fatalf("no player session %q in %v", id, g.state)
	}
	return p
}

// newSession creates the test game session with policy and the seats its
// allocation reserved.
func newSession(t *testing.T, policy *eventsv1.GameSessionPolicy, seats ...*eventsv1.PlayerSeat) *gameSession {
	t.Helper()
	g := &gameSession{t: t}
	g.decide(events.CreateGameSession{Created: &eventsv1.GameSessionCreated{GameServer: gsName, Policy: policy, Players: seats}})
	return g
}

// --- the transition tables -------------------------------------------------

// playerMatrix is the expected player session transition table, written
// from docs/architecture.md and docs/player-sessions.md, independent of
// the package's own table. Each row is a player event, each column the player session status it arrives in. A
// cell is "-" when the event is refused, otherwise the status it leads to.
// RESERVED → COMPLETED is a cancelled reservation or a game session that
// ended before the player came.
const playerMatrix = `
                       RES ACT DIS COM TIM
PlayerAccepted         ACT -   -   -   -
PlayerDisconnected     -   DIS -   -   -
PlayerReconnected      -   -   ACT -   -
PlayerSessionCompleted COM COM COM -   -
PlayerSessionTimedOut  TIM -   -   -   -
PlayerTokenReissued    RES ACT DIS -   -
PlayerTakenOver        -   ACT -   -   -
`

var playerAbbrev = map[string]eventsv1.PlayerSessionStatus{
	"RES": psRESERVED, "ACT": psACTIVE, "DIS": psDISCONNECTED, "COM": psCOMPLETED, "TIM": psTIMED_OUT,
}

// gameSessionMatrix is the expected game session table: each row an event
// of the aggregate, each column the game session's status (ABS: none yet).
// "=" is accepted without changing the game session's status.
const gameSessionMatrix = `
                       ABS ACT END
GameSessionCreated     ACT -   -
GameSessionEnded       -   END -
PlayerSessionReserved  -   =   -
PlayerAccepted         -   =   -
PlayerDisconnected     -   =   -
PlayerReconnected      -   =   -
PlayerSessionCompleted -   =   -
PlayerSessionTimedOut  -   =   -
PlayerTokenReissued    -   =   -
PlayerTakenOver        -   =   -
`

var gameSessionAbbrev = map[string]eventsv1.GameSessionStatus{"ABS": gsessABSENT, "ACT": gsessACTIVE, "END": gsessENDED}

// cell is one cell of a transition matrix.
type cell struct {
	event, from, to string
}

// parseTable parses a matrix whose header and cells are keys of abbrev.
func parseTable[S comparable](t *testing.T, matrix string, abbrev map[string]S, states int) []cell {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(matrix), "\n")
	columns := strings.Fields(lines[0])
	if len(columns) != states {
		t.Fatalf("matrix has %d columns, the proto %d states", len(columns), states)
	}
	var out []cell
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != len(columns)+1 {
			t.Fatalf("row %q has %d cells, want %d", line, len(f)-1, len(columns))
		}
		for i, c := range f[1:] {
			if _, ok := abbrev[c]; !ok && c != "-" && c != "=" {
				t.Fatalf("row %s: bad cell %q", f[0], c)
			}
			out = append(out, cell{event: f[0], from: columns[i], to: c})
		}
	}
	return out
}

// playerPayload returns a sample payload of a player event about p1.
func playerPayload(t *testing.T, typ string) proto.Message {
	t.Helper()
	switch typ {
	case "PlayerSessionReserved":
		return &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "p9", PlayerId: "player-9", PlayerData: "d9", Slot: 5, ReservationDeadline: tsAt(90)}}
	case "PlayerAccepted":
		return &eventsv1.PlayerAccepted{PlayerSession: "p1"}
	case "PlayerDisconnected":
		return &eventsv1.PlayerDisconnected{PlayerSession: "p1", ReconnectDeadline: tsAt(60)}
	case "PlayerReconnected":
		return &eventsv1.PlayerReconnected{PlayerSession: "p1"}
	case "PlayerSessionCompleted":
		return &eventsv1.PlayerSessionCompleted{PlayerSession: "p1", Reason: endLEFT}
	case "PlayerSessionTimedOut":
		return &eventsv1.PlayerSessionTimedOut{PlayerSession: "p1"}
	case "PlayerTokenReissued":
		return &eventsv1.PlayerTokenReissued{PlayerSession: "p1", TokenGeneration: 1}
	case "PlayerTakenOver":
		return &eventsv1.PlayerTakenOver{PlayerSession: "p1", TokenGeneration: 1}
	case "GameSessionCreated":
		return &eventsv1.GameSessionCreated{GameServer: gsName, Policy: testPolicy(), Properties: map[string]string{"map": "dust"}}
	case "GameSessionEnded":
		return &eventsv1.GameSessionEnded{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_READY_AGAIN}
	}
	t.Fatalf("no sample payload for %s", typ)
	return nil
}

// fromStatusFor is the status p1 must be in for a player event to be
// allowed, so the game session table tests only the game session's status.
var fromStatusFor = map[string]eventsv1.PlayerSessionStatus{
	"PlayerAccepted": psRESERVED, "PlayerDisconnected": psACTIVE, "PlayerReconnected": psDISCONNECTED,
	"PlayerSessionCompleted": psACTIVE, "PlayerSessionTimedOut": psRESERVED, "PlayerTokenReissued": psDISCONNECTED,
	"PlayerTakenOver": psACTIVE,
}

func TestApplyPlayerSessionTransitionTable(t *testing.T) {
	for _, c := range parseTable(t, playerMatrix, playerAbbrev, len(eventsv1.PlayerSessionStatus_name)-1) {
		from := playerAbbrev[c.from]
		t.Run(c.event+"/from_"+events.PlayerSessionStatusName(from), func(t *testing.T) {
			p1 := withDeadline(player("p1", 3, from), tsAt(40))
			p1.ReconnectCount = 1
			p2 := player("p2", 0, psACTIVE)
			state := sessionState(testPolicy(), p2, p1)
			data := playerPayload(t, c.event)
			if got := events.TypeOf(data); got != c.event {
				t.Fatalf("sample payload of %s is a %s", c.event, got)
			}

			next, err := applyChecked(t, events.ApplyGameSession, state, events.New(gsessName, at(1), data))

			if c.to == "-" {
				if next != nil {
					t.Errorf("state = %v, want nil with the error", next)
				}
				te := asTransitionError(t, err)
				want := events.TransitionError{Aggregate: psName("p1"), From: events.PlayerSessionStatusName(from), Event: c.event}
				if *te != want {
					t.Errorf("TransitionError = %+v, want %+v", *te, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ApplyGameSession: %v, want it accepted", err)
			}
			got := events.FindPlayer(next, "p1")
			want := proto.CloneOf(p1)
			want.Status, want.UpdateTime = playerAbbrev[c.to], tsAt(1)
			if c.event != "PlayerTokenReissued" { // the seat's deadlines stay
				want.ReservationDeadline, want.ReconnectDeadline = nil, nil
			}
			switch c.event {
			case "PlayerAccepted":
				want.Connection = 1
			case "PlayerDisconnected":
				want.ReconnectDeadline = tsAt(60)
			case "PlayerReconnected":
				want.ReconnectCount, want.Connection = 2, 1
			case "PlayerTakenOver":
				want.ReconnectCount, want.Connection, want.ConnectionTokenGeneration = 2, 1, 1
			case "PlayerTokenReissued":
				want.TokenGeneration = 1
			case "PlayerSessionCompleted":
				want.EndReason = endLEFT
			}
			if !proto.Equal(got, want) {
				t.Errorf("p1 =\n%v\nwant\n%v", got, want)
			}
			if !proto.Equal(events.FindPlayer(next, "p2"), p2) {
				t.Errorf("p2 changed: %v", events.FindPlayer(next, "p2"))
			}
			if next.GetStatus() != gsessACTIVE || !proto.Equal(next.GetUpdateTime(), tsAt(1)) {
				t.Errorf("game session status %v, update time %v; want ACTIVE, %v", next.GetStatus(), next.GetUpdateTime(), tsAt(1))
			}
		})
	}
}

func TestApplyGameSessionTransitionTable(t *testing.T) {
	cells := parseTable(t, gameSessionMatrix, gameSessionAbbrev, len(eventsv1.GameSessionStatus_name))
	var rows []string
	for _, c := range cells {
		if !slices.Contains(rows, c.event) {
			rows = append(rows, c.event)
		}
	}
	// The game session events of docs/architecture.md's catalogue (there is
	// no GameSessionActivated: a game session is ACTIVE once created), and
	// its player session rows.
	catalog := []string{"GameSessionCreated", "GameSessionEnded", "PlayerSessionReserved", "PlayerAccepted",
		"PlayerDisconnected", "PlayerReconnected", "PlayerSessionCompleted", "PlayerSessionTimedOut",
		"PlayerTokenReissued", "PlayerTakenOver"}
	if !slices.Equal(rows, catalog) {
		t.Fatalf("matrix rows %v, want %v", rows, catalog)
	}
	for _, c := range cells {
		from := gameSessionAbbrev[c.from]
		t.Run(c.event+"/from_"+c.from, func(t *testing.T) {
			var state *eventsv1.GameSessionState
			status, ok := fromStatusFor[c.event]
			if !ok {
				status = psACTIVE
			}
			p1 := withDeadline(player("p1", 1, status), tsAt(40))
			switch from {
			case gsessACTIVE:
				state = sessionState(testPolicy(), p1)
			case gsessENDED:
				// p1 was in a status that allowed the event, then the session ended.
				var err error
				state, err = events.ApplyGameSession(sessionState(testPolicy(), p1), events.New(gsessName, at(0), &eventsv1.GameSessionEnded{}))
				if err != nil {
					t.Fatal(err)
				}
			}
			next, err := applyChecked(t, events.ApplyGameSession, state, events.New(gsessName, at(1), playerPayload(t, c.event)))

			if c.to == "-" {
				if next != nil {
					t.Errorf("state = %v, want nil with the error", next)
				}
				te := asTransitionError(t, err)
				want := events.TransitionError{Aggregate: gsessName, From: events.GameSessionStatusName(from), Event: c.event}
				if *te != want {
					t.Errorf("TransitionError = %+v, want %+v", *te, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ApplyGameSession: %v, want it accepted", err)
			}
			want := from
			if c.to != "=" {
				want = gameSessionAbbrev[c.to]
			}
			if next.GetStatus() != want || !proto.Equal(next.GetUpdateTime(), tsAt(1)) {
				t.Errorf("status %v, update time %v; want %v, %v", next.GetStatus(), next.GetUpdateTime(), want, tsAt(1))
			}
		})
	}
}

func TestApplyGameSessionErrors(t *testing.T) {
	active := sessionState(testPolicy(), player("p1", 0, psACTIVE), player("p2", 1, psCOMPLETED))
	tests := []struct {
		name  string
		state *eventsv1.GameSessionState
		data  proto.Message
	}{
		{name: "foreign event", state: active, data: &eventsv1.FleetDeleted{}},
		{name: "game server event", state: active, data: &eventsv1.GameServerReady{}},
		{name: "unknown player session", state: active, data: &eventsv1.PlayerAccepted{PlayerSession: "nobody"}},
		{name: "player event with no player session", state: active, data: &eventsv1.PlayerSessionCompleted{}},
		{name: "reserve an existing player session", state: active, data: &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "p1", PlayerId: "x", Slot: 2}}},
		{name: "reserve a finished player session's id", state: active, data: &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "p2", PlayerId: "x", Slot: 2}}},
		{name: "reserve with an invalid id", state: active, data: &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "P-3", PlayerId: "x", Slot: 2}}},
		{name: "reserve with no seat", state: active, data: &eventsv1.PlayerSessionReserved{}},
		{name: "created with an invalid seat id", data: &eventsv1.GameSessionCreated{Players: []*eventsv1.PlayerSeat{{PlayerSession: "a.b"}}}},
		{name: "token reissued at the same generation", state: active, data: &eventsv1.PlayerTokenReissued{PlayerSession: "p1"}},
		{name: "created with a repeated seat id", data: &eventsv1.GameSessionCreated{Players: []*eventsv1.PlayerSeat{{PlayerSession: "a", Slot: 0}, {PlayerSession: "a", Slot: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, err := applyChecked(t, events.ApplyGameSession, tt.state, events.New(gsessName, at(1), tt.data))
			if err == nil {
				t.Fatalf("ApplyGameSession(%s) = %v, want an error", events.TypeOf(tt.data), next)
			}
			if next != nil {
				t.Errorf("state = %v, want nil with the error", next)
			}
			var te *events.TransitionError
			if errors.As(err, &te) {
				t.Errorf("err = %v, want a plain error, not a TransitionError", err)
			}
		})
	}
}

func TestApplyGameSessionDoesNotModifyInput(t *testing.T) {
	// A state with a seat in every status and every kind of field set.
	rich := func() *eventsv1.GameSessionState {
		s := sessionState(testPolicy(),
			withDeadline(player("r", 0, psRESERVED), tsAt(30)),
			player("a", 1, psACTIVE),
			withDeadline(player("d", 2, psDISCONNECTED), tsAt(60)),
			player("c", 3, psCOMPLETED),
			player("x", 4, psTIMED_OUT))
		s.Properties = map[string]string{"map": "dust"}
		return s
	}
	payloads := []proto.Message{
		&eventsv1.GameSessionEnded{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED},
		&eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "n", PlayerId: "player-n", Slot: 5}},
		&eventsv1.PlayerAccepted{PlayerSession: "r"},
		&eventsv1.PlayerDisconnected{PlayerSession: "a", ReconnectDeadline: tsAt(99)},
		&eventsv1.PlayerReconnected{PlayerSession: "d"},
		&eventsv1.PlayerSessionCompleted{PlayerSession: "d", Reason: endWINDOW},
		&eventsv1.PlayerSessionTimedOut{PlayerSession: "r"},
	}
	for _, m := range payloads {
		t.Run(events.TypeOf(m), func(t *testing.T) {
			state := rich()
			next, err := applyChecked(t, events.ApplyGameSession, state, events.New(gsessName, at(1), m))
			if err != nil {
				t.Fatal(err)
			}
			// The new state shares no memory with the old one.
			next.Players[0].Slot = 99
			next.Players[1].Status = psTIMED_OUT
			next.Properties["map"] = "changed"
			next.Policy.MaxPlayers = 99
			if !proto.Equal(state, rich()) {
				t.Errorf("changing the new state changed the old one:\n%v", state)
			}
		})
	}
}

// --- CreateGameSession ---------------------------------------------------------

func TestCreateGameSession(t *testing.T) {
	created := &eventsv1.GameSessionCreated{
		GameServer:          gsName,
		Properties:          map[string]string{"map": "dust", "mode": "ranked"},
		Policy:              testPolicy(),
		AllocationRequestId: "req-1",
		Players: []*eventsv1.PlayerSeat{
			{PlayerSession: "p1", PlayerId: "alice", PlayerData: "a", Slot: 0, ReservationDeadline: tsAt(30)},
			{PlayerSession: "p2", PlayerId: "bob", Slot: 1, ReservationDeadline: tsAt(30)},
		},
	}
	g := &gameSession{t: t}
	out := g.decide(events.CreateGameSession{Created: created})
	if len(out) != 1 || !proto.Equal(out[0], created) {
		t.Fatalf("events = %v, want [%v]", out, created)
	}
	if out[0] == created {
		t.Errorf("the event is the command's message, not a copy")
	}
	want := &eventsv1.GameSessionState{
		Name: gsessName, GameServer: gsName, Status: gsessACTIVE,
		Properties: map[string]string{"map": "dust", "mode": "ranked"}, Policy: testPolicy(), AllocationRequestId: "req-1",
		Players: []*eventsv1.PlayerSessionState{
			{Name: psName("p1"), PlayerId: "alice", PlayerData: "a", Slot: 0, Status: psRESERVED, ReservationDeadline: tsAt(30), CreateTime: tsAt(1), UpdateTime: tsAt(1)},
			{Name: psName("p2"), PlayerId: "bob", Slot: 1, Status: psRESERVED, ReservationDeadline: tsAt(30), CreateTime: tsAt(1), UpdateTime: tsAt(1)},
		},
		CreateTime: tsAt(1), UpdateTime: tsAt(1),
	}
	if !proto.Equal(g.state, want) {
		t.Fatalf("state =\n%v\nwant\n%v", g.state, want)
	}
	created.Properties["map"] = "changed"
	created.Policy.MaxPlayers = 99
	if g.state.GetProperties()["map"] != "dust" || g.state.GetPolicy().GetMaxPlayers() != 4 {
		t.Errorf("state shares memory with the command")
	}

	// Created only once: a second create is a no-op (a retry or a repair that
	// lost the race), and its event would be refused.
	t.Run("again is a no-op", func(t *testing.T) {
		out, err := events.DecideGameSession(gsessName, g.state, events.CreateGameSession{Created: &eventsv1.GameSessionCreated{GameServer: "fleets/other/gameServers/gs-2"}})
		if err != nil || len(out) != 0 {
			t.Errorf("second CreateGameSession = %v, %v; want no events, no error", types(out), err)
		}
	})
	t.Run("again after it ended is a no-op", func(t *testing.T) {
		ended := &gameSession{t: t, state: g.state, clock: g.clock}
		ended.decide(events.EndGameSession{})
		out, err := events.DecideGameSession(gsessName, ended.state, events.CreateGameSession{Created: &eventsv1.GameSessionCreated{GameServer: gsName}})
		if err != nil || len(out) != 0 {
			t.Errorf("CreateGameSession after the end = %v, %v; want no events, no error", types(out), err)
		}
	})

	t.Run("bad seats", func(t *testing.T) {
		for _, seats := range [][]*eventsv1.PlayerSeat{
			{{PlayerSession: ""}},
			{{PlayerSession: "Bad"}},
			{{PlayerSession: "p1"}, {PlayerSession: "p1", Slot: 1}},
		} {
			out, err := events.DecideGameSession(gsessName, nil, events.CreateGameSession{Created: &eventsv1.GameSessionCreated{GameServer: gsName, Players: seats}})
			if err == nil || out != nil {
				t.Errorf("CreateGameSession(seats %v) = %v, %v; want an error", seats, types(out), err)
			}
		}
	})
}

// --- the other commands ----------------------------------------------------

func TestGameSessionCommandsOnMissingSession(t *testing.T) {
	cmds := []events.GameSessionCommand{
		events.ReservePlayer{PlayerSession: "p1", PlayerID: "alice", Now: at(0)},
		events.AcceptPlayer{PlayerSession: "p1", Now: at(0)},
		events.DisconnectPlayer{PlayerSession: "p1", Now: at(0)},
		events.RemovePlayer{PlayerSession: "p1"},
		events.ExpirePlayers{Now: at(0)},
		events.TrackSeat{PlayerID: "alice", Connected: true, Now: at(0)},
		events.EndGameSession{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED},
	}
	for _, state := range []*eventsv1.GameSessionState{nil, {}} {
		for _, cmd := range cmds {
			t.Run(fmt.Sprintf("%T/state_%v", cmd, state != nil), func(t *testing.T) {
				out, err := events.DecideGameSession(gsessName, state, cmd)
				if out != nil {
					t.Errorf("events = %v, want none", types(out))
				}
				re := asRefusedError(t, err)
				if re.Reason != events.RefusedGameSessionUnknown || !strings.Contains(re.Error(), gsessName) {
					t.Errorf("refused %q: %q; want %s naming %s", re.Reason, re.Error(), events.RefusedGameSessionUnknown, gsessName)
				}
			})
		}
	}
}

func TestReservePlayer(t *testing.T) {
	g := newSession(t, testPolicy())
	out := g.decide(events.ReservePlayer{PlayerSession: "p1", PlayerID: "alice", PlayerData: "lvl 3", Now: at(100)})
	want := &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{
		PlayerSession: "p1", PlayerId: "alice", PlayerData: "lvl 3", Slot: 0, ReservationDeadline: tsAt(130),
	}}
	if len(out) != 1 || !proto.Equal(out[0], want) {
		t.Fatalf("events = %v, want [%v]", out, want)
	}
	p := g.player("p1")
	if p.GetStatus() != psRESERVED || p.GetSlot() != 0 || p.GetPlayerId() != "alice" || p.GetPlayerData() != "lvl 3" ||
		!proto.Equal(p.GetReservationDeadline(), tsAt(130)) || p.GetName() != psName("p1") {
		t.Errorf("player session = %v", p)
	}
	if got := events.NextDeadline(g.state); !got.Equal(at(130)) {
		t.Errorf("NextDeadline = %v, want %v", got, at(130))
	}

	tests := []struct {
		name   string
		cmd    events.ReservePlayer
		check  func(t *testing.T, err error)
		mutate func(g *gameSession)
	}{
		{name: "no player id", cmd: events.ReservePlayer{PlayerSession: "p2", Now: at(1)}, check: func(t *testing.T, err error) {
			if ve := asValidationError(t, err); ve.Field != "player_session.player_id" {
				t.Errorf("Field = %q", ve.Field)
			}
		}},
		{name: "invalid player session id", cmd: events.ReservePlayer{PlayerSession: "P2", PlayerID: "bob", Now: at(1)}, check: func(t *testing.T, err error) {
			if !errors.Is(err, events.ErrInvalidName) {
				t.Errorf("err = %v, want ErrInvalidName", err)
			}
		}},
		{name: "existing player session id", cmd: events.ReservePlayer{PlayerSession: "p1", PlayerID: "bob", Now: at(1)}, check: func(t *testing.T, err error) {
			if err == nil {
				t.Error("err = nil, want an error")
			}
		}},
		{name: "game session ended", cmd: events.ReservePlayer{PlayerSession: "p2", PlayerID: "bob", Now: at(1)},
			mutate: func(g *gameSession) { g.decide(events.EndGameSession{}) },
			check:  func(t *testing.T, err error) { wantRefused(t, err, events.RefusedGameSessionEnded) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &gameSession{t: t, state: proto.CloneOf(g.state), clock: g.clock}
			if tt.mutate != nil {
				tt.mutate(g)
			}
			out, err := g.try(tt.cmd)
			if out != nil {
				t.Errorf("events = %v, want none", types(out))
			}
			tt.check(t, err)
		})
	}
}

func TestFreeSlots(t *testing.T) {
	policy := func(max int32) *eventsv1.GameSessionPolicy { return &eventsv1.GameSessionPolicy{MaxPlayers: max} }
	tests := []struct {
		name    string
		state   *eventsv1.GameSessionState
		n       int
		want    []int32
		wantErr bool
	}{
		{name: "empty", state: sessionState(policy(4)), n: 1, want: []int32{0}},
		{name: "empty, three", state: sessionState(policy(4)), n: 3, want: []int32{0, 1, 2}},
		{name: "none asked", state: sessionState(policy(1), player("a", 0, psACTIVE)), n: 0, want: []int32{}},
		{name: "after the held seats", state: sessionState(policy(4), player("a", 0, psACTIVE), player("b", 1, psRESERVED)), n: 1, want: []int32{2}},
		{name: "lowest gaps first", state: sessionState(policy(0), player("a", 0, psACTIVE), player("b", 2, psDISCONNECTED), player("c", 4, psRESERVED)), n: 3, want: []int32{1, 3, 5}},
		{name: "held in any order", state: sessionState(policy(0), player("c", 2, psACTIVE), player("a", 0, psACTIVE)), n: 1, want: []int32{1}},
		{name: "completed seat is reused", state: sessionState(policy(2), player("a", 0, psCOMPLETED), player("b", 1, psACTIVE)), n: 1, want: []int32{0}},
		{name: "timed out seat is reused", state: sessionState(policy(2), player("a", 0, psACTIVE), player("b", 1, psTIMED_OUT)), n: 1, want: []int32{1}},
		{name: "freed seats do not count", state: sessionState(policy(2), player("a", 0, psCOMPLETED), player("b", 1, psTIMED_OUT), player("c", 0, psCOMPLETED)), n: 2, want: []int32{0, 1}},
		{name: "exactly full after", state: sessionState(policy(3), player("a", 1, psACTIVE)), n: 2, want: []int32{0, 2}},
		{name: "full", state: sessionState(policy(2), player("a", 0, psACTIVE), player("b", 1, psRESERVED)), n: 1, wantErr: true},
		{name: "full with a disconnected seat", state: sessionState(policy(1), player("a", 0, psDISCONNECTED)), n: 1, wantErr: true},
		{name: "not enough", state: sessionState(policy(3), player("a", 0, psACTIVE)), n: 3, wantErr: true},
		{name: "max 1", state: sessionState(policy(1)), n: 1, want: []int32{0}},
		{name: "0 is unlimited", state: sessionState(policy(0), player("a", 0, psACTIVE), player("b", 1, psACTIVE)), n: 100, want: seq(2, 102)},
		{name: "no policy is unlimited", state: &eventsv1.GameSessionState{Name: gsessName, Status: gsessACTIVE}, n: 2, want: []int32{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.CloneOf(tt.state)
			got, err := events.FreeSlots(tt.state, tt.n)
			if !proto.Equal(before, tt.state) {
				t.Errorf("FreeSlots modified the state")
			}
			if tt.wantErr {
				if got != nil {
					t.Errorf("slots = %v, want none", got)
				}
				wantRefused(t, err, events.RefusedGameSessionFull)
				return
			}
			if err != nil {
				t.Fatalf("FreeSlots: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("FreeSlots(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}

// seq returns from, from+1, …, to-1.
func seq(from, to int32) []int32 {
	var out []int32
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestSeatsTaken(t *testing.T) {
	tests := []struct {
		name  string
		state *eventsv1.GameSessionState
		want  int
	}{
		{name: "nil", state: nil, want: 0},
		{name: "none", state: sessionState(testPolicy()), want: 0},
		{name: "every status", state: sessionState(testPolicy(),
			player("r", 0, psRESERVED), player("a", 1, psACTIVE), player("d", 2, psDISCONNECTED),
			player("c", 3, psCOMPLETED), player("x", 4, psTIMED_OUT)), want: 3},
		{name: "only finished", state: sessionState(testPolicy(), player("c", 0, psCOMPLETED), player("x", 0, psTIMED_OUT)), want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.SeatsTaken(tt.state); got != tt.want {
				t.Errorf("SeatsTaken = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestSeatsAreReused fills a game session, frees seats both ways a seat can
// be freed, and checks the next players get the lowest free seats.
func TestSeatsAreReused(t *testing.T) {
	g := newSession(t, &eventsv1.GameSessionPolicy{MaxPlayers: 3, ReservationTimeoutSeconds: 10, ReconnectWindowSeconds: 60})
	reserve := func(id string, now int) (*eventsv1.PlayerSessionReserved, error) {
		t.Helper()
		out, err := g.try(events.ReservePlayer{PlayerSession: id, PlayerID: "player-" + id, Now: at(now)})
		if err != nil {
			return nil, err
		}
		return out[0].(*eventsv1.PlayerSessionReserved), nil
	}
	steps := []struct {
		name     string
		run      func() (*eventsv1.PlayerSessionReserved, error)
		wantSlot int32
		refused  string
	}{
		{name: "first", run: func() (*eventsv1.PlayerSessionReserved, error) { return reserve("a", 0) }, wantSlot: 0},
		{name: "second", run: func() (*eventsv1.PlayerSessionReserved, error) { return reserve("b", 0) }, wantSlot: 1},
		{name: "third, reserved later", run: func() (*eventsv1.PlayerSessionReserved, error) { return reserve("c", 5) }, wantSlot: 2},
		{name: "full", run: func() (*eventsv1.PlayerSessionReserved, error) { return reserve("d", 5) }, refused: events.RefusedGameSessionFull},
		{name: "a leaves: its seat 0 is reused", run: func() (*eventsv1.PlayerSessionReserved, error) {
			g.decide(events.AcceptPlayer{PlayerSession: "a", Now: at(1)})
			g.decide(events.RemovePlayer{PlayerSession: "a"})
			return reserve("d", 6)
		}, wantSlot: 0},
		{name: "full again", run: func() (*eventsv1.PlayerSessionReserved, error) { return reserve("e", 6) }, refused: events.RefusedGameSessionFull},
		{name: "b times out: its seat 1 is reused", run: func() (*eventsv1.PlayerSessionReserved, error) {
			if got := types(g.decide(events.ExpirePlayers{Now: at(11)})); !slices.Equal(got, []string{"PlayerSessionTimedOut"}) {
				t.Fatalf("ExpirePlayers at 11: %v, want b's timeout only", got)
			}
			return reserve("e", 11)
		}, wantSlot: 1},
		{name: "a disconnected seat stays taken", run: func() (*eventsv1.PlayerSessionReserved, error) {
			g.decide(events.AcceptPlayer{PlayerSession: "c", Now: at(12)})
			g.decide(events.DisconnectPlayer{PlayerSession: "c", Now: at(12)})
			return reserve("f", 12)
		}, refused: events.RefusedGameSessionFull},
		{name: "its window ends: seat 2 is reused", run: func() (*eventsv1.PlayerSessionReserved, error) {
			g.decide(events.AcceptPlayer{PlayerSession: "d", Now: at(13)})
			g.decide(events.AcceptPlayer{PlayerSession: "e", Now: at(13)})
			if got := types(g.decide(events.ExpirePlayers{Now: at(73)})); !slices.Equal(got, []string{"PlayerSessionCompleted"}) {
				t.Fatalf("ExpirePlayers at 73: %v, want c's window only", got)
			}
			return reserve("f", 73)
		}, wantSlot: 2},
	}
	for _, s := range steps {
		got, err := s.run()
		if s.refused != "" {
			if got != nil {
				t.Fatalf("%s: reserved %v, want refused", s.name, got)
			}
			wantRefused(t, err, s.refused)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got.GetSeat().GetSlot() != s.wantSlot {
			t.Fatalf("%s: slot %d, want %d", s.name, got.GetSeat().GetSlot(), s.wantSlot)
		}
		if n := events.SeatsTaken(g.state); n > 3 {
			t.Fatalf("%s: %d seats taken of 3", s.name, n)
		}
	}
}

func TestReserveUnlimited(t *testing.T) {
	g := newSession(t, &eventsv1.GameSessionPolicy{MaxPlayers: 0, ReservationTimeoutSeconds: 30})
	for i := range 50 {
		out := g.decide(events.ReservePlayer{PlayerSession: fmt.Sprintf("p%d", i), PlayerID: "x", Now: at(0)})
		if slot := out[0].(*eventsv1.PlayerSessionReserved).GetSeat().GetSlot(); slot != int32(i) {
			t.Fatalf("player %d got slot %d", i, slot)
		}
	}
	if n := events.SeatsTaken(g.state); n != 50 {
		t.Errorf("SeatsTaken = %d, want 50", n)
	}
}

func TestAcceptPlayer(t *testing.T) {
	const (
		accepted   = "PlayerAccepted"
		reconnects = "PlayerReconnected"
		takesOver  = "PlayerTakenOver"
	)
	// gens sets p's token generation and its connection's.
	gens := func(p *eventsv1.PlayerSessionState, token, connection int64) *eventsv1.PlayerSessionState {
		p.TokenGeneration, p.ConnectionTokenGeneration = token, connection
		return p
	}
	tests := []struct {
		name     string
		p1       *eventsv1.PlayerSessionState
		ended    bool // the game session ended after p1 got to its status
		id       string
		gen      int64 // the token's generation
		now      time.Time
		want     string // event type or a refusal reason
		wantSlot int32
	}{
		{name: "reserved", p1: withDeadline(player("p1", 2, psRESERVED), tsAt(30)), now: at(10), want: accepted},
		{name: "reserved at exactly its deadline", p1: withDeadline(player("p1", 2, psRESERVED), tsAt(30)), now: at(30), want: accepted},
		{name: "reserved past its deadline", p1: withDeadline(player("p1", 2, psRESERVED), tsAt(30)), now: at(30).Add(time.Nanosecond), want: events.RefusedPlayerSessionExpired},
		{name: "reserved without a deadline", p1: player("p1", 2, psRESERVED), now: at(1000), want: accepted},
		{name: "active: a second connection with the same token", p1: player("p1", 2, psACTIVE), now: at(10), want: events.RefusedPlayerAlreadyConnected},
		{name: "active, reissued: the same token twice", p1: gens(player("p1", 2, psACTIVE), 3, 3), gen: 3, now: at(10), want: events.RefusedPlayerAlreadyConnected},
		{name: "active: a reissued token takes over", p1: gens(player("p1", 2, psACTIVE), 1, 0), gen: 1, now: at(10), want: takesOver},
		{name: "active: a revoked token", p1: gens(player("p1", 2, psACTIVE), 2, 1), gen: 1, now: at(10), want: events.RefusedTokenRevoked},
		{name: "reserved: a reissued token", p1: gens(withDeadline(player("p1", 2, psRESERVED), tsAt(30)), 2, 0), gen: 2, now: at(10), want: accepted},
		{name: "reserved: a revoked token", p1: gens(withDeadline(player("p1", 2, psRESERVED), tsAt(30)), 2, 0), gen: 1, now: at(10), want: events.RefusedTokenRevoked},
		{name: "disconnected: a reissued token", p1: gens(withDeadline(player("p1", 2, psDISCONNECTED), tsAt(60)), 1, 0), gen: 1, now: at(10), want: reconnects},
		{name: "disconnected: a revoked token", p1: gens(withDeadline(player("p1", 2, psDISCONNECTED), tsAt(60)), 1, 0), gen: 0, now: at(10), want: events.RefusedTokenRevoked},
		{name: "disconnected: a generation never issued", p1: withDeadline(player("p1", 2, psDISCONNECTED), tsAt(60)), gen: 4, now: at(10), want: events.RefusedTokenRevoked},
		{name: "completed, with a revoked token", p1: gens(player("p1", 2, psCOMPLETED), 2, 0), gen: 1, now: at(10), want: events.RefusedPlayerSessionExpired},
		{name: "disconnected within its window", p1: withDeadline(player("p1", 2, psDISCONNECTED), tsAt(60)), now: at(59), want: reconnects},
		{name: "disconnected at exactly its deadline", p1: withDeadline(player("p1", 2, psDISCONNECTED), tsAt(60)), now: at(60), want: reconnects},
		{name: "disconnected past its deadline", p1: withDeadline(player("p1", 2, psDISCONNECTED), tsAt(60)), now: at(60).Add(time.Nanosecond), want: events.RefusedPlayerSessionExpired},
		{name: "completed", p1: player("p1", 2, psCOMPLETED), now: at(10), want: events.RefusedPlayerSessionExpired},
		{name: "timed out", p1: player("p1", 2, psTIMED_OUT), now: at(10), want: events.RefusedPlayerSessionExpired},
		{name: "reserved, game session ended", p1: withDeadline(player("p1", 2, psRESERVED), tsAt(30)), ended: true, now: at(10), want: events.RefusedPlayerSessionExpired},
		{name: "disconnected, game session ended", p1: withDeadline(player("p1", 2, psDISCONNECTED), tsAt(60)), ended: true, now: at(10), want: events.RefusedPlayerSessionExpired},
		{name: "unknown player session", p1: player("p1", 2, psRESERVED), id: "p7", now: at(10), want: events.RefusedPlayerSessionUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.p1.ReconnectCount = 1
			g := &gameSession{t: t, state: sessionState(testPolicy(), player("p0", 0, psACTIVE), tt.p1), clock: 100}
			if tt.ended {
				g.decide(events.EndGameSession{})
			}
			id := tt.id
			if id == "" {
				id = "p1"
			}
			before := proto.CloneOf(g.player("p1"))
			out, err := g.try(events.AcceptPlayer{PlayerSession: id, TokenGeneration: tt.gen, Now: tt.now})
			switch tt.want {
			case accepted, reconnects, takesOver:
				if err != nil {
					t.Fatal(err)
				}
				if got := types(out); !slices.Equal(got, []string{tt.want}) {
					t.Fatalf("events = %v, want [%s]", got, tt.want)
				}
			default:
				if out != nil {
					t.Errorf("events = %v, want none", types(out))
				}
				wantRefused(t, err, tt.want)
				return
			}
			p := g.player("p1")
			if p.GetStatus() != psACTIVE || p.GetSlot() != 2 || p.GetReservationDeadline() != nil || p.GetReconnectDeadline() != nil {
				t.Errorf("player session = %v, want ACTIVE in slot 2 with no deadline", p)
			}
			wantCount := before.GetReconnectCount()
			if tt.want == reconnects || tt.want == takesOver {
				wantCount++
			}
			if p.GetReconnectCount() != wantCount {
				t.Errorf("reconnect count = %d, want %d", p.GetReconnectCount(), wantCount)
			}
			if p.GetConnection() != before.GetConnection()+1 || p.GetConnectionTokenGeneration() != tt.gen || p.GetTokenGeneration() != before.GetTokenGeneration() {
				t.Errorf("connection %d of token generation %d (seat's %d), want connection %d of generation %d (seat's %d)",
					p.GetConnection(), p.GetConnectionTokenGeneration(), p.GetTokenGeneration(), before.GetConnection()+1, tt.gen, before.GetTokenGeneration())
			}
		})
	}
}

// TestReconnectKeepsTheSeat drops and reconnects a player several times among
// other players coming and going.
func TestReconnectKeepsTheSeat(t *testing.T) {
	g := newSession(t, testPolicy(),
		&eventsv1.PlayerSeat{PlayerSession: "a", PlayerId: "alice", Slot: 0, ReservationDeadline: tsAt(30)},
		&eventsv1.PlayerSeat{PlayerSession: "b", PlayerId: "bob", Slot: 1, ReservationDeadline: tsAt(30)})
	g.decide(events.AcceptPlayer{PlayerSession: "a", Now: at(1)})
	g.decide(events.AcceptPlayer{PlayerSession: "b", Now: at(1)})
	for i := range 3 {
		now := 100 * (i + 1)
		out := g.decide(events.DisconnectPlayer{PlayerSession: "b", Now: at(now)})
		wantDisc := &eventsv1.PlayerDisconnected{PlayerSession: "b", ReconnectDeadline: tsAt(now + 60)}
		if len(out) != 1 || !proto.Equal(out[0], wantDisc) {
			t.Fatalf("round %d: disconnect events %v, want [%v]", i, out, wantDisc)
		}
		if p := g.player("b"); p.GetStatus() != psDISCONNECTED || !proto.Equal(p.GetReconnectDeadline(), tsAt(now+60)) {
			t.Fatalf("round %d: after disconnect %v", i, p)
		}
		if got := events.NextDeadline(g.state); !got.Equal(at(now + 60)) {
			t.Errorf("round %d: NextDeadline = %v, want %v", i, got, at(now+60))
		}
		// Someone else joins while b is away: b's seat is not given away.
		id := fmt.Sprintf("x%d", i)
		out = g.decide(events.ReservePlayer{PlayerSession: id, PlayerID: id, Now: at(now + 1)})
		if slot := out[0].(*eventsv1.PlayerSessionReserved).GetSeat().GetSlot(); slot != 2 {
			t.Fatalf("round %d: newcomer got slot %d, want 2", i, slot)
		}
		g.decide(events.RemovePlayer{PlayerSession: id})

		if got := types(g.decide(events.AcceptPlayer{PlayerSession: "b", Now: at(now + 60)})); !slices.Equal(got, []string{"PlayerReconnected"}) {
			t.Fatalf("round %d: reconnect events %v", i, got)
		}
		p := g.player("b")
		if p.GetStatus() != psACTIVE || p.GetSlot() != 1 || p.GetReconnectCount() != int32(i+1) || p.GetReconnectDeadline() != nil || p.GetPlayerId() != "bob" {
			t.Fatalf("round %d: after reconnect %v, want ACTIVE in slot 1, %d reconnects", i, p, i+1)
		}
		if !events.NextDeadline(g.state).IsZero() {
			t.Errorf("round %d: NextDeadline = %v, want none", i, events.NextDeadline(g.state))
		}
	}
	if a := g.player("a"); a.GetStatus() != psACTIVE || a.GetReconnectCount() != 0 {
		t.Errorf("a = %v, want untouched", a)
	}
}

func TestDisconnectPlayer(t *testing.T) {
	tests := []struct {
		name    string
		status  eventsv1.PlayerSessionStatus
		id      string
		window  int32
		want    bool   // a PlayerDisconnected
		refused string // or this refusal; neither: no-op
	}{
		{name: "active", status: psACTIVE, window: 60, want: true},
		{name: "active, no window", status: psACTIVE, window: 0, want: true},
		{name: "disconnected: reported twice", status: psDISCONNECTED, window: 60},
		{name: "reserved", status: psRESERVED, window: 60, refused: events.RefusedPlayerSessionState},
		{name: "completed", status: psCOMPLETED, window: 60, refused: events.RefusedPlayerSessionState},
		{name: "timed out", status: psTIMED_OUT, window: 60, refused: events.RefusedPlayerSessionState},
		{name: "unknown", status: psACTIVE, id: "zz", window: 60, refused: events.RefusedPlayerSessionUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy := testPolicy()
			policy.ReconnectWindowSeconds = tt.window
			p1 := withDeadline(player("p1", 1, tt.status), tsAt(20))
			g := &gameSession{t: t, state: sessionState(policy, p1), clock: 100}
			id := tt.id
			if id == "" {
				id = "p1"
			}
			out, err := g.try(events.DisconnectPlayer{PlayerSession: id, Now: at(10)})
			switch {
			case tt.refused != "":
				wantRefused(t, err, tt.refused)
			case !tt.want:
				if err != nil || len(out) != 0 {
					t.Errorf("= %v, %v; want no event, no error", types(out), err)
				}
				if !proto.Equal(g.player("p1"), p1) {
					t.Errorf("player session changed: %v", g.player("p1"))
				}
			default:
				want := &eventsv1.PlayerDisconnected{PlayerSession: "p1", ReconnectDeadline: tsAt(10 + int(tt.window))}
				if err != nil || len(out) != 1 || !proto.Equal(out[0], want) {
					t.Fatalf("= %v, %v; want [%v]", out, err, want)
				}
				if p := g.player("p1"); p.GetStatus() != psDISCONNECTED || p.GetSlot() != 1 || !proto.Equal(p.GetReconnectDeadline(), want.GetReconnectDeadline()) {
					t.Errorf("player session = %v", p)
				}
			}
		})
	}
}

func TestRemovePlayer(t *testing.T) {
	tests := []struct {
		name      string
		status    eventsv1.PlayerSessionStatus
		id        string
		wantEvent bool
		refused   string
	}{
		{name: "reserved", status: psRESERVED, wantEvent: true},
		{name: "active", status: psACTIVE, wantEvent: true},
		{name: "disconnected", status: psDISCONNECTED, wantEvent: true},
		{name: "completed: no-op", status: psCOMPLETED},
		{name: "timed out: no-op", status: psTIMED_OUT},
		{name: "unknown", status: psACTIVE, id: "zz", refused: events.RefusedPlayerSessionUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p1 := withDeadline(player("p1", 1, tt.status), tsAt(20))
			g := &gameSession{t: t, state: sessionState(testPolicy(), p1), clock: 100}
			id := tt.id
			if id == "" {
				id = "p1"
			}
			out, err := g.try(events.RemovePlayer{PlayerSession: id})
			if tt.refused != "" {
				wantRefused(t, err, tt.refused)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.wantEvent {
				if len(out) != 0 {
					t.Errorf("events = %v, want none", types(out))
				}
				return
			}
			want := &eventsv1.PlayerSessionCompleted{PlayerSession: "p1", Reason: endLEFT}
			if len(out) != 1 || !proto.Equal(out[0], want) {
				t.Fatalf("events = %v, want [%v]", out, want)
			}
			if p := g.player("p1"); p.GetStatus() != psCOMPLETED || p.GetEndReason() != endLEFT || p.GetReservationDeadline() != nil || p.GetReconnectDeadline() != nil {
				t.Errorf("player session = %v", p)
			}
			if events.SeatsTaken(g.state) != 0 {
				t.Errorf("seat still taken")
			}
		})
	}
}

func TestExpirePlayers(t *testing.T) {
	// Deadlines: r10 and d15 pass first, then r30 and d40; r20 and d20 end
	// at exactly 20.
	state := func() *eventsv1.GameSessionState {
		return sessionState(&eventsv1.GameSessionPolicy{},
			withDeadline(player("r10", 0, psRESERVED), tsAt(10)),
			withDeadline(player("d40", 1, psDISCONNECTED), tsAt(40)),
			player("act", 2, psACTIVE),
			withDeadline(player("r20", 3, psRESERVED), tsAt(20)),
			withDeadline(player("d15", 4, psDISCONNECTED), tsAt(15)),
			player("nodeadline", 5, psRESERVED),
			withDeadline(player("r30", 6, psRESERVED), tsAt(30)),
			withDeadline(player("d20", 7, psDISCONNECTED), tsAt(20)),
			player("done", 8, psCOMPLETED),
			player("gone", 9, psTIMED_OUT),
		)
	}
	timedOut := func(id string) proto.Message { return &eventsv1.PlayerSessionTimedOut{PlayerSession: id} }
	windowEnded := func(id string) proto.Message {
		return &eventsv1.PlayerSessionCompleted{PlayerSession: id, Reason: endWINDOW}
	}
	tests := []struct {
		name string
		now  time.Time
		want []proto.Message
	}{
		{name: "before every deadline", now: at(0), want: nil},
		{name: "at exactly the first deadline", now: at(10), want: nil},
		{name: "just past the first deadline", now: at(10).Add(time.Nanosecond), want: []proto.Message{timedOut("r10")}},
		{name: "a reservation and a window", now: at(16), want: []proto.Message{timedOut("r10"), windowEnded("d15")}},
		{name: "deadlines at exactly now are kept", now: at(20), want: []proto.Message{timedOut("r10"), windowEnded("d15")}},
		{name: "every deadline passed", now: at(1000), want: []proto.Message{
			timedOut("r10"), windowEnded("d40"), timedOut("r20"), windowEnded("d15"), timedOut("r30"), windowEnded("d20"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &gameSession{t: t, state: state(), clock: 2000}
			out := g.decide(events.ExpirePlayers{Now: tt.now})
			if len(out) != len(tt.want) {
				t.Fatalf("events = %v, want %v", out, tt.want)
			}
			for i := range out {
				if !proto.Equal(out[i], tt.want[i]) {
					t.Errorf("event %d = %s %v, want %s %v", i, events.TypeOf(out[i]), out[i], events.TypeOf(tt.want[i]), tt.want[i])
				}
			}
			// Only the expired sessions changed, each to its end state.
			expired := map[string]bool{}
			for _, m := range out {
				expired[lastSegment(m)] = true
			}
			for i, p := range g.state.GetPlayers() {
				old := state().GetPlayers()[i]
				id := old.GetName()[strings.LastIndex(old.GetName(), "/")+1:]
				if !expired[id] {
					if !proto.Equal(p, old) {
						t.Errorf("%s changed: %v", id, p)
					}
					continue
				}
				want := psTIMED_OUT
				if old.GetStatus() == psDISCONNECTED {
					want = psCOMPLETED
				}
				if p.GetStatus() != want || p.GetSlot() != old.GetSlot() || p.GetReservationDeadline() != nil || p.GetReconnectDeadline() != nil {
					t.Errorf("%s = %v, want %v with no deadline", id, p, want)
				}
				if want == psCOMPLETED && p.GetEndReason() != endWINDOW {
					t.Errorf("%s end reason %v, want RECONNECT_WINDOW_EXPIRED", id, p.GetEndReason())
				}
			}
			// Expiring again at the same time finds nothing.
			if again := g.decide(events.ExpirePlayers{Now: tt.now}); len(again) != 0 {
				t.Errorf("second ExpirePlayers = %v, want none", types(again))
			}
		})
	}
}

// lastSegment is the player session id a player event is about.
func lastSegment(m proto.Message) string {
	switch d := m.(type) {
	case *eventsv1.PlayerSessionTimedOut:
		return d.GetPlayerSession()
	case *eventsv1.PlayerSessionCompleted:
		return d.GetPlayerSession()
	}
	return ""
}

// TestReconnectRacesWindowExpiry checks that whichever of a reconnect and
// the expiry of its window is decided first wins, and the other then sees
// the result.
func TestReconnectRacesWindowExpiry(t *testing.T) {
	base := func(t *testing.T) *gameSession {
		g := newSession(t, testPolicy(), &eventsv1.PlayerSeat{PlayerSession: "p1", PlayerId: "alice", Slot: 0, ReservationDeadline: tsAt(30)})
		g.decide(events.AcceptPlayer{PlayerSession: "p1", Now: at(1)})
		g.decide(events.DisconnectPlayer{PlayerSession: "p1", Now: at(10)}) // window ends at 70
		return g
	}
	t.Run("reconnect first", func(t *testing.T) {
		g := base(t)
		g.decide(events.AcceptPlayer{PlayerSession: "p1", Now: at(70)})
		if out := g.decide(events.ExpirePlayers{Now: at(71)}); len(out) != 0 {
			t.Errorf("ExpirePlayers after the reconnect = %v, want none", types(out))
		}
		if p := g.player("p1"); p.GetStatus() != psACTIVE {
			t.Errorf("p1 = %v, want ACTIVE", p)
		}
	})
	t.Run("expiry first", func(t *testing.T) {
		g := base(t)
		g.decide(events.ExpirePlayers{Now: at(71)})
		_, err := g.try(events.AcceptPlayer{PlayerSession: "p1", Now: at(70)}) // a reconnect stamped earlier, decided later
		wantRefused(t, err, events.RefusedPlayerSessionExpired)
		if p := g.player("p1"); p.GetStatus() != psCOMPLETED || p.GetEndReason() != endWINDOW {
			t.Errorf("p1 = %v, want COMPLETED, RECONNECT_WINDOW_EXPIRED", p)
		}
	})
}

func TestEndGameSession(t *testing.T) {
	g := &gameSession{t: t, clock: 100, state: sessionState(testPolicy(),
		withDeadline(player("r", 0, psRESERVED), tsAt(30)),
		player("a", 1, psACTIVE),
		withDeadline(player("d", 2, psDISCONNECTED), tsAt(60)),
		player("c", 3, psCOMPLETED),
		player("x", 4, psTIMED_OUT),
	)}
	g.state.Players[3].EndReason = endLEFT
	before := proto.CloneOf(g.state)

	out := g.decide(events.EndGameSession{
		Reason:       eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED,
		ServerReason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED,
		Detail:       "server unhealthy",
	})
	want := &eventsv1.GameSessionEnded{
		Reason:       eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED,
		ServerReason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED,
		Detail:       "server unhealthy",
	}
	if len(out) != 1 || !proto.Equal(out[0], want) {
		t.Fatalf("events = %v, want [%v]", out, want)
	}
	s := g.state
	if s.GetStatus() != gsessENDED || s.GetEndReason() != want.GetReason() || s.GetServerReason() != want.GetServerReason() {
		t.Errorf("game session = %v", s)
	}
	for i, p := range s.GetPlayers() {
		old := before.GetPlayers()[i]
		if !events.SeatHeld(old) {
			if !proto.Equal(p, old) {
				t.Errorf("%s was over already and changed: %v", p.GetName(), p)
			}
			continue
		}
		if p.GetStatus() != psCOMPLETED || p.GetEndReason() != endSESSIONENDED || p.GetReservationDeadline() != nil ||
			p.GetReconnectDeadline() != nil || p.GetSlot() != old.GetSlot() || !proto.Equal(p.GetUpdateTime(), tsAt(g.clock)) {
			t.Errorf("%s = %v, want COMPLETED with GAME_SESSION_ENDED", p.GetName(), p)
		}
	}
	if n := events.SeatsTaken(s); n != 0 {
		t.Errorf("SeatsTaken = %d, want 0", n)
	}
	if d := events.NextDeadline(s); !d.IsZero() {
		t.Errorf("NextDeadline = %v, want none", d)
	}

	// Everything after the end.
	tests := []struct {
		name    string
		cmd     events.GameSessionCommand
		refused string // "": no event, no error
	}{
		{name: "end again", cmd: events.EndGameSession{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_READY_AGAIN}},
		{name: "expire", cmd: events.ExpirePlayers{Now: at(10000)}},
		{name: "remove", cmd: events.RemovePlayer{PlayerSession: "a"}},
		{name: "reserve", cmd: events.ReservePlayer{PlayerSession: "n", PlayerID: "n", Now: at(0)}, refused: events.RefusedGameSessionEnded},
		{name: "accept", cmd: events.AcceptPlayer{PlayerSession: "r", Now: at(0)}, refused: events.RefusedPlayerSessionExpired},
		{name: "reconnect", cmd: events.AcceptPlayer{PlayerSession: "d", Now: at(0)}, refused: events.RefusedPlayerSessionExpired},
		{name: "disconnect", cmd: events.DisconnectPlayer{PlayerSession: "a", Now: at(0)}, refused: events.RefusedPlayerSessionState},
		{name: "unknown player", cmd: events.AcceptPlayer{PlayerSession: "zz", Now: at(0)}, refused: events.RefusedPlayerSessionUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ended := &gameSession{t: t, state: proto.CloneOf(s), clock: g.clock}
			out, err := ended.try(tt.cmd)
			if tt.refused != "" {
				wantRefused(t, err, tt.refused)
				return
			}
			if err != nil || len(out) != 0 {
				t.Errorf("= %v, %v; want no event, no error", types(out), err)
			}
			if !proto.Equal(ended.state, s) {
				t.Errorf("state changed")
			}
		})
	}
}

func TestGameSessionLifecycle(t *testing.T) {
	// A whole match, as the services would drive it.
	g := newSession(t, &eventsv1.GameSessionPolicy{MaxPlayers: 2, ReservationTimeoutSeconds: 30, ReconnectWindowSeconds: 60},
		&eventsv1.PlayerSeat{PlayerSession: "alice", PlayerId: "u-alice", Slot: 0, ReservationDeadline: tsAt(30)})
	steps := []struct {
		name    string
		cmd     events.GameSessionCommand
		want    []string
		refused string
		status  map[string]eventsv1.PlayerSessionStatus
	}{
		{name: "bob reserved", cmd: events.ReservePlayer{PlayerSession: "bob", PlayerID: "u-bob", Now: at(5)}, want: []string{"PlayerSessionReserved"},
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psRESERVED, "bob": psRESERVED}},
		{name: "alice accepted", cmd: events.AcceptPlayer{PlayerSession: "alice", Now: at(6)}, want: []string{"PlayerAccepted"},
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psACTIVE, "bob": psRESERVED}},
		{name: "alice's token on a second connection", cmd: events.AcceptPlayer{PlayerSession: "alice", Now: at(7)}, want: nil, refused: events.RefusedPlayerAlreadyConnected,
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psACTIVE, "bob": psRESERVED}},
		{name: "nothing due", cmd: events.ExpirePlayers{Now: at(30)}, want: nil,
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psACTIVE, "bob": psRESERVED}},
		{name: "alice drops", cmd: events.DisconnectPlayer{PlayerSession: "alice", Now: at(31)}, want: []string{"PlayerDisconnected"},
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psDISCONNECTED, "bob": psRESERVED}},
		{name: "bob's reservation ends", cmd: events.ExpirePlayers{Now: at(36)}, want: []string{"PlayerSessionTimedOut"},
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psDISCONNECTED, "bob": psTIMED_OUT}},
		{name: "bob is too late", cmd: events.AcceptPlayer{PlayerSession: "bob", Now: at(37)}, want: nil, refused: events.RefusedPlayerSessionExpired,
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psDISCONNECTED, "bob": psTIMED_OUT}},
		{name: "alice is back", cmd: events.AcceptPlayer{PlayerSession: "alice", Now: at(90)}, want: []string{"PlayerReconnected"},
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psACTIVE, "bob": psTIMED_OUT}},
		{name: "match over", cmd: events.EndGameSession{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_READY_AGAIN}, want: []string{"GameSessionEnded"},
			status: map[string]eventsv1.PlayerSessionStatus{"alice": psCOMPLETED, "bob": psTIMED_OUT}},
	}
	for _, s := range steps {
		out, err := g.try(s.cmd)
		if s.refused != "" {
			wantRefused(t, err, s.refused)
		} else if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := types(out); !slices.Equal(got, s.want) {
			t.Fatalf("%s: events %v, want %v", s.name, got, s.want)
		}
		got := map[string]eventsv1.PlayerSessionStatus{}
		for _, p := range g.state.GetPlayers() {
			got[p.GetName()[strings.LastIndex(p.GetName(), "/")+1:]] = p.GetStatus()
		}
		if !maps.Equal(got, s.status) {
			t.Fatalf("%s: statuses %v, want %v", s.name, got, s.status)
		}
	}
	if a := g.player("alice"); a.GetSlot() != 0 || a.GetReconnectCount() != 1 || a.GetEndReason() != endSESSIONENDED {
		t.Errorf("alice = %v", a)
	}
	if !proto.Equal(g.state.GetCreateTime(), tsAt(1)) || !proto.Equal(g.state.GetUpdateTime(), tsAt(g.clock)) {
		t.Errorf("create %v, update %v; want %v, %v", g.state.GetCreateTime(), g.state.GetUpdateTime(), tsAt(1), tsAt(g.clock))
	}
}

func TestNextDeadline(t *testing.T) {
	tests := []struct {
		name  string
		state *eventsv1.GameSessionState
		want  time.Time
	}{
		{name: "nil", state: nil},
		{name: "no players", state: sessionState(testPolicy())},
		{name: "only active", state: sessionState(testPolicy(), player("a", 0, psACTIVE))},
		{name: "a reservation", state: sessionState(testPolicy(), withDeadline(player("r", 0, psRESERVED), tsAt(30))), want: at(30)},
		{name: "a reconnect window", state: sessionState(testPolicy(), withDeadline(player("d", 0, psDISCONNECTED), tsAt(40))), want: at(40)},
		{name: "earliest of both kinds", state: sessionState(testPolicy(),
			withDeadline(player("r", 0, psRESERVED), tsAt(30)),
			withDeadline(player("d", 1, psDISCONNECTED), tsAt(20)),
			withDeadline(player("r2", 2, psRESERVED), tsAt(25))), want: at(20)},
		{name: "deadlines in the past count", state: sessionState(testPolicy(), withDeadline(player("r", 0, psRESERVED), tsAt(-5))), want: at(-5)},
		{name: "a reservation with no deadline never expires", state: sessionState(testPolicy(), player("r", 0, psRESERVED))},
		{name: "stale deadlines of other statuses are ignored", state: sessionState(testPolicy(),
			&eventsv1.PlayerSessionState{Name: psName("a"), Status: psACTIVE, ReservationDeadline: tsAt(1), ReconnectDeadline: tsAt(2)},
			&eventsv1.PlayerSessionState{Name: psName("c"), Status: psCOMPLETED, ReconnectDeadline: tsAt(3)},
			&eventsv1.PlayerSessionState{Name: psName("r"), Status: psRESERVED, ReconnectDeadline: tsAt(4), ReservationDeadline: tsAt(50)}), want: at(50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.NextDeadline(tt.state); !got.Equal(tt.want) {
				t.Errorf("NextDeadline = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFindPlayer(t *testing.T) {
	s := sessionState(testPolicy(), player("a", 0, psACTIVE), player("b", 1, psCOMPLETED))
	tests := []struct {
		name  string
		state *eventsv1.GameSessionState
		id    string
		want  string
	}{
		{name: "first", state: s, id: "a", want: psName("a")},
		{name: "finished ones too", state: s, id: "b", want: psName("b")},
		{name: "missing", state: s, id: "c"},
		{name: "a full name is not an id", state: s, id: psName("a")},
		{name: "empty", state: s, id: ""},
		{name: "nil state", state: nil, id: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.FindPlayer(tt.state, tt.id).GetName(); got != tt.want {
				t.Errorf("FindPlayer(%q) = %q, want %q", tt.id, got, tt.want)
			}
		})
	}
}

// --- names ----------------------------------------------------------------------

func TestSessionNames(t *testing.T) {
	if got := events.GameSessionName("gsess-1"); got != "gameSessions/gsess-1" {
		t.Errorf("GameSessionName = %q", got)
	}
	if got := events.PlayerSessionName("gsess-1", "ps-2"); got != "gameSessions/gsess-1/playerSessions/ps-2" {
		t.Errorf("PlayerSessionName = %q", got)
	}
}

func TestParseGameSessionName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr bool
	}{
		{name: "valid", in: "gameSessions/gsess-7f3k2q9a", want: "gsess-7f3k2q9a"},
		{name: "single letter", in: "gameSessions/a", want: "a"},
		{name: "longest id", in: "gameSessions/" + long63, want: long63},
		{name: "too long id", in: "gameSessions/" + long63 + "x", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "no id", in: "gameSessions/", wantErr: true},
		{name: "collection only", in: "gameSessions", wantErr: true},
		{name: "trailing slash", in: "gameSessions/a/", wantErr: true},
		{name: "player session name", in: "gameSessions/a/playerSessions/b", wantErr: true},
		{name: "other collection", in: "fleets/a", wantErr: true},
		{name: "case of the collection", in: "gamesessions/a", wantErr: true},
		{name: "uppercase id", in: "gameSessions/Match", wantErr: true},
		{name: "dot in id", in: "gameSessions/a.b", wantErr: true},
		{name: "wildcard id", in: "gameSessions/*", wantErr: true},
		{name: "leading slash", in: "/gameSessions/a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.ParseGameSessionName(tt.in)
			checkParse(t, got, tt.want, err, tt.wantErr)
		})
	}
}

func TestParsePlayerSessionName(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		wantSession string
		wantID      string
		wantErr     bool
	}{
		{name: "valid", in: "gameSessions/gsess-1/playerSessions/ps-2", wantSession: "gsess-1", wantID: "ps-2"},
		{name: "longest ids", in: events.PlayerSessionName(long63, long63), wantSession: long63, wantID: long63},
		{name: "empty", in: "", wantErr: true},
		{name: "game session name", in: "gameSessions/a", wantErr: true},
		{name: "no player id", in: "gameSessions/a/playerSessions/", wantErr: true},
		{name: "no game session id", in: "gameSessions//playerSessions/b", wantErr: true},
		{name: "collection only", in: "gameSessions/a/playerSessions", wantErr: true},
		{name: "wrong segment", in: "gameSessions/a/players/b", wantErr: true},
		{name: "wrong collection", in: "fleets/a/playerSessions/b", wantErr: true},
		{name: "game server name", in: "fleets/a/gameServers/b", wantErr: true},
		{name: "too many segments", in: "gameSessions/a/playerSessions/b/c", wantErr: true},
		{name: "trailing slash", in: "gameSessions/a/playerSessions/b/", wantErr: true},
		{name: "uppercase game session", in: "gameSessions/A/playerSessions/b", wantErr: true},
		{name: "uppercase player session", in: "gameSessions/a/playerSessions/B", wantErr: true},
		{name: "dot in player session", in: "gameSessions/a/playerSessions/b.c", wantErr: true},
		{name: "too long player session", in: "gameSessions/a/playerSessions/" + long63 + "x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			session, id, err := events.ParsePlayerSessionName(tt.in)
			if tt.wantErr {
				if !errors.Is(err, events.ErrInvalidName) {
					t.Fatalf("err = %v (got %q, %q), want ErrInvalidName", err, session, id)
				}
				if session != "" || id != "" {
					t.Errorf("ids %q, %q returned with the error", session, id)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if session != tt.wantSession || id != tt.wantID {
				t.Errorf("ParsePlayerSessionName(%q) = %q, %q; want %q, %q", tt.in, session, id, tt.wantSession, tt.wantID)
			}
		})
	}
}

func TestSessionNamesRoundTrip(t *testing.T) {
	for _, ids := range [][2]string{{"a", "b"}, {"gsess-7f3k2q9a", "ps-9x8y7z6w"}, {long63, long63}, {events.NewID("gsess"), events.NewID("ps")}} {
		gsess, ps := ids[0], ids[1]
		t.Run(gsess+"/"+ps, func(t *testing.T) {
			name := events.GameSessionName(gsess)
			if got, err := events.ParseGameSessionName(name); err != nil || got != gsess {
				t.Errorf("ParseGameSessionName(%q) = %q, %v", name, got, err)
			}
			subject, err := events.Subject(name)
			if err != nil || subject != events.SubjectPrefix+"."+events.KindGameSession+"."+gsess {
				t.Errorf("Subject(%q) = %q, %v", name, subject, err)
			}
			if back, err := events.NameFromSubject(subject); err != nil || back != name {
				t.Errorf("NameFromSubject(%q) = %q, %v; want %q", subject, back, err, name)
			}

			name = events.PlayerSessionName(gsess, ps)
			if g, p, err := events.ParsePlayerSessionName(name); err != nil || g != gsess || p != ps {
				t.Errorf("ParsePlayerSessionName(%q) = %q, %q, %v", name, g, p, err)
			}
			subject, err = events.Subject(name)
			if err != nil || subject != events.SubjectPrefix+"."+events.KindPlayerSession+"."+gsess+"."+ps {
				t.Errorf("Subject(%q) = %q, %v", name, subject, err)
			}
			if back, err := events.NameFromSubject(subject); err != nil || back != name {
				t.Errorf("NameFromSubject(%q) = %q, %v; want %q", subject, back, err, name)
			}
		})
	}
}

func TestSessionStatusNames(t *testing.T) {
	players := map[eventsv1.PlayerSessionStatus]string{
		psUNSPECIFIED: "UNSPECIFIED", psRESERVED: "RESERVED", psACTIVE: "ACTIVE", psDISCONNECTED: "DISCONNECTED",
		psCOMPLETED: "COMPLETED", psTIMED_OUT: "TIMED_OUT", 99: "99",
	}
	for v := range eventsv1.PlayerSessionStatus_name {
		if _, ok := players[eventsv1.PlayerSessionStatus(v)]; !ok {
			t.Errorf("player session status %v has no case", eventsv1.PlayerSessionStatus(v))
		}
	}
	for in, want := range players {
		if got := events.PlayerSessionStatusName(in); got != want {
			t.Errorf("PlayerSessionStatusName(%d) = %q, want %q", in, got, want)
		}
	}
	games := map[eventsv1.GameSessionStatus]string{gsessABSENT: "UNSPECIFIED", gsessACTIVE: "ACTIVE", gsessENDED: "ENDED", 99: "99"}
	for v := range eventsv1.GameSessionStatus_name {
		if _, ok := games[eventsv1.GameSessionStatus(v)]; !ok {
			t.Errorf("game session status %v has no case", eventsv1.GameSessionStatus(v))
		}
	}
	for in, want := range games {
		if got := events.GameSessionStatusName(in); got != want {
			t.Errorf("GameSessionStatusName(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestRefusedError(t *testing.T) {
	g := newSession(t, &eventsv1.GameSessionPolicy{MaxPlayers: 1})
	g.decide(events.ReservePlayer{PlayerSession: "a", PlayerID: "a", Now: at(0)})
	_, err := g.try(events.ReservePlayer{PlayerSession: "b", PlayerID: "b", Now: at(0)})
	wrapped := fmt.Errorf("allocate: %w", err)
	re := asRefusedError(t, wrapped)
	if re.Reason != events.RefusedGameSessionFull || re.Error() != re.Msg || !strings.Contains(re.Msg, gsessName) {
		t.Errorf("RefusedError = %+v", re)
	}
	var te *events.TransitionError
	if errors.As(err, &te) {
		t.Errorf("a refusal is also a TransitionError: %v", err)
	}
}

// A player the game server reports by id (Agones' player tracking) takes
// the seat its allocation reserved, keeps it for the reconnect window when
// reported gone, and takes it back inside the window; a player with no
// seat, a report that changes nothing, and a window that passed write no
// event.
func TestTrackSeatFollowsTheGamesReports(t *testing.T) {
	g := newSession(t, testPolicy(),
		&eventsv1.PlayerSeat{PlayerSession: "a", PlayerId: "alice", Slot: 0, ReservationDeadline: tsAt(30)},
		&eventsv1.PlayerSeat{PlayerSession: "b", PlayerId: "bob", Slot: 1, ReservationDeadline: tsAt(30)})
	steps := []struct {
		cmd  events.TrackSeat
		want []string
	}{
		{events.TrackSeat{PlayerID: "alice", Connected: true, Now: at(1)}, []string{"PlayerAccepted"}},
		{events.TrackSeat{PlayerID: "alice", Connected: true, Now: at(2)}, nil},
		{events.TrackSeat{PlayerID: "carol", Connected: true, Now: at(2)}, nil},
		{events.TrackSeat{PlayerID: "bob", Connected: false, Now: at(2)}, nil},
		{events.TrackSeat{PlayerID: "alice", Connected: false, Now: at(10)}, []string{"PlayerDisconnected"}},
		{events.TrackSeat{PlayerID: "alice", Connected: false, Now: at(11)}, nil},
		{events.TrackSeat{PlayerID: "alice", Connected: true, Now: at(70)}, []string{"PlayerReconnected"}},
		{events.TrackSeat{PlayerID: "bob", Connected: true, Now: at(31)}, nil}, // the reservation ended
	}
	for i, st := range steps {
		if got := types(g.decide(st.cmd)); !slices.Equal(got, st.want) {
			t.Fatalf("step %d %+v: events %v, want %v", i, st.cmd, got, st.want)
		}
	}
	a := g.player("a")
	if a.GetStatus() != psACTIVE || a.GetSlot() != 0 || a.GetReconnectCount() != 1 {
		t.Fatalf("alice's seat = %v, want ACTIVE in slot 0 after one reconnect", a)
	}
	if p := g.player("b"); p.GetStatus() != psRESERVED {
		t.Fatalf("bob's seat = %v, want it RESERVED until its deadline's event", p)
	}
	// Past the reconnect window, a connect leaves the seat to its deadline.
	g.decide(events.TrackSeat{PlayerID: "alice", Connected: false, Now: at(100)})
	if got := g.decide(events.TrackSeat{PlayerID: "alice", Connected: true, Now: at(161)}); len(got) != 0 {
		t.Fatalf("a connect past the window: %v, want none", types(got))
	}
}
