package events_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Fuzz targets for what Tether decodes from outside: stored envelopes,
// resource names and fleet specs. `make fuzz` runs each for a bounded
// time (docs/fuzzing.md); without -fuzz, `go test` runs the seeds and the
// corpus in testdata/fuzz as regression tests.

// seedEnvelopes are valid stored events of every aggregate.
func seedEnvelopes(f *testing.F) {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, e := range []events.Envelope{
		events.New("fleets/arena/gameServers/gs-1", at, &eventsv1.GameServerScheduled{Host: "hosts/h1"}),
		events.New("fleets/arena/gameServers/gs-1", at, &eventsv1.GameServerReady{}),
		events.New("fleets/arena/gameServers/gs-1", at, &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_EXITED}),
		events.New("fleets/arena/gameServers/gs-1", at, &eventsv1.CounterChanged{Name: "rooms", Count: 2, Capacity: 10, CountDiff: 1}),
		events.New("fleets/arena/gameServers/gs-1", at, &eventsv1.ListChanged{Name: "players", Capacity: 4, Values: []string{"p1"}, Added: []string{"p1"}}),
		events.New("fleets/arena", at, &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 2}}),
		events.New("hosts/h1", at, &eventsv1.HostRegistered{Capacity: 4}),
		events.New("gameSessions/m1", at, &eventsv1.GameSessionCreated{GameServer: "fleets/arena/gameServers/gs-1"}),
	} {
		b, err := e.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// Every envelope field set, a payload with a map, and a time out of
	// Timestamp's range.
	full := events.New("fleets/arena", at, &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{
		Replicas: 3, Labels: map[string]string{"mode": "ranked", "region": "eu"},
		Template: &eventsv1.GameServerTemplate{Command: "/bin/game", Env: map[string]string{"A": "1"}},
	}})
	full.Producer, full.Actor, full.RequestID, full.RequestFingerprint = "apiservers/a1", "ops-alice (operator, api-key)", "req-1", "9f86d081"
	full.CorrelationID, full.CausationID, full.SchemaVersion = "req-1", "0123456789abcdef", 2
	full.TraceParent, full.TraceState = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tether=1"
	far := events.New("hosts/h1", time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC), &eventsv1.HostRegistered{Capacity: 1})
	for _, e := range []events.Envelope{full, far} {
		b, err := e.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
}

// Any bytes decode to an envelope or to an error wrapping ErrUndecodable
// (the projector dead-letters those), never a panic or another error; a
// decoded envelope encodes again, and the bytes decode to the same event,
// every field of its envelope included.
func FuzzUnmarshal(f *testing.F) {
	seedEnvelopes(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.Unmarshal(b)
		if err != nil {
			if !errors.Is(err, events.ErrUndecodable) {
				t.Fatalf("refused with %v, which is not ErrUndecodable", err)
			}
			return
		}
		if e.Data == nil || e.Type != events.TypeOf(e.Data) {
			t.Fatalf("decoded an envelope whose type %q is not its payload's", e.Type)
		}
		again, err := e.Marshal()
		if err != nil {
			t.Fatalf("a decoded envelope does not encode again: %v", err)
		}
		e2, err := events.Unmarshal(again)
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		if !sameEnvelope(e, e2) {
			t.Fatalf("round trip changed the event: %+v → %+v", e, e2)
		}
	})
}

// sameEnvelope reports whether two envelopes are the same event, every
// field compared.
func sameEnvelope(a, b events.Envelope) bool {
	return a.ID == b.ID && a.Type == b.Type && a.Aggregate == b.Aggregate && a.Time.Equal(b.Time) &&
		a.Producer == b.Producer && a.Actor == b.Actor && a.RequestID == b.RequestID &&
		a.RequestFingerprint == b.RequestFingerprint && a.CorrelationID == b.CorrelationID &&
		a.CausationID == b.CausationID && a.TraceParent == b.TraceParent && a.TraceState == b.TraceState &&
		a.SchemaVersion == b.SchemaVersion && proto.Equal(a.Data, b.Data)
}

