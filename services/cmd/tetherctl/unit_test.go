package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name, got, want string
	}{
		{"fleet short", fleetName("arena"), "fleets/arena"},
		{"fleet full", fleetName("fleets/arena"), "fleets/arena"},
		{"fleet id", fleetID("fleets/arena"), "arena"},
		{"host short", hostName("h1"), "hosts/h1"},
		{"host full", hostName("hosts/h1"), "hosts/h1"},
		{"short game server", shortName("fleets/arena/gameServers/gs-1"), "arena/gs-1"},
		{"short fleet", shortName("fleets/arena"), "arena"},
		{"short host", shortName("hosts/h1"), "h1"},
		{"short game session", shortName("gameSessions/gsess-1"), "gsess-1"},
		{"short player session", shortName("gameSessions/gsess-1/playerSessions/ps-1"), "gsess-1/ps-1"},
		{"other name kept", shortName("operations/x"), "operations/x"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"arena/gs-1", "fleets/arena/gameServers/gs-1", true},
		{"fleets/arena/gameServers/gs-1", "fleets/arena/gameServers/gs-1", true},
		{"gs-1", "fleets/-/gameServers/gs-1", true},
		{"", "", false},
		{"arena/", "", false},
		{"a/b/c", "", false},
	} {
		got, err := gameServerName(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("gameServerName(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestSessionNames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parse func(string) (string, error)
		in    string
		want  string
		ok    bool
	}{
		{"game session short", gameSessionName, "gsess-1", "gameSessions/gsess-1", true},
		{"game session full", gameSessionName, "gameSessions/gsess-1", "gameSessions/gsess-1", true},
		{"game session empty", gameSessionName, "gameSessions/", "", false},
		{"game session with a slash", gameSessionName, "gsess-1/ps-1", "", false},
		{"player session short", playerSessionName, "gsess-1/ps-1", "gameSessions/gsess-1/playerSessions/ps-1", true},
		{"player session full", playerSessionName, "gameSessions/gsess-1/playerSessions/ps-1", "gameSessions/gsess-1/playerSessions/ps-1", true},
		{"player session alone", playerSessionName, "ps-1", "", false},
		{"player session half", playerSessionName, "gsess-1/", "", false},
		{"player session too deep", playerSessionName, "a/b/c", "", false},
		{"player session of a session", playerSessionName, "gameSessions/gsess-1", "", false},
		{"player session wrong collection", playerSessionName, "gameSessions/gsess-1/players/ps-1", "", false},
		{"player session empty id", playerSessionName, "gameSessions/gsess-1/playerSessions/", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.parse(tc.in)
			if got != tc.want || (err == nil) != tc.ok {
				t.Fatalf("%q: got %q, %v", tc.in, got, err)
			}
		})
	}
}

func TestParsePlayers(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want string // "id:data" joined by " ", or the error
	}{
		{"none", nil, ""},
		{"id only", []string{"p1"}, "p1:"},
		{"data after the first =", []string{"p1=elo=1500,eu", "p2="}, "p1:elo=1500,eu p2:"},
		{"no id", []string{"=x"}, `--player "=x": want ID or ID=DATA`},
		{"empty", []string{""}, `--player "": want ID or ID=DATA`},
		{"twice", []string{"p1", "p1=x"}, "--player p1 given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			players, err := parsePlayers(tc.in)
			var got []string
			for _, p := range players {
				got = append(got, p.GetPlayerId()+":"+p.GetPlayerData())
			}
			if err != nil {
				got = []string{err.Error()}
			}
			if strings.Join(got, " ") != tc.want {
				t.Fatalf("got %q, want %q", strings.Join(got, " "), tc.want)
			}
		})
	}
}

