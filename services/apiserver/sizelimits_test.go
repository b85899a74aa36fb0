package apiserver_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver"
)

// Requests over the size limits (labels, properties, players, templates,
// request ids, whole specs) are refused with INVALID_ARGUMENT naming the
// field and the limit, and nothing is appended to the stream. Before, an
// environment value of 10 KiB, 65 labels or a spec of 300 KiB were
// stored, a request id of a few KiB stopped the projector for good (its
// index entry too large for PostgreSQL), and a NUL byte in a request id or
// a selector answered 500.
func TestRequestsOverTheSizeLimitsAreRefused(t *testing.T) {
	// The 2 MB cases reach the API as they would over gRPC (4 MiB
	// messages): the REST body limit is raised so they reach validation.
	s := newStack(t, stackOptions{maxBody: 8 << 20})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 1, 1, map[string]string{"mode": "ranked"})

	n := func(count int, each func(i int) string) map[string]string {
		m := map[string]string{}
		for i := range count {
			m[fmt.Sprintf("k%03d", i)] = each(i)
		}
		return m
	}
	list := func(count, size int) []string {
		out := make([]string, count)
		for i := range out {
			out[i] = strings.Repeat("a", size)
		}
		return out
	}
	players := func(count int, id, data string) []any {
		out := make([]any, count)
		for i := range out {
			out[i] = map[string]any{"playerId": fmt.Sprintf("%s%d", id, i), "playerData": data}
		}
		return out
	}
	selector := func(labels map[string]string) map[string]any {
		return map[string]any{"matchLabels": labels}
	}
	counters := func(count int) map[string]any {
		m := map[string]any{}
		for i := range count {
			m[fmt.Sprintf("c%02d", i)] = map[string]any{"capacity": 1}
		}
		return m
	}
	lists := func(count int, values []string) map[string]any {
		m := map[string]any{}
		for i := range count {
			m[fmt.Sprintf("l%02d", i)] = map[string]any{"capacity": len(values), "values": values}
		}
		return m
	}
	const alloc = "/v1/fleets/arena/gameServers:allocate"
	tests := []struct {
		name, method, path string
		body               any
		field              string
		limit              int    // the limit the message must name; 0: none
		fleet              string // a fleet that must have no events afterwards
	}{
		{"a 2 MB environment variable", "POST", "/v1/fleets?fleetId=f1",
			withField(func(f map[string]any) { template(f)["env"] = map[string]string{"BIG": strings.Repeat("x", 2<<20)} }),
			"fleet.template.env", 0, "f1"},
		{"an environment value over 4 KiB", "POST", "/v1/fleets?fleetId=f2",
			withField(func(f map[string]any) { template(f)["env"] = map[string]string{"CONFIG": strings.Repeat("x", 10<<10)} }),
			"fleet.template.env[CONFIG]", apiserver.MaxEnvValueBytes, "f2"},
		{"an environment variable name over 256 bytes", "POST", "/v1/fleets?fleetId=f3",
			withField(func(f map[string]any) { template(f)["env"] = map[string]string{strings.Repeat("N", 300): "x"} }),
			"fleet.template.env", apiserver.MaxEnvNameBytes, "f3"},
		{"129 environment variables", "POST", "/v1/fleets?fleetId=f4",
			withField(func(f map[string]any) { template(f)["env"] = n(129, func(int) string { return "x" }) }),
			"fleet.template.env", apiserver.MaxEnv, "f4"},
		{"257 arguments", "POST", "/v1/fleets?fleetId=f5",
			withField(func(f map[string]any) { template(f)["args"] = list(257, 1) }),
			"fleet.template.args", apiserver.MaxArgs, "f5"},
		{"a command over 4 KiB", "POST", "/v1/fleets?fleetId=f6",
			withField(func(f map[string]any) { template(f)["command"] = "/" + strings.Repeat("c", 5<<10) }),
			"fleet.template.command", apiserver.MaxCommandBytes, "f6"},
		{"a spec over 256 KiB (arguments under every exec limit)", "POST", "/v1/fleets?fleetId=f7",
			withField(func(f map[string]any) { template(f)["args"] = list(3, 100<<10) }),
			"fleet.template.args", apiserver.MaxFleetSpecBytes, "f7"},
		{"65 labels", "POST", "/v1/fleets?fleetId=f8",
			withField(func(f map[string]any) { f["labels"] = n(65, func(int) string { return "v" }) }),
			"fleet.labels", apiserver.MaxLabels, "f8"},
		{"a NUL byte in a label", "POST", "/v1/fleets?fleetId=f9",
			withField(func(f map[string]any) { f["labels"] = map[string]string{"mode": "ranked\x00"} }),
			"fleet.labels[mode]", 0, "f9"},
		{"a control character in a label", "POST", "/v1/fleets?fleetId=f10",
			withField(func(f map[string]any) { f["labels"] = map[string]string{"mode": "ranked\x1b[31m"} }),
			"fleet.labels", 0, "f10"},
		{"a request id over 256 bytes", "POST", "/v1/fleets?fleetId=f11&requestId=" + strings.Repeat("r", 3000),
			arenaFleet(1), "request_id", apiserver.MaxRequestIDBytes, "f11"},
		{"a NUL byte in a request id", "POST", "/v1/fleets?fleetId=f12&requestId=a%00b",
			arenaFleet(1), "request_id", 0, "f12"},
		{"an update to an environment value over 4 KiB", "PATCH", "/v1/fleets/arena?updateMask=template",
			map[string]any{"template": map[string]any{"command": "/bin/game", "env": map[string]string{"CONFIG": strings.Repeat("x", 5<<10)}}},
			"fleet.template.env[CONFIG]", apiserver.MaxEnvValueBytes, ""},
		{"an update to 65 labels", "PATCH", "/v1/fleets/arena?updateMask=labels",
			map[string]any{"labels": n(65, func(int) string { return "v" })}, "fleet.labels", apiserver.MaxLabels, ""},
		{"a standalone server with 65 labels", "POST", "/v1/fleets/standalone/gameServers?gameServerId=s1",
			withField(func(f map[string]any) { f["labels"] = n(65, func(int) string { return "v" }) }),
			"spec.labels", apiserver.MaxLabels, ""},
		{"65 properties", "POST", alloc,
			map[string]any{"gameSession": map[string]any{"properties": n(65, func(int) string { return "p" })}},
			"game_session.properties", apiserver.MaxProperties, ""},
		{"a property value over 1 KiB", "POST", alloc,
			map[string]any{"gameSession": map[string]any{"properties": map[string]string{"map": strings.Repeat("m", 2<<10)}}},
			"game_session.properties[map]", apiserver.MaxPropertyValueBytes, ""},
		{"a property key over 63 bytes", "POST", alloc,
			map[string]any{"gameSession": map[string]any{"properties": map[string]string{strings.Repeat("k", 64): "v"}}},
			"game_session.properties", apiserver.MaxPropertyKeyBytes, ""},
		{"player data over 4 KiB", "POST", alloc,
			map[string]any{"players": players(1, "p", strings.Repeat("d", 5<<10))}, "players[0].player_data", apiserver.MaxPlayerDataBytes, ""},
		{"a player id over 256 bytes", "POST", alloc,
			map[string]any{"players": players(1, strings.Repeat("p", 300), "")}, "players[0].player_id", apiserver.MaxPlayerIDBytes, ""},
		{"players over 256 KiB together", "POST", alloc,
			map[string]any{"players": players(100, "p", strings.Repeat("d", 3<<10))}, "players", apiserver.MaxGameSessionBytes, ""},
		{"33 selectors", "POST", alloc,
			map[string]any{"selectors": func() []any {
				out := make([]any, 33)
				for i := range out {
					out[i] = selector(map[string]string{"mode": fmt.Sprint(i)})
				}
				return out
			}()}, "selectors", apiserver.MaxSelectors, ""},
		{"a selector of 65 labels", "POST", alloc,
			map[string]any{"selector": selector(n(65, func(int) string { return "v" }))}, "selector.match_labels", apiserver.MaxLabels, ""},
		{"a selector label no server can have", "POST", alloc,
			map[string]any{"selectors": []any{selector(map[string]string{"mode": strings.Repeat("v", 300)})}},
			"selectors[0].match_labels", events.MaxLabelValueBytes, ""},
		{"a NUL byte in a selector", "POST", alloc,
			map[string]any{"selector": selector(map[string]string{"mode": "\x00"})}, "selector.match_labels[mode]", 0, ""},
		{"a NUL byte in an allocation's request id", "POST", alloc,
			map[string]any{"requestId": "a\x00b"}, "request_id", 0, ""},
		{"player data over 4 KiB in a player session", "POST", "/v1/gameSessions/gsess-x/playerSessions",
			map[string]any{"playerId": "p", "playerData": strings.Repeat("d", 5<<10)}, "player_session.player_data", apiserver.MaxPlayerDataBytes, ""},
		{"a shutdown detail over 1 KiB", "POST", "/v1/fleets/arena/gameServers/gs-000:shutdown",
			map[string]any{"detail": strings.Repeat("d", 2<<10)}, "detail", apiserver.MaxShutdownDetailBytes, ""},
		{"33 counters", "POST", "/v1/fleets?fleetId=f13",
			withField(func(f map[string]any) { template(f)["counters"] = counters(33) }), "fleet.template.counters", apiserver.MaxCounters, "f13"},
		{"33 lists", "POST", "/v1/fleets?fleetId=f14",
			withField(func(f map[string]any) { template(f)["lists"] = lists(33, nil) }), "fleet.template.lists", apiserver.MaxLists, "f14"},
		{"a counter's name over 63 bytes", "POST", "/v1/fleets?fleetId=f15",
			withField(func(f map[string]any) {
				template(f)["counters"] = map[string]any{strings.Repeat("c", 64): map[string]any{"capacity": 1}}
			}), "fleet.template.counters", apiserver.MaxCounterNameBytes, "f15"},
		{"a list of 1001 values", "POST", "/v1/fleets?fleetId=f16",
			withField(func(f map[string]any) { template(f)["lists"] = lists(1, list(1001, 1)) }),
			"fleet.template.lists[l00].values", apiserver.MaxListValues, "f16"},
		{"a list value over 128 bytes", "POST", "/v1/fleets?fleetId=f17",
			withField(func(f map[string]any) { template(f)["lists"] = lists(1, list(1, 129)) }),
			"fleet.template.lists[l00].values[0]", apiserver.MaxListValueBytes, "f17"},
		{"a standalone server with 33 counters", "POST", "/v1/fleets/standalone/gameServers?gameServerId=s2",
			withField(func(f map[string]any) { template(f)["counters"] = counters(33) }), "spec.template.counters", apiserver.MaxCounters, ""},
		{"an update to 33 lists", "PATCH", "/v1/fleets/arena?updateMask=template",
			map[string]any{"template": map[string]any{"command": "/bin/game", "lists": lists(33, nil)}}, "fleet.template.lists", apiserver.MaxLists, ""},
		{"a counter's name over 63 bytes in a change", "PATCH", "/v1/fleets/arena/gameServers/gs-000/counters/" + strings.Repeat("c", 64),
			map[string]any{"countDiff": 1}, "counter", apiserver.MaxCounterNameBytes, ""},
		{"a list's name over 63 bytes in a change", "PATCH", "/v1/fleets/arena/gameServers/gs-000/lists/" + strings.Repeat("l", 64),
			map[string]any{"addValues": []string{"a"}}, "list", apiserver.MaxCounterNameBytes, ""},
		{"1001 values added", "PATCH", "/v1/fleets/arena/gameServers/gs-000/lists/players",
			map[string]any{"addValues": list(1001, 1)}, "add_values", apiserver.MaxListValues, ""},
		{"a value over 128 bytes removed", "PATCH", "/v1/fleets/arena/gameServers/gs-000/lists/players",
			map[string]any{"removeValues": list(1, 129)}, "remove_values[0]", apiserver.MaxListValueBytes, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, tt.path, tt.body)
			if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != tt.field {
				t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT field %q: %.300v", r.status, r.reason(), r.fieldViolation(), tt.field, r.body)
			}
			if msg := r.str("message"); tt.limit != 0 && !strings.Contains(msg, fmt.Sprintf("at most %d", tt.limit)) {
				t.Fatalf("the message does not name the limit %d: %q", tt.limit, msg)
			}
			if tt.fleet != "" {
				if evs, err := s.Store.History(s.Ctx, events.MustSubject(events.FleetName(tt.fleet)), 0); err != nil || len(evs) != 0 {
					t.Fatalf("a refused create appended %d events to fleets/%s (%v)", len(evs), tt.fleet, err)
				}
			}
		})
	}
	if n := len(s.allocations("arena")); n != 0 {
		t.Fatalf("refused allocations allocated %d servers", n)
	}
	if evs, err := s.Store.History(s.Ctx, events.MustSubject("fleets/arena"), 0); err != nil || len(evs) != 1 {
		t.Fatalf("refused updates appended to fleets/arena: %d events (%v), want its creation only", len(evs), err)
	}
}

