package events_test

import (
	"errors"
	"testing"

	"github.com/tetherhq/tether/events"
)

func TestSubjectRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		subject string
	}{
		{name: "fleet", in: "fleets/arena", subject: "tether.ev.fleet.arena"},
		{name: "host", in: "hosts/h1", subject: "tether.ev.host.h1"},
		{name: "game server", in: "fleets/arena/gameServers/gs-1", subject: "tether.ev.gs.arena.gs-1"},
		{name: "game session", in: "gameSessions/x", subject: "tether.ev.gsess.x"},
		{name: "player session", in: "gameSessions/x/playerSessions/y", subject: "tether.ev.ps.x.y"},
		{name: "longest ids", in: events.GameServerName(long63, long63), subject: "tether.ev.gs." + long63 + "." + long63},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.Subject(tt.in)
			if err != nil {
				t.Fatalf("Subject(%q): %v", tt.in, err)
			}
			if got != tt.subject {
				t.Errorf("Subject(%q) = %q, want %q", tt.in, got, tt.subject)
			}
			if must := events.MustSubject(tt.in); must != got {
				t.Errorf("MustSubject(%q) = %q, want %q", tt.in, must, got)
			}
			back, err := events.NameFromSubject(got)
			if err != nil {
				t.Fatalf("NameFromSubject(%q): %v", got, err)
			}
			if back != tt.in {
				t.Errorf("NameFromSubject(%q) = %q, want %q", got, back, tt.in)
			}
		})
	}
}

const long63 = "a123456789012345678901234567890123456789012345678901234567890bc"

func TestSubjectRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ""},
		{name: "collection only", in: "fleets"},
		{name: "unknown collection", in: "players/p1"},
		{name: "bad fleet id", in: "fleets/Arena"},
		{name: "empty fleet id", in: "fleets/"},
		{name: "id with a dot", in: "hosts/h.1"},
		{name: "wildcard id", in: "hosts/*"},
		{name: "full wildcard id", in: "hosts/>"},
		{name: "id too long", in: "hosts/" + long63 + "x"},
		{name: "bad game server id", in: "fleets/arena/gameServers/GS"},
		{name: "game server wrong collection", in: "fleets/arena/servers/gs-1"},
		{name: "player session under a fleet", in: "fleets/arena/playerSessions/p1"},
		{name: "game server under a game session", in: "gameSessions/x/gameServers/gs-1"},
		{name: "bad player session id", in: "gameSessions/x/playerSessions/Y"},
		{name: "odd segments", in: "fleets/arena/gameServers"},
		{name: "too many segments", in: "fleets/arena/gameServers/gs-1/x/y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.Subject(tt.in)
			if !errors.Is(err, events.ErrInvalidName) {
				t.Fatalf("Subject(%q) = %q, %v; want ErrInvalidName", tt.in, got, err)
			}
		})
	}
}

func TestMustSubjectPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustSubject of a malformed name did not panic")
		}
	}()
	events.MustSubject("fleets/Bad")
}

func TestNameFromSubjectRejects(t *testing.T) {
	tests := []struct {
		name    string
		subject string
	}{
		{name: "empty", subject: ""},
		{name: "other prefix", subject: "other.fleet.arena"},
		{name: "prefix only", subject: "tether.ev"},
		{name: "prefix and dot", subject: "tether.ev."},
		{name: "prefix lookalike", subject: "tether.events.fleet.arena"},
		{name: "unknown kind", subject: "tether.ev.player.p1"},
		{name: "fleet missing id", subject: "tether.ev.fleet"},
		{name: "fleet extra token", subject: "tether.ev.fleet.arena.x"},
		{name: "game server missing id", subject: "tether.ev.gs.arena"},
		{name: "player session missing id", subject: "tether.ev.ps.x"},
		{name: "bad id", subject: "tether.ev.host.H1"},
		{name: "empty id", subject: "tether.ev.host."},
		{name: "wildcard", subject: "tether.ev.gs.arena.*"},
		{name: "full wildcard", subject: "tether.ev.>"},
		{name: "fleet token holding a game server name", subject: "tether.ev.fleet.arena/gameServers/gs-1"},
		{name: "game session token holding a player session name", subject: "tether.ev.gsess.x/playerSessions/y"},
		{name: "host token holding a fleet name", subject: "tether.ev.host.h1/x/fleets/arena"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.NameFromSubject(tt.subject)
			if !errors.Is(err, events.ErrInvalidName) {
				t.Fatalf("NameFromSubject(%q) = %q, %v; want ErrInvalidName", tt.subject, got, err)
			}
		})
	}
}

func TestFleetGameServersSubject(t *testing.T) {
	if got, want := events.FleetGameServersSubject("arena"), "tether.ev.gs.arena.>"; got != want {
		t.Errorf("FleetGameServersSubject = %q, want %q", got, want)
	}
	// Both kinds of game server subject of the fleet have the wildcard's
	// shape.
	hosted, err := events.GameServerSubject(events.GameServerName("arena", "gs-1"), "hosts/h1")
	if err != nil {
		t.Fatal(err)
	}
	got := events.FleetGameServersSubject("arena")
	for _, s := range []string{events.MustSubject(events.GameServerName("arena", "gs-1")), hosted} {
		if s[:len(got)-1] != got[:len(got)-1] {
			t.Errorf("%q does not start like %q", s, got)
		}
	}
}

// TestGameServerSubject: a server on a host subject has its host as the
// subject's last token, which a host's NATS permissions name
// (HostGameServersSubject), and its name comes back from the subject.
func TestGameServerSubject(t *testing.T) {
	name := events.GameServerName("arena", "gs-1")
	got, err := events.GameServerSubject(name, "hosts/h1")
	if err != nil || got != "tether.ev.gs.arena.gs-1.h1" {
		t.Fatalf("GameServerSubject = %q, %v", got, err)
	}
	if back, err := events.NameFromSubject(got); err != nil || back != name {
		t.Fatalf("NameFromSubject(%q) = %q, %v", got, back, err)
	}
	if h, ok := events.SubjectHost(got); !ok || h != "hosts/h1" {
		t.Fatalf("SubjectHost(%q) = %q, %v", got, h, ok)
	}
	if h, ok := events.SubjectHost(events.MustSubject(name)); ok {
		t.Fatalf("SubjectHost of a subject without a host = %q", h)
	}
	if w := events.HostGameServersSubject("h1"); w != "tether.ev.gs.*.*.h1" {
		t.Fatalf("HostGameServersSubject = %q", w)
	}
	for _, bad := range [][2]string{{name, "h1"}, {name, "hosts/H1"}, {"fleets/arena", "hosts/h1"}, {name, "hosts/h.1"}} {
		if s, err := events.GameServerSubject(bad[0], bad[1]); !errors.Is(err, events.ErrInvalidName) {
			t.Errorf("GameServerSubject(%q, %q) = %q, %v; want ErrInvalidName", bad[0], bad[1], s, err)
		}
	}
	for _, bad := range []string{"tether.ev.gs.arena.gs-1.H1", "tether.ev.gs.arena.gs-1.h1.x", "tether.ev.gs.arena.gs-1.*"} {
		if n, err := events.NameFromSubject(bad); err == nil {
			t.Errorf("NameFromSubject(%q) = %q, want an error", bad, n)
		}
	}
}
