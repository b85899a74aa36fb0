package main

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// gameservers update-counter and update-list change a server's counters
// and lists through the API; get shows them under the server, list in a
// column; a refusal says why, and bad input is refused before any call.
func TestGameServersCountersAndLists(t *testing.T) {
	s := newStack(t)
	s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML))
	gs1 := events.GameServerName("arena", "gs-1")
	s.appendEvents(gs1, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: &eventsv1.GameServerTemplate{Command: "/bin/game",
		Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 10}},
		Lists:    map[string]*eventsv1.List{"players": {Capacity: 3, Values: []string{"ann"}}},
	}})
	seq := s.startReadyServer(gs1, 7001)

	out := s.ok("gameservers", "get", "arena/gs-1", "--min-sequence", seq)
	for _, want := range []string{"Counter rooms:", "1 of 10", "List players:", "1 of 3", "ann"} {
		if !strings.Contains(out, want) {
			t.Fatalf("get does not show %q:\n%s", want, out)
		}
	}
	out = s.ok("gameservers", "update-counter", "arena/gs-1", "rooms", "--diff", "2")
	if !strings.Contains(out, "3 of 10") {
		t.Fatalf("update-counter --diff 2:\n%s", out)
	}
	out = s.ok("gameservers", "update-list", "arena/gs-1", "players", "--add", "bob", "--add", "cy", "--remove", "ann", "--capacity", "4")
	if !strings.Contains(out, "2 of 4") || !strings.Contains(out, "bob, cy") {
		t.Fatalf("update-list:\n%s", out)
	}
	rows := tableRows(t, strings.SplitN(s.ok("gameservers", "list", "--fleet", "arena"), "\n\n", 2)[0], gameServerHeader...)
	if len(rows) != 1 || rows[0][len(rows[0])-1] != "rooms=3/10,players=2/4" {
		t.Fatalf("list's counters column: %v", rows)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gameservers", "update-counter", "arena/gs-1", "rooms", "--count", "11"}, "COUNT_OUT_OF_RANGE"},
		{[]string{"gameservers", "update-counter", "arena/gs-1", "seats", "--diff", "1"}, "COUNTER_NOT_FOUND"},
		{[]string{"gameservers", "update-list", "arena/gs-1", "players", "--add", "bob"}, "LIST_VALUE_EXISTS"},
		{[]string{"gameservers", "update-list", "arena/gs-1", "players", "--remove", "zed"}, "LIST_VALUE_NOT_FOUND"},
		{[]string{"gameservers", "update-counter", "arena/gs-1", "rooms"}, "nothing to change"},
		{[]string{"gameservers", "update-list", "arena/gs-1", "players"}, "nothing to change"},
	} {
		if r := s.run(tc.args...); r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
