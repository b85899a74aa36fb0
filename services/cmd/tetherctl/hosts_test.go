package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

var hostHeader = []string{"NAME", "STATE", "USED/CAPACITY", "ADDRESS", "LABELS", "HEARTBEAT"}

func TestHosts(t *testing.T) {
	s := newStack(t)

	// No host has registered yet.
	if rows := tableRows(t, s.ok("hosts", "list"), hostHeader...); len(rows) != 0 {
		t.Fatalf("hosts on an empty system: %v", rows)
	}
	if out := s.ok("hosts", "list", "-o", "json"); strings.Join(strings.Fields(out), "") != `{"hosts":[]}` {
		t.Fatalf("empty host list as JSON: %s", out)
	}
	if r := s.run("hosts", "get", "h1"); r.code != 1 || r.stderr != "error: hosts/h1 not found (NOT_FOUND)\n" {
		t.Fatalf("get of an unknown host: exit %d, stderr %q", r.code, r.stderr)
	}

	// An agent registers h1.
	seq := s.appendEvents(events.HostName("h1"), &eventsv1.HostRegistered{
		Capacity: 4, Address: "127.0.0.1", Labels: map[string]string{"zone": "a", "region": "eu"}})
	out := s.ok("hosts", "list", "--min-sequence", seq)
	rows := tableRows(t, out, hostHeader...)
	if len(rows) != 1 || strings.Join(rows[0][:5], " ") != "h1 ONLINE 0/4 127.0.0.1 region=eu,zone=a" {
		t.Fatalf("host rows: %v\n%s", rows, out)
	}

	var h struct {
		Name     string `json:"name"`
		Capacity int    `json:"capacity"`
		Address  string `json:"address"`
	}
	if err := json.Unmarshal([]byte(s.ok("hosts", "get", "hosts/h1", "-o", "json")), &h); err != nil ||
		h.Name != "hosts/h1" || h.Capacity != 4 || h.Address != "127.0.0.1" {
		t.Fatalf("get -o json: %v %+v", err, h)
	}
}
