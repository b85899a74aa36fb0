package events_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tetherhq/tether/events"
	_ "github.com/tetherhq/tether/proto/tether/events/v1" // registers the event payloads
)

// notAggregates are the kinds that name resources but have no events of
// their own: a player session's events are its game session's.
var notAggregates = []string{events.KindPlayerSession}

// Every Kind… constant of subjects.go is a registered aggregate (or one of
// notAggregates): a new kind without a registration fails here.
func TestEveryKindIsRegistered(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "subjects.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if strings.HasPrefix(n.Name, "Kind") {
					lit := v.Values[i].(*ast.BasicLit)
					kinds = append(kinds, strings.Trim(lit.Value, `"`))
				}
			}
		}
	}
	if len(kinds) < 5 {
		t.Fatalf("found only kinds %v in subjects.go", kinds)
	}
	for _, k := range kinds {
		_, ok := events.AggregateOf(k)
		if ok == slices.Contains(notAggregates, k) {
			t.Errorf("kind %q: registered %v, but it is %s", k, ok, map[bool]string{true: "not an aggregate", false: "an aggregate"}[!ok])
		}
	}
}

// helperMessages are the messages of tether.events.v1 that are not events:
// states, the envelope, and the parts events and states are made of.
var helperMessages = []string{
	"Envelope", "FleetState", "HostState", "GameServerState", "GameSessionState", "PlayerSessionState",
	"FleetSpec", "GameServerTemplate", "PortSpec", "HealthPolicy", "PlayerSessionPolicy", "Evidence",
	"ConnectionChange", "PlayerSeat", "Port", "PlayerReservation", "GameSessionPolicy", "Counter", "List",
	"FleetAutoscaling", "BufferPolicy", "WebhookPolicy", "AutoscalingSchedule", "FleetStrategy", "FleetRollout", "FleetRevision",
}

// Every event of the catalogue (every message of tether.events.v1 that is
// not a helper) belongs to exactly one aggregate, and that aggregate's
// Apply takes it: a new event without a registration fails here.
func TestEveryEventIsRegistered(t *testing.T) {
	owner := map[string]string{}
	for _, a := range events.Aggregates() {
		for _, typ := range a.Events {
			if prev, dup := owner[typ]; dup {
				t.Errorf("%s is registered to %s and %s", typ, prev, a.Kind)
			}
			owner[typ] = a.Kind
		}
	}
	var catalogue []string
	protoregistry.GlobalFiles.RangeFilesByPackage("tether.events.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Messages().Len() {
			catalogue = append(catalogue, string(fd.Messages().Get(i).Name()))
		}
		return true
	})
	if len(catalogue) < 40 {
		t.Fatalf("the catalogue has only %d messages: %v", len(catalogue), catalogue)
	}
	for _, name := range catalogue {
		if slices.Contains(helperMessages, name) {
			if _, ok := owner[name]; ok {
				t.Errorf("%s is registered as an event and listed as a helper", name)
			}
			continue
		}
		if _, ok := owner[name]; !ok {
			t.Errorf("%s is in the catalogue but no aggregate folds it: register it (events/registry.go) or list it as a helper", name)
		}
	}
	for typ := range owner {
		if !slices.Contains(catalogue, typ) {
			t.Errorf("%s is registered but not a message of tether.events.v1", typ)
		}
	}
	for _, h := range helperMessages {
		if !slices.Contains(catalogue, h) {
			t.Errorf("helper %s is not a message of tether.events.v1", h)
		}
	}
}

// Each aggregate's Apply takes its own events (it may refuse one as a
// transition from no state, never as foreign) and refuses the others'.
func TestRegisteredApplyTakesItsOwnEvents(t *testing.T) {
	at := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	names := map[string]string{events.KindFleet: "fleets/arena", events.KindHost: "hosts/h1",
		events.KindGameServer: "fleets/arena/gameServers/gs-1", events.KindGameSession: "gameSessions/m1"}
	for _, a := range events.Aggregates() {
		for _, b := range events.Aggregates() {
			for _, typ := range b.Events {
				mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName("tether.events.v1." + typ))
				if err != nil {
					t.Fatal(err)
				}
				e := events.New(names[a.Kind], at, mt.New().Interface())
				_, err = a.Apply(nil, e)
				foreign := err != nil && strings.Contains(err.Error(), "is not a")
				switch {
				case a.Kind == b.Kind && foreign:
					t.Errorf("%s refuses its own %s as foreign: %v", a.Kind, typ, err)
				case a.Kind != b.Kind && !foreign:
					t.Errorf("%s takes %s, an event of %s (err %v)", a.Kind, typ, b.Kind, err)
				}
			}
		}
	}
}

func TestKindOf(t *testing.T) {
	for subject, want := range map[string]string{
		"tether.ev.gs.arena.gs-1": events.KindGameServer, "tether.ev.fleet.arena": events.KindFleet,
		"tether.cmd.host.h1": "", "tether.ev": "",
	} {
		if got := events.KindOf(subject); got != want {
			t.Errorf("KindOf(%q) = %q, want %q", subject, got, want)
		}
	}
}
