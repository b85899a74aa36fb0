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

func TestHostsCordonDrainUncordon(t *testing.T) {
	s := newStack(t)
	if r := s.run("hosts", "cordon", "h1"); r.code != 1 || r.stderr != "error: hosts/h1 not found (NOT_FOUND)\n" {
		t.Fatalf("cordon of an unknown host: exit %d, stderr %q", r.code, r.stderr)
	}
	s.appendEvents(events.HostName("h1"), &eventsv1.HostRegistered{Capacity: 4, Address: "127.0.0.1"})
	for _, step := range []struct{ args, state string }{
		{"cordon h1", "ONLINE,CORDONED"},
		{"cordon hosts/h1", "ONLINE,CORDONED"},
		{"drain h1", "DRAINING"},
		{"uncordon h1", "ONLINE"},
		{"uncordon h1", "ONLINE"},
	} {
		rows := tableRows(t, s.ok(append([]string{"hosts"}, strings.Fields(step.args)...)...), hostHeader...)
		if len(rows) != 1 || rows[0][1] != step.state {
			t.Fatalf("hosts %s: %v, want state %s", step.args, rows, step.state)
		}
	}
	// Each change is in the host's history, by whom (one cordon: the second
	// changed nothing).
	out := s.ok("audit", "history", "hosts/h1")
	for _, typ := range []string{"HostCordoned", "HostDrainRequested", "HostUncordoned"} {
		if strings.Count(out, typ) != 1 {
			t.Fatalf("audit of hosts/h1 has %d %s, want 1:\n%s", strings.Count(out, typ), typ, out)
		}
	}
}
