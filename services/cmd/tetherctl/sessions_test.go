package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

var (
	gameSessionHeader = []string{"NAME", "GAME", "SERVER", "STATE", "PLAYERS", "END", "REASON", "AGE"}
	playerHeader      = []string{"NAME", "PLAYER", "STATE", "SLOT", "RECONNECTS", "END", "REASON"}
	tokenHeader       = []string{"PLAYER", "SESSION", "PLAYER", "SLOT", "TOKEN"}
)

// seedReady appends what agents report for a READY game server with
// labels on host, the API under test only reading views; it returns the
// last sequence.
func (s *stack) seedReady(name, host string, port int32, labels map[string]string) string {
	s.t.Helper()
	s.appendEvents(name, &eventsv1.GameServerScheduled{Host: events.HostName(host), Labels: labels})
	return s.startReadyServer(name, port)
}

// summary reads the "Key: value" lines of a summary up to its first blank
// line, and returns them and the rest of the output.
func summary(t *testing.T, out string) (map[string]string, string) {
	t.Helper()
	head, rest, _ := strings.Cut(out, "\n\n")
	fields := map[string]string{}
	for l := range strings.Lines(head) {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("summary line %q is not Key: value\n%s", l, out)
		}
		fields[k] = strings.TrimSpace(v)
	}
	return fields, rest
}

// apiAllocation is the part of an allocation's JSON the tests look at.
type apiAllocation struct {
	GameServer struct {
		Name  string `json:"name"`
		State string `json:"state"`
	} `json:"gameServer"`
	GameSession struct {
		Name        string            `json:"name"`
		Properties  map[string]string `json:"properties"`
		MaxPlayers  int               `json:"maxPlayers"`
		PlayerCount int               `json:"playerCount"`
		Sequence    string            `json:"sequence"`
	} `json:"gameSession"`
	Endpoint struct {
		Address string `json:"address"`
		Ports   []struct {
			Name string `json:"name"`
			Port int    `json:"port"`
		} `json:"ports"`
	} `json:"endpoint"`
	PlayerSessions []struct {
		Name       string `json:"name"`
		PlayerID   string `json:"playerId"`
		PlayerData string `json:"playerData"`
		Slot       int    `json:"slot"`
		Token      string `json:"token"`
	} `json:"playerSessions"`
}