// Apply folds any decodable event into any aggregate without a panic, and
// never changes the state it is given.
func FuzzApply(f *testing.F) {
	seedEnvelopes(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.Unmarshal(b)
		if err != nil {
			return
		}
		gs := &eventsv1.GameServerState{Name: "fleets/arena/gameServers/gs-1", Lifecycle: eventsv1.Lifecycle_LIFECYCLE_READY,
			Counters: map[string]*eventsv1.Counter{"rooms": {Count: 1, Capacity: 10}},
			Lists:    map[string]*eventsv1.List{"players": {Capacity: 4, Values: []string{"p0"}}}}
		before := proto.CloneOf(gs)
		_, _ = events.ApplyGameServer(nil, e)
		_, _ = events.ApplyGameServer(gs, e)
		if !proto.Equal(gs, before) {
			t.Fatalf("ApplyGameServer changed its input: %v → %v", before, gs)
		}
		_, _ = events.ApplyFleet(nil, e)
		_, _ = events.ApplyHost(nil, e)
		_, _ = events.ApplyGameSession(nil, e)
	})
}

// A game server name parses or is refused; one that parses is rebuilt
// from its parts exactly.
func FuzzParseGameServerName(f *testing.F) {
	for _, s := range []string{"fleets/arena/gameServers/gs-1", "fleets//gameServers/x", "fleets/a/gameServers/b/c", "", "hosts/h1", "fleets/ä/gameServers/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		fleet, id, err := events.ParseGameServerName(name)
		if err != nil {
			return
		}
		if got := events.GameServerName(fleet, id); got != name {
			t.Fatalf("%q parsed to (%q, %q), which name %q", name, fleet, id, got)
		}
		if _, err := events.Subject(name); err != nil {
			t.Fatalf("%q parses but has no subject: %v", name, err)
		}
	})
}

// A fleet spec is valid or refused with an error, never a panic; a valid
// one normalised stays valid, and normalising it again changes nothing.
func FuzzValidateFleetSpec(f *testing.F) {
	for _, s := range []*eventsv1.FleetSpec{
		{Replicas: 3, Template: &eventsv1.GameServerTemplate{Command: "/bin/game", Ports: []*eventsv1.PortSpec{{Name: "game", Protocol: eventsv1.Protocol_PROTOCOL_UDP}}}},
		{Replicas: -1},
		{Replicas: 1, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}, Labels: map[string]string{"mode": "ranked"}},
		{Replicas: 1, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}, Labels: map[string]string{"mode": "ranked\x00"}},
		{Replicas: 1, Template: &eventsv1.GameServerTemplate{Command: "/bin/game", Env: map[string]string{"A": "1"}}, Labels: map[string]string{"k": "\x1b[0m"}},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s eventsv1.FleetSpec
		if proto.Unmarshal(b, &s) != nil {
			return
		}
		events.NormalizeFleetSpec(&s)
		if events.ValidateFleetSpec(&s) != nil {
			return
		}
		once := proto.CloneOf(&s)
		events.NormalizeFleetSpec(&s)
		if !proto.Equal(once, &s) {
			t.Fatalf("normalising twice changed the spec: %v → %v", once, &s)
		}
		if err := events.ValidateFleetSpec(&s); err != nil {
			t.Fatalf("a valid spec became invalid: %v", err)
		}
		// What a valid spec's labels must be: the views keep them as
		// PostgreSQL jsonb (no NUL byte) and selectors name them.
		for k, v := range s.GetLabels() {
			if k == "" || len(k) > events.MaxLabelKeyBytes || len(v) > events.MaxLabelValueBytes ||
				strings.ContainsAny(k, " =,") || !printableText(k) || !printableText(v) {
				t.Fatalf("a valid spec has the label %q=%q", k, v)
			}
		}
		for k := range s.GetTemplate().GetEnv() {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				t.Fatalf("a valid spec has the environment variable %q", k)
			}
		}
		if s.GetTemplate().GetCommand() == "" || s.GetReplicas() < 0 || s.GetReplicas() > events.MaxReplicas {
			t.Fatalf("a valid spec has command %q and %d replicas", s.GetTemplate().GetCommand(), s.GetReplicas())
		}
	})
}