// Requests at the limits are accepted, and a fleet stored with more than
// the limits allow (before they existed) can still be scaled: an update
// is checked on the fields its mask writes.
func TestRequestsAtTheSizeLimitsAreAccepted(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 1, 1, map[string]string{"mode": "ranked"})

	labels := map[string]string{}
	for i := range apiserver.MaxLabels {
		labels[fmt.Sprintf("%s%03d", strings.Repeat("k", events.MaxLabelKeyBytes-3), i)] = strings.Repeat("v", events.MaxLabelValueBytes)
	}
	env := map[string]string{"BIG": strings.Repeat("x", apiserver.MaxEnvValueBytes)}
	for i := range apiserver.MaxEnv - 1 {
		env[fmt.Sprintf("V%03d", i)] = strings.Repeat("y", 1<<10)
	}
	full := withField(func(f map[string]any) {
		f["labels"] = labels
		template(f)["command"] = "/" + strings.Repeat("c", apiserver.MaxCommandBytes-1)
		template(f)["env"] = env
		template(f)["args"] = make([]string, apiserver.MaxArgs)
	})
	if r := s.do("POST", "/v1/fleets?fleetId=full&requestId="+strings.Repeat("r", apiserver.MaxRequestIDBytes), full); r.status != http.StatusOK {
		t.Fatalf("a fleet at every limit: %d %.300v", r.status, r.body)
	}
	// Counters and lists at their limits: as many as may be, the longest
	// names, a list of the most values of the longest value, and the
	// lists' capacities at their bound together.
	counters, lists := map[string]any{}, map[string]any{}
	for i := range apiserver.MaxCounters {
		counters[fmt.Sprintf("%s%02d", strings.Repeat("c", apiserver.MaxCounterNameBytes-2), i)] = map[string]any{"count": "1", "capacity": "9223372036854775807"}
	}
	values := make([]string, apiserver.MaxListValues)
	for i := range values {
		values[i] = fmt.Sprintf("%04d%s", i, strings.Repeat("v", apiserver.MaxListValueBytes-4))
	}
	lists["big"] = map[string]any{"capacity": apiserver.MaxListValues, "values": values}
	rest := (events.MaxListValues - apiserver.MaxListValues) / (apiserver.MaxLists - 1)
	for i := range apiserver.MaxLists - 1 {
		lists[fmt.Sprintf("%s%02d", strings.Repeat("l", apiserver.MaxCounterNameBytes-2), i)] = map[string]any{"capacity": rest}
	}
	counted := withField(func(f map[string]any) {
		template(f)["counters"] = counters
		template(f)["lists"] = lists
	})
	if r := s.do("POST", "/v1/fleets?fleetId=counted", counted); r.status != http.StatusOK {
		t.Fatalf("a fleet with counters and lists at their limits: %d %.300v", r.status, r.body)
	}
	// The body carries a template over the limits, but the mask writes
	// the replicas only.
	over := withField(func(f map[string]any) { template(f)["env"] = map[string]string{"CONFIG": strings.Repeat("x", 10<<10)} })
	over["replicas"] = 2
	if r := s.do("PATCH", "/v1/fleets/full?updateMask=replicas", over); r.status != http.StatusOK || r.num("replicas") != 2 {
		t.Fatalf("scaling with a template over the limits in the body: %d %.300v", r.status, r.body)
	}

	props := map[string]string{}
	for i := range apiserver.MaxProperties {
		props[fmt.Sprintf("%s%02d", strings.Repeat("p", apiserver.MaxPropertyKeyBytes-2), i)] = strings.Repeat("v", 100)
	}
	props["map"] = strings.Repeat("m", apiserver.MaxPropertyValueBytes)
	delete(props, fmt.Sprintf("%s%02d", strings.Repeat("p", apiserver.MaxPropertyKeyBytes-2), 0))
	body := map[string]any{
		"selector":    map[string]any{"matchLabels": map[string]string{"mode": "ranked"}},
		"gameSession": map[string]any{"properties": props},
		"players": []any{map[string]any{
			"playerId": strings.Repeat("p", apiserver.MaxPlayerIDBytes), "playerData": strings.Repeat("d", apiserver.MaxPlayerDataBytes)}},
	}
	if r := s.do("POST", "/v1/fleets/arena/gameServers:allocate", body); r.status != http.StatusOK {
		t.Fatalf("an allocation at every limit: %d %.300v", r.status, r.body)
	}
}