func TestAllocateAndSessions(t *testing.T) {
	s := newStack(t)
	s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML))
	gs1, gs2 := events.GameServerName("arena", "gs-1"), events.GameServerName("arena", "gs-2")
	s.seedReady(gs1, "h1", 7001, map[string]string{"mode": "ranked", "region": "eu"})
	s.ok("gameservers", "list", "--min-sequence", s.seedReady(gs2, "h2", 7002, map[string]string{"mode": "casual"}))

	// The first selector matches nothing; the second picks gs-1.
	out := s.ok("allocate", "arena", "--selector", "region=us", "--selector", "mode=ranked,region=eu",
		"--player", "p1=elo=1500,eu", "--player", "p2", "--property", "map=dust", "--property", "mode=duel",
		"--max-players", "4", "--request-id", "req-1")
	sum, rest := summary(t, out)
	want := map[string]string{
		"Game server": "arena/gs-1 on h1", "Endpoint": "127.0.0.1:7001 (game/UDP)", "Players": "2/4",
		"Properties": "map=dust,mode=duel", "Request id": "req-1",
	}
	for k, v := range want {
		if sum[k] != v {
			t.Errorf("allocation summary %s: %q, want %q\n%s", k, sum[k], v, out)
		}
	}
	gsessA := sum["Game session"]
	if !strings.HasPrefix(gsessA, "gsess-") || sum["Sequence"] == "" {
		t.Fatalf("allocation summary:\n%s", out)
	}
	seats := tableRows(t, rest, tokenHeader...)
	if len(seats) != 2 || seats[0][1] != "p1" || seats[0][2] != "0" || seats[1][1] != "p2" || seats[1][2] != "1" ||
		!strings.HasPrefix(seats[0][0], gsessA+"/ps-") || seats[0][3] == "-" || seats[1][3] == "-" {
		t.Fatalf("player sessions of the allocation: %v\n%s", seats, out)
	}
	ps1, ps2 := seats[0][0], seats[1][0]
	// The seat is usable at once when the views are waited for.
	if sum, _ := summary(t, s.ok("players", "reconnect", ps2, "--min-sequence", sum["Sequence"])); sum["Slot"] != "1" || sum["State"] != "RESERVED" {
		t.Fatalf("reconnect right after the allocation: %v", sum)
	}

	// A retry (the same command with the request id) gets the same
	// allocation, here as JSON.
	var retry apiAllocation
	r := s.run("allocate", "arena", "--selector", "region=us", "--selector", "mode=ranked,region=eu",
		"--player", "p1=elo=1500,eu", "--player", "p2", "--property", "map=dust", "--property", "mode=duel",
		"--max-players", "4", "--request-id", "req-1", "-o", "json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("retry: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &retry); err != nil ||
		retry.GameSession.Name != "gameSessions/"+gsessA || retry.GameServer.Name != gs1 || retry.GameServer.State != "ALLOCATED" ||
		len(retry.PlayerSessions) != 2 || retry.PlayerSessions[0].PlayerData != "elo=1500,eu" ||
		retry.PlayerSessions[0].Name != "gameSessions/"+strings.Replace(ps1, "/", "/playerSessions/", 1) {
		t.Fatalf("retry -o json: %v %+v\n%s", err, retry, r.stdout)
	}

	// The request id with another request: refused, not answered with the
	// first allocation.
	r = s.run("allocate", "arena", "--request-id", "req-1", "--player", "p1")
	if r.code != 1 || !strings.Contains(r.stderr, "REQUEST_ID_REUSED, field request_id") {
		t.Fatalf("request id reused with other players: exit %d, stderr %q", r.code, r.stderr)
	}

	// No READY server is left with mode=ranked: one clear line, exit 1.
	r = s.run("allocate", "-", "--selector", "mode=ranked", "--player", "p9")
	if r.code != 1 || r.stdout != "" ||
		r.stderr != "error: no READY game server in fleets/- matches the selectors (NO_READY_GAME_SERVER)\n" {
		t.Fatalf("no ready server: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// Any fleet, a fresh request id printed on stderr beside the JSON.
	r = s.run("allocate", "-", "--player", "p3", "-o", "json")
	var b apiAllocation
	if r.code != 0 || !strings.HasPrefix(r.stderr, "request id: tetherctl-") {
		t.Fatalf("allocate -o json: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil || b.GameServer.Name != gs2 ||
		b.Endpoint.Address != "127.0.0.1" || len(b.Endpoint.Ports) != 1 || b.Endpoint.Ports[0].Port != 7002 ||
		b.GameSession.MaxPlayers != 16 || len(b.PlayerSessions) != 1 || b.PlayerSessions[0].Token == "" {
		t.Fatalf("allocate -o json: %v %+v\n%s", err, b, r.stdout)
	}
	gsessB := strings.TrimPrefix(b.GameSession.Name, "gameSessions/")

	// Sessions, newest first.
	out = s.ok("sessions", "list", "--min-sequence", b.GameSession.Sequence)
	rows := tableRows(t, out, gameSessionHeader...)
	if len(rows) != 2 || strings.Join(rows[0][:5], " ") != gsessB+" arena/gs-2 ACTIVE 1/16 -" ||
		strings.Join(rows[1][:5], " ") != gsessA+" arena/gs-1 ACTIVE 2/4 -" {
		t.Fatalf("sessions list:\n%s", out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"fleet", []string{"--fleet", "arena"}, []string{gsessB, gsessA}},
		{"other fleet", []string{"--fleet", "fleets/duel"}, nil},
		{"game server short", []string{"--game-server", "arena/gs-1"}, []string{gsessA}},
		{"game server full", []string{"--game-server", gs2}, []string{gsessB}},
		{"state", []string{"--state", "active"}, []string{gsessB, gsessA}},
		{"ended", []string{"--state", "ENDED", "--fleet", "arena"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := tableRows(t, s.ok(append([]string{"sessions", "list"}, tc.args...)...), gameSessionHeader...)
			var names []string
			for _, r := range rows {
				names = append(names, r[0])
			}
			if strings.Join(names, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("listed %v, want %v", names, tc.want)
			}
		})
	}

	// Get shows the session and its players.
	out = s.ok("sessions", "get", gsessA)
	top, bottom, _ := strings.Cut(out, "\n\n")
	if rows := tableRows(t, top, gameSessionHeader...); len(rows) != 1 || strings.Join(rows[0][:5], " ") != gsessA+" arena/gs-1 ACTIVE 2/4 -" {
		t.Fatalf("sessions get:\n%s", out)
	}
	if rows := tableRows(t, bottom, playerHeader...); len(rows) != 2 ||
		strings.Join(rows[0], " ") != ps1+" p1 RESERVED 0 0 -" || strings.Join(rows[1], " ") != ps2+" p2 RESERVED 1 0 -" {
		t.Fatalf("sessions get players:\n%s", out)
	}
	var got struct {
		GameSession struct {
			Name       string            `json:"name"`
			GameServer string            `json:"gameServer"`
			Properties map[string]string `json:"properties"`
		} `json:"gameSession"`
		PlayerSessions []struct {
			PlayerID string `json:"playerId"`
			Token    string `json:"token"`
		} `json:"playerSessions"`
	}
	if err := json.Unmarshal([]byte(s.ok("sessions", "get", "gameSessions/"+gsessA, "-o", "json")), &got); err != nil ||
		got.GameSession.Name != "gameSessions/"+gsessA || got.GameSession.GameServer != gs1 || got.GameSession.Properties["map"] != "dust" ||
		len(got.PlayerSessions) != 2 || got.PlayerSessions[1].PlayerID != "p2" || got.PlayerSessions[1].Token != "" {
		t.Fatalf("sessions get -o json: %v %+v", err, got)
	}

	// Add players up to the four seats.
	out = s.ok("players", "add", gsessA, "--player", "p3=lvl=7")
	if rows := tableRows(t, out, tokenHeader...); len(rows) != 1 || rows[0][1] != "p3" || rows[0][2] != "2" || rows[0][3] == "-" {
		t.Fatalf("players add:\n%s", out)
	}
	var added struct {
		Name, PlayerData, State, Token string
		Slot                           int
	}
	if err := json.Unmarshal([]byte(s.ok("players", "add", "gameSessions/"+gsessA, "--player", "p4=", "-o", "json")), &added); err != nil ||
		added.Slot != 3 || added.State != "RESERVED" || added.Token == "" || added.PlayerData != "" {
		t.Fatalf("players add -o json: %v %+v", err, added)
	}
	if r := s.run("players", "add", gsessA, "--player", "p5"); r.code != 1 || !strings.Contains(r.stderr, "(GAME_SESSION_FULL)") ||
		strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("add to a full session: exit %d, stderr %q", r.code, r.stderr)
	}
	rows = tableRows(t, s.ok("players", "list", gsessA), playerHeader...)
	if len(rows) != 4 || rows[2][1] != "p3" || rows[3][0] != shortName(added.Name) {
		t.Fatalf("players list: %v", rows)
	}

	// The game server accepts p1, loses it and sees it back; p2 leaves.
	gsessAName := events.GameSessionName(gsessA)
	ps1ID, ps2ID := ps1[strings.Index(ps1, "/")+1:], ps2[strings.Index(ps2, "/")+1:]
	s.appendEvents(gsessAName,
		&eventsv1.PlayerAccepted{PlayerSession: ps1ID},
		&eventsv1.PlayerDisconnected{PlayerSession: ps1ID, ReconnectDeadline: timestamppb.New(time.Now().Add(2 * time.Minute))},
		&eventsv1.PlayerReconnected{PlayerSession: ps1ID},
		&eventsv1.PlayerAccepted{PlayerSession: ps2ID})
	seq := s.appendEvents(gsessAName,
		&eventsv1.PlayerSessionCompleted{PlayerSession: ps2ID, Reason: eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_LEFT})
	rows = tableRows(t, s.ok("players", "get", ps1, "--min-sequence", seq), playerHeader...)
	if len(rows) != 1 || strings.Join(rows[0], " ") != ps1+" p1 ACTIVE 0 1 -" {
		t.Fatalf("players get after a reconnect: %v", rows)
	}
	rows = tableRows(t, s.ok("players", "get", "gameSessions/"+gsessA+"/playerSessions/"+ps2ID), playerHeader...)
	if len(rows) != 1 || strings.Join(rows[0], " ") != ps2+" p2 COMPLETED 1 0 LEFT" {
		t.Fatalf("players get of one who left: %v", rows)
	}

	// Reconnect: endpoint, slot and a fresh token.
	sum, _ = summary(t, s.ok("players", "reconnect", ps1))
	if sum["Player session"] != ps1 || sum["Endpoint"] != "127.0.0.1:7001 (game/UDP)" || sum["Slot"] != "0" ||
		sum["State"] != "ACTIVE" || sum["Token"] == "" {
		t.Fatalf("reconnect: %v", sum)
	}
	var rc struct {
		PlayerSession struct {
			Name string `json:"name"`
			Slot int    `json:"slot"`
		} `json:"playerSession"`
		Endpoint struct {
			Address string `json:"address"`
		} `json:"endpoint"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(s.ok("players", "reconnect", ps1, "-o", "json")), &rc); err != nil ||
		!strings.HasSuffix(rc.PlayerSession.Name, "/playerSessions/"+ps1ID) || rc.Endpoint.Address != "127.0.0.1" || rc.Token == "" {
		t.Fatalf("reconnect -o json: %v %+v", err, rc)
	}
	if r := s.run("players", "reconnect", ps2); r.code != 1 || !strings.HasSuffix(r.stderr, "(PLAYER_SESSION_EXPIRED)\n") ||
		strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("reconnect after leaving: exit %d, stderr %q", r.code, r.stderr)
	}

	// Session B ends with its server.
	seq = s.appendEvents(events.GameSessionName(gsessB), &eventsv1.GameSessionEnded{
		Reason:       eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED,
		ServerReason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED,
	})
	rows = tableRows(t, s.ok("sessions", "list", "--state", "ENDED", "--min-sequence", seq), gameSessionHeader...)
	if len(rows) != 1 || strings.Join(rows[0][:5], " ") != gsessB+" arena/gs-2 ENDED 0/16 SERVER_ENDED(HEALTH_CHECK_FAILED)" {
		t.Fatalf("ended sessions: %v", rows)
	}
	rows = tableRows(t, s.ok("players", "list", gsessB), playerHeader...)
	if len(rows) != 1 || strings.Join(rows[0][1:], " ") != "p3 COMPLETED 0 0 GAME_SESSION_ENDED" {
		t.Fatalf("players of an ended session: %v", rows)
	}
	if out := s.ok("players", "list", gsessB, "-o", "json"); !json.Valid([]byte(out)) || !strings.Contains(out, `"playerSessions"`) {
		t.Fatalf("players list -o json: %s", out)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"unknown session", []string{"sessions", "get", "gsess-nope"}, "error: gameSessions/gsess-nope not found (NOT_FOUND)\n"},
		{"unknown player session", []string{"players", "get", gsessA + "/ps-nope"},
			"error: gameSessions/" + gsessA + "/playerSessions/ps-nope not found (NOT_FOUND)\n"},
		{"bad session name", []string{"sessions", "get", "a/b"}, "error: game session name \"a/b\": want " + gameSessionFormats + "\n"},
		{"bad player session name", []string{"players", "reconnect", "ps-1"}, "error: player session name \"ps-1\": want " + playerSessionFormats + "\n"},
		{"bad state", []string{"sessions", "list", "--state", "OVER"}, "(INVALID_ARGUMENT, field filter)\n"},
		{"bad selector", []string{"allocate", "arena", "--selector", "mode"}, "error: --selector \"mode\": want KEY=VALUE\n"},
		{"bad scheduling", []string{"allocate", "arena", "--scheduling", "random"}, "(INVALID_ARGUMENT, field scheduling)\n"},
		{"add without player", []string{"players", "add", gsessA}, "error: required flag(s) \"player\" not set\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.run(tc.args...)
			if r.code != 1 || !strings.HasSuffix(r.stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, tc.stderr)
			}
		})
	}
}
