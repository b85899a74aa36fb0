package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

var gameServerHeader = []string{"NAME", "STATE", "CONNECTION", "HEALTH", "HOST", "ADDRESS", "PORTS", "PID", "REV", "REASON", "AGE", "COUNTERS"}

// startReadyServer appends what an agent reports for a server that
// starts, connects its SDK and becomes Ready; it returns the last sequence.
func (s *stack) startReadyServer(name string, port int32) string {
	s.t.Helper()
	return s.appendEvents(name,
		&eventsv1.ProcessStarted{Pid: 4242, Address: "127.0.0.1", Attempt: 1,
			Ports: []*eventsv1.Port{{Name: "game", Port: port, Protocol: eventsv1.Protocol_PROTOCOL_UDP}}},
		&eventsv1.SdkConnected{Transport: "http"},
		&eventsv1.GameServerReady{},
	)
}

func TestGameServers(t *testing.T) {
	s := newStack(t)
	s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML))
	gs1 := events.GameServerName("arena", "gs-1")
	gs2 := events.GameServerName("arena", "gs-2")
	s.appendEvents(gs1, &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	s.appendEvents(gs2, &eventsv1.GameServerScheduled{Host: "hosts/h2"})
	seq := s.startReadyServer(gs1, 7001)

	out := s.ok("gameservers", "list", "--min-sequence", seq)
	rows := tableRows(t, out, gameServerHeader...)
	if len(rows) != 2 ||
		strings.Join(rows[0][:10], " ") != "arena/gs-1 READY CONNECTED HEALTHY h1 127.0.0.1 game:7001/UDP 4242 - -" ||
		strings.Join(rows[1][:10], " ") != "arena/gs-2 SCHEDULED - - h2 - - - - -" {
		t.Fatalf("game servers of all fleets:\n%s", out)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"fleet", []string{"--fleet", "arena"}, []string{"arena/gs-1", "arena/gs-2"}},
		{"other fleet", []string{"--fleet", "fleets/duel"}, nil},
		{"state", []string{"--state", "ready"}, []string{"arena/gs-1"}},
		{"host", []string{"--host", "h2"}, []string{"arena/gs-2"}},
		{"state and host", []string{"--state", "READY", "--host", "hosts/h2"}, nil},
		{"connection", []string{"--connection", "CONNECTED"}, []string{"arena/gs-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := tableRows(t, s.ok(append([]string{"gameservers", "list"}, tc.args...)...), gameServerHeader...)
			var names []string
			for _, r := range rows {
				names = append(names, r[0])
			}
			if strings.Join(names, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("listed %v, want %v", names, tc.want)
			}
		})
	}

	var list struct {
		GameServers []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"gameServers"`
	}
	if err := json.Unmarshal([]byte(s.ok("gs", "list", "--state", "READY", "-o", "json")), &list); err != nil ||
		len(list.GameServers) != 1 || list.GameServers[0].Name != gs1 || list.GameServers[0].State != "READY" {
		t.Fatalf("list -o json: %v %+v", err, list)
	}

	// Get, by short and full name.
	var g struct {
		Name  string `json:"name"`
		Host  string `json:"host"`
		Pid   int    `json:"pid"`
		Ports []struct {
			Name string `json:"name"`
			Port int    `json:"port"`
		} `json:"ports"`
		Connection struct {
			State string `json:"state"`
		} `json:"connection"`
	}
	if err := json.Unmarshal([]byte(s.ok("gameservers", "get", "arena/gs-1", "-o", "json")), &g); err != nil ||
		g.Name != gs1 || g.Host != "hosts/h1" || g.Pid != 4242 || len(g.Ports) != 1 || g.Ports[0].Port != 7001 || g.Connection.State != "CONNECTED" {
		t.Fatalf("get -o json: %v %+v", err, g)
	}
	if rows := tableRows(t, s.ok("gameservers", "get", gs2), gameServerHeader...); len(rows) != 1 || rows[0][0] != "arena/gs-2" {
		t.Fatalf("get by full name: %v", rows)
	}

	// The fleet's counts come from its game servers.
	if rows := tableRows(t, s.ok("fleets", "get", "arena"), fleetHeader...); strings.Join(rows[0][:5], " ") != "arena 3 1 0 0" {
		t.Fatalf("fleet with one ready server: %v", rows)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"unknown game server", []string{"gameservers", "get", "arena/gs-nope"}, "error: fleets/arena/gameServers/gs-nope not found (NOT_FOUND)\n"},
		{"unknown state", []string{"gameservers", "list", "--state", "ASLEEP"}, "(INVALID_ARGUMENT, field filter)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.run(tc.args...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, tc.stderr)
			}
		})
	}
}

func TestWatchPrintsChangesUntilCancelled(t *testing.T) {
	s := newStack(t)
	s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML))
	gs1 := events.GameServerName("arena", "gs-1")
	seq := s.appendEvents(gs1, &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	// Wait until the views hold gs-1, so the first poll sees it.
	s.ok("gameservers", "get", "arena/gs-1", "--min-sequence", seq)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		root := newRoot(&out)
		done <- execute(ctx, root, []string{"--addr", s.addr, "gameservers", "watch", "--fleet", "arena", "--interval", "20ms"}, &errOut)
	}()
	// lines returns the watch lines without their clock time.
	lines := func() []string {
		var ls []string
		for l := range strings.Lines(out.String()) {
			if _, rest, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
				ls = append(ls, strings.Join(strings.Fields(rest), " "))
			}
		}
		return ls
	}
	// A poll may fall between two events of one batch of appends, so the
	// test replays the lines rather than expecting an exact list: every
	// CHANGED must start from what the earlier lines said.
	replay := func() (map[string]map[string]string, error) {
		servers := map[string]map[string]string{}
		for _, l := range lines() {
			kind, rest, _ := strings.Cut(l, " ")
			name, rest, _ := strings.Cut(rest, " ")
			switch kind {
			case changeAdded:
				if servers[name] != nil {
					return nil, fmt.Errorf("%s added twice", name)
				}
				servers[name] = map[string]string{}
				for _, kv := range strings.Fields(rest) {
					k, v, _ := strings.Cut(kv, "=")
					servers[name][k] = v
				}
			case changeChanged:
				dims := servers[name]
				if dims == nil {
					return nil, fmt.Errorf("%s changed before it was added", name)
				}
				for d := range strings.SplitSeq(rest, ", ") {
					var dim, from, to string
					if _, err := fmt.Sscanf(d, "%s %s -> %s", &dim, &from, &to); err != nil {
						return nil, fmt.Errorf("line %q: %w", l, err)
					}
					if dims[dim] != from || from == to {
						return nil, fmt.Errorf("line %q: %s was %s", l, dim, dims[dim])
					}
					dims[dim] = to
				}
			default:
				return nil, fmt.Errorf("unexpected line %q", l)
			}
		}
		return servers, nil
	}
	// waitFor waits until the replayed lines show these dimensions of name.
	waitFor := func(name string, want map[string]string) {
		t.Helper()
		wait.For(t, 10*time.Second, fmt.Sprintf("watch to show %s as %v", name, want), func() bool {
			servers, err := replay()
			if err != nil {
				t.Fatalf("watch output inconsistent: %v\n%s", err, out.String())
			}
			for k, v := range want {
				if servers[name][k] != v {
					return false
				}
			}
			return true
		})
	}

	waitFor("arena/gs-1", map[string]string{"state": "SCHEDULED", "connection": "-", "health": "-", "reason": "-", "host": "h1"})
	s.startReadyServer(gs1, 7001)
	waitFor("arena/gs-1", map[string]string{"state": "READY", "connection": "CONNECTED", "health": "HEALTHY", "reason": "-", "host": "h1", "pid": "4242"})
	s.appendEvents(events.GameServerName("arena", "gs-2"), &eventsv1.GameServerScheduled{Host: "hosts/h2"})
	waitFor("arena/gs-2", map[string]string{"state": "SCHEDULED", "connection": "-", "health": "-", "reason": "-", "host": "h2"})
	s.appendEvents(gs1, &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN})
	waitFor("arena/gs-1", map[string]string{"state": "TERMINATED", "reason": "FLEET_SCALED_DOWN", "pid": "-"})

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("watch ended with exit %d: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end when its context was cancelled")
	}
	if _, err := replay(); err != nil {
		t.Fatalf("watch output inconsistent: %v\n%s", err, out.String())
	}
	if errOut.String() != "" {
		t.Fatalf("watch wrote to stderr: %q", errOut.String())
	}
}

// TestGameServersListLiveAndFindByID: a list leaves the ended servers out
// and counts them, --all and --state TERMINATED show them, an ended
// server's health reads "was HEALTHY" and its one last heartbeat is the
// agent's, and an id alone names a server that no other fleet has one of.
func TestGameServersListLiveAndFindByID(t *testing.T) {
	s := newStack(t)
	s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML))
	s.ok("fleets", "create", "-f", writeFile(t, "duel.yaml", strings.Replace(arenaYAML, "name: arena", "name: duel", 1)))
	live, ended := events.GameServerName("arena", "gs-live"), events.GameServerName("arena", "gs-ended")
	s.appendEvents(live, &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	s.startReadyServer(live, 7001)
	s.appendEvents(ended, &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	s.startReadyServer(ended, 7002)
	lastBeat := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	s.appendEvents(ended, &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_EXITED,
		Evidence: &eventsv1.Evidence{LastHeartbeatTime: timestamppb.New(lastBeat)}})
	// The same id in two fleets.
	s.appendEvents(events.GameServerName("arena", "gs-twice"), &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	seq := s.appendEvents(events.GameServerName("duel", "gs-twice"), &eventsv1.GameServerScheduled{Host: "hosts/h2"})

	names := func(out string) string {
		t.Helper()
		table, _, _ := strings.Cut(out, "\n\n") // the table, without the line under it
		var got []string
		for _, r := range tableRows(t, table, gameServerHeader...) {
			got = append(got, r[0])
		}
		return strings.Join(got, " ")
	}
	out := s.ok("gameservers", "list", "--min-sequence", seq)
	if names(out) != "arena/gs-live arena/gs-twice duel/gs-twice" || !strings.HasSuffix(out, "\n\n1 ended not shown (--all shows them)\n") {
		t.Fatalf("list shows the live servers and counts the ended one:\n%s", out)
	}
	if out := s.ok("gameservers", "list", "--fleet", "duel"); names(out) != "duel/gs-twice" || strings.Contains(out, "ended") {
		t.Fatalf("a fleet with no ended server says nothing of them:\n%s", out)
	}
	out = s.ok("gameservers", "list", "--all")
	if names(out) != "arena/gs-ended arena/gs-live arena/gs-twice duel/gs-twice" || strings.Contains(out, "not shown") {
		t.Fatalf("--all shows every server:\n%s", out)
	}
	rows := tableRows(t, s.ok("gameservers", "list", "--state", "TERMINATED"), gameServerHeader...)
	if len(rows) != 1 || rows[0][0] != "arena/gs-ended" || rows[0][3] != "was" || rows[0][4] != "HEALTHY" {
		t.Fatalf("--state TERMINATED shows the ended one, its health as it was: %v", rows)
	}
	var got struct {
		Name   string `json:"name"`
		Health struct {
			LastHeartbeatTime time.Time `json:"lastHeartbeatTime"`
		} `json:"health"`
		Evidence struct {
			LastHeartbeatTime time.Time `json:"lastHeartbeatTime"`
		} `json:"evidence"`
	}
	// An id alone, of an ended server too.
	if err := json.Unmarshal([]byte(s.ok("gameservers", "get", "gs-ended", "-o", "json")), &got); err != nil || got.Name != ended {
		t.Fatalf("get by id: %v %+v", err, got)
	}
	if !got.Health.LastHeartbeatTime.Equal(lastBeat) || !got.Evidence.LastHeartbeatTime.Equal(lastBeat) {
		t.Fatalf("an ended server has one last heartbeat, %s: health says %s, evidence %s", lastBeat, got.Health.LastHeartbeatTime, got.Evidence.LastHeartbeatTime)
	}
	if out := s.ok("audit", "explain", "gs-ended"); !strings.Contains(out, "PROCESS_EXITED") {
		t.Fatalf("audit explain by id:\n%s", out)
	}
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"gameservers", "get", "gs-nope"}, "error: gs-nope not found (NOT_FOUND)"},
		{[]string{"gameservers", "get", "gs-twice"}, "game server id gs-twice is in more than one fleet (arena/gs-twice, duel/gs-twice): name it FLEET/gs-twice"},
		{[]string{"gameservers", "shutdown", "gs-twice"}, "is in more than one fleet"},
	} {
		if r := s.run(tc.args...); r.code == 0 || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want an error with %q", tc.args, r.code, r.stderr, tc.stderr)
		}
	}
}