// A page token whose position is not one the API issues (a NUL byte, a
// control character, text that is not ASCII, or too long) is refused
// with INVALID_ARGUMENT, on every list (dead letters too: paging_test.go).
// Before, a NUL byte reached
// PostgreSQL, and the answer was 500.
func TestMalformedPageTokensAreRefused(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	token := func(after, query string) string {
		b, err := json.Marshal(map[string]string{"a": after, "q": query}) // the token's format (paging.go)
		if err != nil {
			t.Fatal(err)
		}
		return url.QueryEscape(base64.RawURLEncoding.EncodeToString(b))
	}
	for _, list := range []struct{ path, query string }{
		{"/v1/fleets", "fleets"},
		{"/v1/hosts", "hosts"},
		{"/v1/fleets/-/gameServers", "fleets/-?"},
		{"/v1/fleets/arena/gameServers", "fleets/arena?"},
		{"/v1/gameSessions", ""},
		{"/v1/fleets/arena/events", "fleets/arena"},
	} {
		for _, after := range []string{"fleets/a\x00", "\x00", "fleets/\x01", "fleets/é", "\u2028", strings.Repeat("a", 2<<10)} {
			t.Run(fmt.Sprintf("%s %q", list.path, after[:min(len(after), 10)]), func(t *testing.T) {
				r := s.do("GET", list.path+"?pageToken="+token(after, list.query), nil)
				if r.status != http.StatusBadRequest || r.reason() != "INVALID_ARGUMENT" || r.fieldViolation() != "page_token" {
					t.Fatalf("got %d %q field %q, want 400 INVALID_ARGUMENT on page_token: %v", r.status, r.reason(), r.fieldViolation(), r.body)
				}
			})
		}
	}
}