func TestParseSelectors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want string // selectors as "k=v,…" joined by " | ", or the error
	}{
		{"none", nil, ""},
		{"one label", []string{"mode=ranked"}, "mode=ranked"},
		{"in order, labels sorted", []string{"region=eu,mode=ranked", "mode=ranked", ""}, "mode=ranked,region=eu | mode=ranked | "},
		{"spaces around pairs", []string{" a=1 , b=2 "}, "a=1,b=2"},
		{"empty value", []string{"tier="}, "tier="},
		{"no =", []string{"mode"}, `--selector "mode": want KEY=VALUE`},
		{"no key", []string{"=ranked"}, `--selector "=ranked": want KEY=VALUE`},
		{"trailing comma", []string{"mode=ranked,"}, `--selector "": want KEY=VALUE`},
		{"key twice", []string{"a=1,a=2"}, `--selector: key "a" given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sels, err := parseSelectors(tc.in)
			var got []string
			for _, s := range sels {
				got = append(got, keyValues(s.GetMatchLabels()))
			}
			if err != nil {
				got = []string{err.Error()}
			}
			if strings.Join(got, " | ") != tc.want {
				t.Fatalf("got %q, want %q", strings.Join(got, " | "), tc.want)
			}
		})
	}
}

func TestAllocateRequest(t *testing.T) {
	req, err := allocateFlags{
		players: []string{"p1=d"}, selectors: []string{"mode=ranked"}, properties: []string{"map=dust"},
		scheduling: "distributed", requestID: "r1", maxPlayers: 4,
	}.request("-")
	if err != nil {
		t.Fatal(err)
	}
	if req.GetParent() != "fleets/-" || req.GetRequestId() != "r1" || req.GetScheduling() != "DISTRIBUTED" ||
		req.GetSelector() != nil || len(req.GetSelectors()) != 1 || req.GetSelectors()[0].GetMatchLabels()["mode"] != "ranked" ||
		req.GetGameSession().GetProperties()["map"] != "dust" || req.GetGameSession().GetMaxPlayers() != 4 ||
		len(req.GetPlayers()) != 1 || req.GetPlayers()[0].GetPlayerData() != "d" {
		t.Fatalf("request %v", req)
	}
	if req, err := (allocateFlags{}).request("fleets/arena"); err != nil || req.GetParent() != "fleets/arena" ||
		len(req.GetSelectors()) != 0 || len(req.GetPlayers()) != 0 || req.GetGameSession().GetProperties() != nil {
		t.Fatalf("bare request %v, %v", req, err)
	}
	for _, f := range []allocateFlags{
		{maxPlayers: -1}, {properties: []string{"map"}}, {players: []string{"=x"}}, {selectors: []string{"x"}},
	} {
		if _, err := f.request("arena"); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}

func TestRetryHint(t *testing.T) {
	c := &client{addr: "127.0.0.1:7070"}
	for _, tc := range []struct {
		name string
		err  error
		hint bool
	}{
		{"refused", c.apiError("fleets/-", withDetails(t, status.New(codes.ResourceExhausted, "no READY game server"),
			&errdetails.ErrorInfo{Reason: "NO_READY_GAME_SERVER"}).Err()), false},
		{"invalid", c.apiError("fleets/-", status.New(codes.InvalidArgument, "bad").Err()), false},
		{"timeout", c.apiError("fleets/-", status.New(codes.DeadlineExceeded, "context deadline exceeded").Err()), true},
		{"unreachable", c.apiError("fleets/-", status.New(codes.Unavailable, "connection refused").Err()), true},
		{"not a status", c.apiError("fleets/-", errors.New("boom")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := retryHint(tc.err, "r1")
			if hint := strings.Contains(err.Error(), "repeat the same command with --request-id r1"); hint != tc.hint {
				t.Fatalf("%q: hint %v, want %v", err, hint, tc.hint)
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("%v does not wrap %v", err, tc.err)
			}
		})
	}
}

func TestEndpointAndSeats(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"no ports", endpoint(&tetherv1.Endpoint{Address: "10.0.0.1"}), "10.0.0.1"},
		{"unset", endpoint(nil), "-"},
		{"ports", endpoint(&tetherv1.Endpoint{Address: "10.0.0.1", Ports: []*tetherv1.Port{
			{Name: "game", Port: 7001}, {Name: "query", Port: 7002, Protocol: tetherv1.PortSpec_TCP}}}),
			"10.0.0.1:7001 (game/UDP), 10.0.0.1:7002 (query/TCP)"},
		{"seats", seats(&tetherv1.GameSession{PlayerCount: 2, MaxPlayers: 8}), "2/8"},
		{"unlimited seats", seats(&tetherv1.GameSession{PlayerCount: 2}), "2/-"},
		{"end reason", endReason(&tetherv1.GameSession{EndReason: "SERVER_READY_AGAIN"}), "SERVER_READY_AGAIN"},
		{"end reason with the server's", endReason(&tetherv1.GameSession{EndReason: "SERVER_ENDED", ServerReason: "HOST_LOST"}), "SERVER_ENDED(HOST_LOST)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func withDetails(t *testing.T, st *status.Status, details ...*errdetails.ErrorInfo) *status.Status {
	t.Helper()
	for _, d := range details {
		var err error
		if st, err = st.WithDetails(d); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func TestCallErrorMessages(t *testing.T) {
	info := func(reason string) *errdetails.ErrorInfo {
		return &errdetails.ErrorInfo{Reason: reason, Domain: "tether.dev"}
	}
	badReplicas, err := withDetails(t, status.New(codes.InvalidArgument, "fleet.replicas: must not be negative"), info("INVALID_ARGUMENT")).
		WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "fleet.replicas", Description: "fleet.replicas: must not be negative"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, resource string
		st             *status.Status
		want, reason   string
	}{
		{"not found names the resource", "fleets/x",
			withDetails(t, status.New(codes.NotFound, "game server fleets/x: projections: not found"), info("NOT_FOUND")),
			"fleets/x not found (NOT_FOUND)", "NOT_FOUND"},
		{"invalid argument names the field", "fleets/x", badReplicas,
			"fleet.replicas: must not be negative (INVALID_ARGUMENT, field fleet.replicas)", "INVALID_ARGUMENT"},
		{"conflict", "fleets/x",
			withDetails(t, status.New(codes.Aborted, "the resource changed concurrently; read it again and retry"), info("VERSION_CONFLICT")),
			"the resource changed concurrently; read it again and retry (VERSION_CONFLICT)", "VERSION_CONFLICT"},
		{"no error info: the code", "",
			status.New(codes.Unimplemented, "unknown method"), "unknown method (UNIMPLEMENTED)", "UNIMPLEMENTED"},
		{"server not reached", "",
			status.New(codes.Unavailable, "connection refused"),
			"cannot reach the API server at 127.0.0.1:7070: connection refused (UNAVAILABLE)", "UNAVAILABLE"},
		{"views behind", "fleets/x",
			withDetails(t, status.New(codes.Unavailable, "the views have not reached sequence 9 within 5s; retry later"), info("PROJECTION_BEHIND")),
			"the views have not reached sequence 9 within 5s; retry later (PROJECTION_BEHIND)", "PROJECTION_BEHIND"},
		{"client deadline", "",
			status.New(codes.DeadlineExceeded, "context deadline exceeded"),
			"no answer from the API server at 127.0.0.1:7070 in time (see --timeout) (DEADLINE_EXCEEDED)", "DEADLINE_EXCEEDED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &client{addr: "127.0.0.1:7070"}
			err := fmtWrap(c.apiError(tc.resource, tc.st.Err()))
			if got := errors.Unwrap(err).Error(); got != tc.want {
				t.Fatalf("message %q, want %q", got, tc.want)
			}
			var ce *callError
			if !errors.As(err, &ce) || ce.Reason() != tc.reason {
				t.Fatalf("reason of %v: want %s", err, tc.reason)
			}
			if status.Code(err) != tc.st.Code() {
				t.Fatalf("status.Code = %s through the wrapping, want %s", status.Code(err), tc.st.Code())
			}
		})
	}
}

// fmtWrap wraps like a caller would, to check the error survives wrapping.
func fmtWrap(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func TestParseFleetIgnoresOutputOnlyFields(t *testing.T) {
	// The output of "fleets get -o yaml" can be fed back to create.
	ff, err := parseFleet([]byte(`name: fleets/arena
replicas: 2
template: {command: /bin/game}
status: {readyReplicas: 1}
etag: "7"
sequence: "7"
createTime: "2026-01-02T03:04:05Z"
`))
	if err != nil {
		t.Fatal(err)
	}
	if ff.id != "arena" || ff.fleet.GetReplicas() != 2 || ff.fleet.GetName() != "" || ff.fleet.GetStatus() != nil ||
		ff.fleet.GetEtag() != "" || ff.fleet.GetSequence() != 0 || ff.fleet.GetCreateTime() != nil {
		t.Fatalf("parsed %v, id %q", ff.fleet, ff.id)
	}
	// snake_case names are accepted as protojson accepts them.
	if ff, err := parseFleet([]byte(`{"sdk_disconnect_grace_seconds": 9}`)); err != nil || ff.fleet.GetSdkDisconnectGraceSeconds() != 9 {
		t.Fatalf("snake_case: %v %v", ff.fleet, err)
	}
	// The protojson error stays reachable under its readable message.
	_, err = parseFleet([]byte("replicas: x\n"))
	var pe *protojsonError
	if !errors.As(err, &pe) || errors.Unwrap(pe) == nil || strings.HasPrefix(err.Error(), "proto") {
		t.Fatalf("type error %v", err)
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"}, {-time.Minute, "0s"}, {90 * time.Second, "90s"}, {45 * time.Minute, "45m"},
		{5 * time.Hour, "5h"}, {72 * time.Hour, "3d"},
	} {
		if got := age(now, timestamppb.New(now.Add(-tc.ago))); got != tc.want {
			t.Errorf("age of %s = %q, want %q", tc.ago, got, tc.want)
		}
	}
	if got := age(now, nil); got != "-" {
		t.Errorf("age of unset = %q", got)
	}
}

func gs(name string, state tetherv1.GameServer_State) *tetherv1.GameServer {
	return &tetherv1.GameServer{Name: "fleets/arena/gameServers/" + name, Host: "hosts/h1", State: state}
}

func TestDiffGameServers(t *testing.T) {
	known := map[string]*tetherv1.GameServer{}
	for _, g := range []*tetherv1.GameServer{gs("a", tetherv1.GameServer_READY), gs("b", tetherv1.GameServer_READY), gs("c", tetherv1.GameServer_STARTING)} {
		known[g.GetName()] = g
	}
	unhealthy := gs("b", tetherv1.GameServer_UNHEALTHY)
	unhealthy.Reason = "HEALTH_CHECK_FAILED"
	changes := diffGameServers(known, []*tetherv1.GameServer{
		gs("a", tetherv1.GameServer_READY), unhealthy, gs("d", tetherv1.GameServer_SCHEDULED)})

	var got []string
	for _, ch := range changes {
		got = append(got, ch.kind+" "+shortName(ch.gs.GetName())+" "+strings.Join(ch.details, ", "))
	}
	want := []string{
		"CHANGED arena/b state READY -> UNHEALTHY, reason - -> HEALTH_CHECK_FAILED",
		"GONE arena/c ",
		"ADDED arena/d ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if first := diffGameServers(nil, []*tetherv1.GameServer{gs("a", tetherv1.GameServer_READY)}); len(first) != 1 || first[0].kind != changeAdded {
		t.Fatalf("first poll: %+v", first)
	}
}

func TestPrintChangeFormats(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	ch := change{kind: changeChanged, gs: gs("a", tetherv1.GameServer_READY), details: []string{"state STARTING -> READY"}}
	for _, tc := range []struct{ format, want string }{
		{formatTable, "12:00:00 CHANGED arena/a state STARTING -> READY\n"},
		{formatJSON, `{"type":"CHANGED","time":"2026-01-10T12:00:00Z","gameServer":{"name":"fleets/arena/gameServers/a","host":"hosts/h1","state":"READY"},"changes":["state STARTING -> READY"]}` + "\n"},
		{formatYAML, "---\nchanges:\n- state STARTING -> READY\ngameServer:\n  host: hosts/h1\n  name: fleets/arena/gameServers/a\n  state: READY\ntime: \"2026-01-10T12:00:00Z\"\ntype: CHANGED\n"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			var out bytes.Buffer
			a := &app{out: &out, output: tc.format}
			if err := a.printChange(now, ch); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			if tc.format == formatJSON {
				// protojson varies its spacing on purpose.
				var compact bytes.Buffer
				if err := json.Compact(&compact, []byte(got)); err != nil {
					t.Fatalf("not JSON: %v: %q", err, got)
				}
				got = compact.String() + "\n"
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A scale says what it set in motion beside the counts of now: `fleets
// scale arena 1` printed READY 5 and nothing else, which read as the
// scale not done.
func TestScaleNoteSaysWhatWillChange(t *testing.T) {
	fleet := func(want, live int32) *tetherv1.Fleet {
		return &tetherv1.Fleet{Name: "fleets/arena", Replicas: want, Status: &tetherv1.FleetStatus{Replicas: live, ReadyReplicas: live}}
	}
	for _, c := range []struct {
		f    *tetherv1.Fleet
		want string
	}{
		{fleet(1, 5), "arena: scaling from 5 to 1 servers: 4 above it stop, READY and starting ones first"},
		{fleet(5, 2), "arena: scaling from 2 to 5 servers: 3 will start"},
		{fleet(3, 3), "arena: 3 servers, as asked"},
	} {
		if got := scaleNote(c.f); !strings.HasPrefix(got, c.want) {
			t.Errorf("scaleNote(%d of %d) = %q, want it to start %q", c.f.GetStatus().GetReplicas(), c.f.GetReplicas(), got, c.want)
		}
	}
}

// A rollout's counts agree with the table of servers per revision printed
// under them: the first `rollout status` printed "updated 0 (0 READY)"
// (the controller's last record) above revision 2 with 1 server READY.
func TestRolloutCountsAgreeWithTheirTable(t *testing.T) {
	f := &tetherv1.Fleet{Name: "fleets/arena", Revision: 2, Status: &tetherv1.FleetStatus{
		Rollout: &tetherv1.RolloutStatus{State: "PROGRESSING", Revision: 2, FromRevision: 1},
		Revisions: []*tetherv1.RevisionCount{
			{Revision: 1, Replicas: 2, ReadyReplicas: 1, AllocatedReplicas: 1},
			{Revision: 2, Replicas: 1, ReadyReplicas: 1},
		},
	}}
	var b strings.Builder
	a := &app{now: time.Now}
	a.rolloutText(&b, f)
	if !strings.Contains(b.String(), "updated 1 (1 READY), outdated 2 (1 holding a match)") {
		t.Errorf("rollout status:\n%s", b.String())
	}
}