// printableText reports whether s is UTF-8 without control characters.
func printableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// Any id is valid or refused; a valid id is 1 to 63 lowercase letters,
// digits and dashes starting with a letter and not ending with a dash,
// so that it is a NATS subject token, and names a fleet that parses back.
func FuzzCheckID(f *testing.F) {
	for _, s := range []string{"arena", "gs-7f3k2q9a", "a", "a-", "-a", "A", "a.b", "a*", "a>", "a b", "a\n", "", strings.Repeat("a", 63), strings.Repeat("a", 64), "ä"} {
		f.Add(s)
	}
	rule := regexp.MustCompile(events.IDRule)
	f.Fuzz(func(t *testing.T, id string) {
		err := events.CheckID(id)
		if want := rule.MatchString(id); events.ValidID(id) != want {
			t.Fatalf("ValidID(%q) = %v, the rule %s says %v", id, !want, events.IDRule, want)
		}
		if (err == nil) != events.ValidID(id) {
			t.Fatalf("CheckID(%q) = %v but ValidID = %v", id, err, events.ValidID(id))
		}
		if err != nil {
			if !errors.Is(err, events.ErrInvalidName) {
				t.Fatalf("CheckID(%q) = %v, not ErrInvalidName", id, err)
			}
			return
		}
		if len(id) < 1 || len(id) > 63 || id[0] < 'a' || id[0] > 'z' || id[len(id)-1] == '-' ||
			strings.ContainsFunc(id, func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' }) {
			t.Fatalf("CheckID accepted %q", id)
		}
		if got, err := events.ParseFleetName(events.FleetName(id)); err != nil || got != id {
			t.Fatalf("fleets/%s parses to (%q, %v)", id, got, err)
		}
	})
}

// parsers are the resource name parsers, each with the constructor that
// rebuilds a name from what it parsed.
var parsers = map[string]func(string) (string, error){
	"fleet": func(n string) (string, error) {
		id, err := events.ParseFleetName(n)
		return events.FleetName(id), err
	},
	"host": func(n string) (string, error) {
		id, err := events.ParseHostName(n)
		return events.HostName(id), err
	},
	"game server": func(n string) (string, error) {
		f, id, err := events.ParseGameServerName(n)
		return events.GameServerName(f, id), err
	},
	"game session": func(n string) (string, error) {
		id, err := events.ParseGameSessionName(n)
		return events.GameSessionName(id), err
	},
	"player session": func(n string) (string, error) {
		g, id, err := events.ParsePlayerSessionName(n)
		return events.PlayerSessionName(g, id), err
	},
}

// Any text is a resource name of at most one kind or of none; a name that
// parses is rebuilt exactly from its parts, and its subject leads back to
// it (NameFromSubject). Names reach the API in paths, filters and page
// tokens, and subjects come from the stream.
func FuzzResourceName(f *testing.F) {
	for _, s := range []string{
		"fleets/arena", "hosts/h1", "fleets/arena/gameServers/gs-1", "gameSessions/gsess-1",
		"gameSessions/g/playerSessions/ps-1", "fleets/arena/", "fleets//gameServers/x", "hosts/h1/x",
		"gameSessions/g/playerSessions/", "fleets/a.b", "fleets/standalone/gameServers/debug-1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		var kinds []string
		for kind, parse := range parsers {
			rebuilt, err := parse(name)
			if err != nil {
				if !errors.Is(err, events.ErrInvalidName) {
					t.Fatalf("%s %q refused with %v, not ErrInvalidName", kind, name, err)
				}
				continue
			}
			kinds = append(kinds, kind)
			if rebuilt != name {
				t.Fatalf("%q parses as a %s, rebuilt as %q", name, kind, rebuilt)
			}
		}
		if len(kinds) > 1 {
			t.Fatalf("%q parses as %v", name, kinds)
		}
		subject, err := events.Subject(name)
		if (err == nil) != (len(kinds) == 1) {
			t.Fatalf("%q parses as %v but Subject says %v", name, kinds, err)
		}
		if err != nil {
			return
		}
		if back, err := events.NameFromSubject(subject); err != nil || back != name {
			t.Fatalf("%q has subject %q, which names (%q, %v)", name, subject, back, err)
		}
	})
}

// Any subject names an aggregate or is refused; one that names an
// aggregate is that aggregate's subject exactly (Subject), and so a
// subject never names what another subject names.
func FuzzNameFromSubject(f *testing.F) {
	for _, s := range []string{
		"tether.ev.fleet.arena", "tether.ev.host.h1", "tether.ev.gs.arena.gs-1", "tether.ev.gsess.g1", "tether.ev.ps.g1.ps-1",
		"tether.ev.fleet.a/gameServers/b", "tether.ev.gs.arena.*", "tether.ev.fleet.arena.x", "tether.ev.", "tether.cmd.h1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		name, err := events.NameFromSubject(subject)
		if err != nil {
			if !errors.Is(err, events.ErrInvalidName) {
				t.Fatalf("%q refused with %v, not ErrInvalidName", subject, err)
			}
			return
		}
		if back, err := events.Subject(name); err != nil || back != subject {
			t.Fatalf("%q names %q, whose subject is (%q, %v)", subject, name, back, err)
		}
		if strings.ContainsAny(subject, " *>\t\r\n") {
			t.Fatalf("%q is not a literal NATS subject, yet names %q", subject, name)
		}
	})
}
