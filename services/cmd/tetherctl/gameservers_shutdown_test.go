package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// gameservers shutdown asks the API to shut a server down with a grace and
// a detail, and shows the server SHUTTING_DOWN; bad input is refused
// before any call.
func TestGameServersShutdown(t *testing.T) {
	s := newStack(t)
	s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML))
	gs1 := events.GameServerName("arena", "gs-1")
	s.appendEvents(gs1, &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	s.startReadyServer(gs1, 7001)

	rows := tableRows(t, s.ok("gameservers", "shutdown", "arena/gs-1", "--grace", "5s", "--detail", "bad map rotation"), gameServerHeader...)
	if len(rows) != 1 || rows[0][0] != "arena/gs-1" || rows[0][1] != "SHUTTING_DOWN" {
		t.Fatalf("shutdown answered %v", rows)
	}
	hist, err := s.store.History(s.ctx, events.MustSubject(gs1), 0)
	if err != nil {
		t.Fatal(err)
	}
	var req *eventsv1.ShutdownRequested
	var at time.Time
	for _, e := range hist {
		if r, ok := e.Data.(*eventsv1.ShutdownRequested); ok {
			req, at = r, e.Time
		}
	}
	if req == nil || req.GetReason() != eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API ||
		req.GetDeadline().AsTime().Sub(at).Round(time.Second) != 5*time.Second ||
		!strings.Contains(req.GetEvidence().GetDetail(), "bad map rotation") {
		t.Fatalf("recorded %v at %s", req, at)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gameservers", "shutdown", "arena/gs-1", "--grace", "0s"}, "--grace must be whole seconds, at least 1s"},
		{[]string{"gameservers", "shutdown", "arena/gs-1", "--grace", "1500ms"}, "--grace must be whole seconds"},
		{[]string{"gameservers", "shutdown", "arena/gs-nope"}, "not found (NOT_FOUND)"},
	} {
		if r := s.run(tc.args...); r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