// Pages of a list end early once their items are large, so that fleets
// stored before the size limits, with templates near the event size limit,
// never make a page larger than a gRPC client takes (4 MiB by default), nor
// break the REST listing. The API no longer takes such fleets: they are
// appended to the stream here, as they were stored then.
func TestListPagesOfLargeFleetsStoredBeforeTheLimits(t *testing.T) {
	s := newStack(t, stackOptions{})
	const fleets = 10 // of about 500 KB each: 5 MB in all
	var last uint64
	for i := range fleets {
		env := map[string]string{}
		for v := range 5 {
			env[fmt.Sprintf("BIG%d", v)] = strings.Repeat("x", 100<<10)
		}
		spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/game", Env: env}}
		events.NormalizeFleetSpec(spec)
		name := events.FleetName(fmt.Sprintf("big-%d", i))
		seq, err := s.Store.Append(s.Ctx, events.MustSubject(name), 0, events.New(name, time.Now(), &eventsv1.FleetCreated{Spec: spec}))
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, seq)
	}
	s.waitApplied(last)
	if r := s.do(http.MethodGet, "/v1/fleets?pageSize=1000", nil); r.status != http.StatusOK || r.str("nextPageToken") == "" {
		t.Fatalf("REST list of large fleets: %d, next page %q", r.status, r.str("nextPageToken"))
	}
	client := tetherv1.NewFleetServiceClient(s.grpcClient())
	seen, token := 0, ""
	for pages := 0; pages < fleets+1; pages++ {
		resp, err := client.ListFleets(s.Ctx, &tetherv1.ListFleetsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("gRPC list, page %d: %v", pages+1, err)
		}
		seen += len(resp.GetFleets())
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if seen != fleets {
		t.Errorf("listed %d fleets over the pages, want %d", seen, fleets)
	}
	// Such a fleet can still be scaled: the update writes its replicas only.
	if r := s.do(http.MethodPatch, "/v1/fleets/big-0?updateMask=replicas", map[string]any{"replicas": 2}); r.status != http.StatusOK || r.num("replicas") != 2 {
		t.Fatalf("scaling a fleet stored before the limits: %d %.300v", r.status, r.body)
	}
}
