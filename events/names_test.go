package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/events"
)

func TestValidID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		want bool
	}{
		{name: "single letter", id: "a", want: true},
		{name: "letters digits dashes", id: "arena-eu-1", want: true},
		{name: "generated style", id: "gs-7f3k2q9a", want: true},
		{name: "63 characters", id: "a" + strings.Repeat("b", 62), want: true},
		{name: "64 characters is too long", id: "a" + strings.Repeat("b", 63), want: false},
		{name: "empty", id: "", want: false},
		{name: "uppercase", id: "Arena", want: false},
		{name: "uppercase inside", id: "arEna", want: false},
		{name: "leading digit", id: "1arena", want: false},
		{name: "leading dash", id: "-arena", want: false},
		{name: "trailing dash", id: "arena-", want: false},
		{name: "underscore", id: "are_na", want: false},
		{name: "dot would split a subject", id: "are.na", want: false},
		{name: "slash", id: "a/b", want: false},
		{name: "NATS wildcard", id: "*", want: false},
		{name: "trailing newline", id: "arena\n", want: false},
		{name: "space", id: "are na", want: false},
		{name: "non-ASCII letter", id: "arén", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.ValidID(tt.id); got != tt.want {
				t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
			}
			err := events.CheckID(tt.id)
			if tt.want && err != nil {
				t.Errorf("CheckID(%q) = %v, want nil", tt.id, err)
			}
			if !tt.want && !errors.Is(err, events.ErrInvalidName) {
				t.Errorf("CheckID(%q) = %v, want ErrInvalidName", tt.id, err)
			}
		})
	}
}

func TestNameConstructors(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{name: "fleet", got: events.FleetName("arena"), want: "fleets/arena"},
		{name: "host", got: events.HostName("h1"), want: "hosts/h1"},
		{name: "game server", got: events.GameServerName("arena", "gs-1"), want: "fleets/arena/gameServers/gs-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestParseFleetName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr bool
	}{
		{name: "good", in: "fleets/arena", want: "arena"},
		{name: "empty", in: "", wantErr: true},
		{name: "collection only", in: "fleets", wantErr: true},
		{name: "empty id", in: "fleets/", wantErr: true},
		{name: "bad id", in: "fleets/Arena", wantErr: true},
		{name: "wrong collection", in: "hosts/arena", wantErr: true},
		{name: "collection case", in: "Fleets/arena", wantErr: true},
		{name: "nested", in: "fleets/arena/gameServers/gs-1", wantErr: true},
		{name: "trailing slash", in: "fleets/arena/", wantErr: true},
		{name: "leading slash", in: "/fleets/arena", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.ParseFleetName(tt.in)
			checkParse(t, got, tt.want, err, tt.wantErr)
		})
	}
}

func TestParseHostName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr bool
	}{
		{name: "good", in: "hosts/h1", want: "h1"},
		{name: "empty id", in: "hosts/", wantErr: true},
		{name: "bad id", in: "hosts/h_1", wantErr: true},
		{name: "wrong collection", in: "fleets/h1", wantErr: true},
		{name: "no collection", in: "h1", wantErr: true},
		{name: "nested", in: "hosts/h1/x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.ParseHostName(tt.in)
			checkParse(t, got, tt.want, err, tt.wantErr)
		})
	}
}

func TestParseGameServerName(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantFleet string
		wantID    string
		wantErr   bool
	}{
		{name: "good", in: "fleets/arena/gameServers/gs-1", wantFleet: "arena", wantID: "gs-1"},
		{name: "fleet name only", in: "fleets/arena", wantErr: true},
		{name: "wrong collection", in: "fleets/arena/servers/gs-1", wantErr: true},
		{name: "collection case", in: "fleets/arena/gameservers/gs-1", wantErr: true},
		{name: "wrong root", in: "hosts/arena/gameServers/gs-1", wantErr: true},
		{name: "bad fleet id", in: "fleets/Arena/gameServers/gs-1", wantErr: true},
		{name: "bad server id", in: "fleets/arena/gameServers/gs_1", wantErr: true},
		{name: "empty server id", in: "fleets/arena/gameServers/", wantErr: true},
		{name: "too long", in: "fleets/arena/gameServers/gs-1/x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet, id, err := events.ParseGameServerName(tt.in)
			if tt.wantErr {
				if !errors.Is(err, events.ErrInvalidName) {
					t.Fatalf("ParseGameServerName(%q) err = %v, want ErrInvalidName", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseGameServerName(%q): %v", tt.in, err)
			}
			if fleet != tt.wantFleet || id != tt.wantID {
				t.Errorf("ParseGameServerName(%q) = %q, %q; want %q, %q", tt.in, fleet, id, tt.wantFleet, tt.wantID)
			}
		})
	}
}

func checkParse(t *testing.T, got, want string, err error, wantErr bool) {
	t.Helper()
	if wantErr {
		if !errors.Is(err, events.ErrInvalidName) {
			t.Fatalf("err = %v (id %q), want ErrInvalidName", err, got)
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNewID(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
	}{
		{name: "game server", prefix: "gs"},
		{name: "game session", prefix: "gsess"},
		{name: "player session", prefix: "ps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := map[string]bool{}
			for range 200 {
				id := events.NewID(tt.prefix)
				if !strings.HasPrefix(id, tt.prefix+"-") {
					t.Fatalf("NewID(%q) = %q, want prefix %q", tt.prefix, id, tt.prefix+"-")
				}
				if !events.ValidID(id) {
					t.Fatalf("NewID(%q) = %q is not a valid id", tt.prefix, id)
				}
				if seen[id] {
					t.Fatalf("NewID(%q) repeated %q", tt.prefix, id)
				}
				seen[id] = true
			}
		})
	}
}

// A game server's fleet name is the start of its name, checked as the
// name is parsed, and taking it allocates nothing.
func TestGameServerFleetName(t *testing.T) {
	name := events.GameServerName("arena", "gs-1")
	got, err := events.GameServerFleetName(name)
	if err != nil || got != events.FleetName("arena") {
		t.Fatalf("GameServerFleetName(%q) = %q, %v; want %q", name, got, err, events.FleetName("arena"))
	}
	for _, bad := range []string{"fleets/arena", "fleets/arena/gameServers/", "hosts/h1", "fleets/Arena!/gameServers/gs-1", "fleets/arena/gameServers/a/b"} {
		if got, err := events.GameServerFleetName(bad); err == nil {
			t.Errorf("GameServerFleetName(%q) = %q, want an error", bad, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = events.GameServerFleetName(name) }); n != 0 {
		t.Fatalf("%v allocations a call, want 0", n)
	}
}
