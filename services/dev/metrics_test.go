package dev_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/platform/telemetry"
	"github.com/tetherhq/tether/services/testkit/promcheck"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// grafanaDir holds the dashboards and the alert rules (deploy/grafana).
const grafanaDir = "../../deploy/grafana"

// scrape reads the stack's /metrics (the REST address serves every
// component's: tether dev runs them all in this process).
func (s *stack) scrape() []promcheck.Sample {
	s.t.Helper()
	resp, err := http.Get(s.addrs.REST + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	samples, err := promcheck.Parse(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return samples
}

// find returns the samples of a name whose labels include want.
func find(samples []promcheck.Sample, name string, want map[string]string) []promcheck.Sample {
	var out []promcheck.Sample
	for _, s := range samples {
		if s.Name != name {
			continue
		}
		match := true
		for k, v := range want {
			match = match && s.Labels[k] == v
		}
		if match {
			out = append(out, s)
		}
	}
	return out
}

// One Tether (tether dev: every component in one process) serves every
// component's metrics on one /metrics. After a day in the life of two
// fleets (allocations that succeed and fail, a player who drops and
// comes back, a process killed, a server that hangs), every counter the
// operators' dashboards read has a sample, no label names a game server,
// a session, a player or a process, and each metric's series stay few.
// Then every metric a dashboard or an alert rule in deploy/grafana uses
// must be one the running code registered.
func TestMetricsServedAndUsedByTheDashboards(t *testing.T) {
	tel, err := telemetry.New(telemetry.Options{ServiceName: "tether-dev-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	registered := promcheck.NewRecorder(tel.MeterProvider)
	s := startStack(t, 2, func(o *dev.Options) { o.MeterProvider, o.MetricsHandler = registered, tel.MetricsHandler })

	arena := fleetSpec(1, nil)
	arena["playerSessions"] = map[string]any{"maxPlayers": 4, "reservationTimeoutSeconds": 60, "reconnectWindowSeconds": 30}
	hang := fleetSpec(1, map[string]string{"TETHER_EXAMPLE_STOP_HEARTBEAT_AFTER": "2s"})
	hang["health"] = map[string]any{"initialDelaySeconds": 1, "periodSeconds": 1, "failureThreshold": 2}
	for id, spec := range map[string]map[string]any{"arena": arena, "hang": hang} {
		if code := s.rest("POST", "/v1/fleets?fleetId="+id, spec, nil); code != http.StatusOK {
			t.Fatalf("create fleet %s: %d", id, code)
		}
	}
	wait.For(t, 15*time.Second, "arena's server READY", func() bool { return len(byState(s.gameServers("arena"), "READY")) == 1 })

	// Allocations: one that succeeds, then each way one fails.
	a := s.allocate("arena", "player-alice", "player-bob")
	for _, c := range []struct {
		fleet string
		body  map[string]any
		want  int
	}{
		{"arena", map[string]any{}, http.StatusTooManyRequests}, // its only server is taken
		{"nope", map[string]any{}, http.StatusNotFound},
		{"arena", map[string]any{"scheduling": "RANDOM"}, http.StatusBadRequest},
	} {
		if code := s.rest("POST", "/v1/fleets/"+c.fleet+"/gameServers:allocate", c.body, nil); code != c.want {
			t.Fatalf("allocate on %s %v: %d, want %d", c.fleet, c.body, code, c.want)
		}
	}

	// Alice joins, drops, and comes back to her seat.
	alice := a.PlayerSessions[0]
	conn, reply := join(t, a, psID(t, alice.Name), alice.Token)
	if !strings.HasPrefix(reply, "WELCOME") {
		t.Fatalf("alice joins: %q", reply)
	}
	wait.For(t, 5*time.Second, "alice ACTIVE", func() bool { return s.playerSession(alice.Name).State == "ACTIVE" })
	conn.conn.Close()
	wait.For(t, 5*time.Second, "alice DISCONNECTED", func() bool { return s.playerSession(alice.Name).State == "DISCONNECTED" })
	var rec struct {
		Token string `json:"token"`
	}
	if code := s.rest("POST", "/v1/"+alice.Name+":reconnect", map[string]any{}, &rec); code != http.StatusOK {
		t.Fatalf("reconnect: %d", code)
	}
	if _, reply := join(t, a, psID(t, alice.Name), rec.Token); !strings.HasSuffix(reply, "reconnected=true") {
		t.Fatalf("alice rejoins: %q", reply)
	}

	// arena's server is killed mid-match: its game session ends, and the
	// players' sessions with it.
	var victim gameServer
	for _, g := range s.gameServers("arena") {
		if g.Name == a.GameServer.Name {
			victim = g
		}
	}
	if victim.Pid == 0 {
		t.Fatalf("allocated server %s not found", a.GameServer.Name)
	}
	if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// Everything shows, from every component.
	wants := []struct {
		name   string
		labels map[string]string
	}{
		{"tether_allocations_total", map[string]string{"outcome": "allocated"}},
		{"tether_allocations_total", map[string]string{"outcome": "exhausted"}},
		{"tether_allocations_total", map[string]string{"outcome": "not_found"}},
		{"tether_allocations_total", map[string]string{"outcome": "invalid"}},
		{"tether_gameserver_terminations_total", map[string]string{"fleet": "arena", "reason": "PROCESS_EXITED"}},
		{"tether_gameserver_health_failures_total", map[string]string{"fleet": "hang", "reason": "HEALTH_CHECK_FAILED"}},
		{"tether_player_disconnects_total", map[string]string{"fleet": "arena"}},
		{"tether_player_reconnects_total", map[string]string{"fleet": "arena"}},
		{"tether_player_sessions_ended_total", map[string]string{"fleet": "arena", "reason": "GAME_SESSION_ENDED"}},
		{"tether_fleet_game_servers", map[string]string{"fleet": "arena", "state": "READY"}},
		{"tether_fleet_replicas", map[string]string{"fleet": "hang"}},
		{"tether_hosts", map[string]string{"status": "ONLINE"}},
		{"tether_projector_active", nil},
		{"tether_projector_lag_events", nil},
		{"tether_controller_leader", nil},
		{"tether_controller_pass_duration_seconds_count", nil},
		{"tether_agent_outbox_events", map[string]string{"otel_scope_host": "h1"}},
		{"tether_agent_outbox_events", map[string]string{"otel_scope_host": "h2"}},
		{"rpc_server_call_duration_seconds_count", map[string]string{"rpc_method": "tether.v1.AllocationService/AllocateGameServer"}},
	}
	var samples []promcheck.Sample
	wait.Until(t, 30*time.Second, "every component's metrics, after the activity", func() error {
		samples = s.scrape()
		var missing []string
		for _, w := range wants {
			if found := find(samples, w.name, w.labels); len(found) == 0 || found[0].Value == "0" && strings.HasSuffix(w.name, "_total") {
				missing = append(missing, fmt.Sprintf("%s%v", w.name, w.labels))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing or zero: %s", strings.Join(missing, ", "))
		}
		return nil
	})

	// No label names what there are many of.
	var named []string
	for _, f := range []string{"arena", "hang"} {
		for _, g := range s.gameServers(f) {
			named = append(named, g.Name, g.Name[strings.LastIndex(g.Name, "/")+1:])
			if g.Pid > 0 {
				named = append(named, fmt.Sprint(g.Pid))
			}
		}
	}
	named = append(named, a.GameSession.Name, a.GameSession.Name[strings.LastIndex(a.GameSession.Name, "/")+1:], "player-alice", "player-bob")
	for _, p := range a.PlayerSessions {
		named = append(named, p.Name, psID(t, p.Name))
	}
	looksNamed := regexp.MustCompile(`(^|/)(gs|gsess|ps)-|gameServers/|gameSessions/|playerSessions/`)
	series := map[string]map[string]bool{} // metric → its label sets, without le and quantile
	for _, sm := range samples {
		var set []string
		for k, v := range sm.Labels {
			if k == "le" || k == "quantile" {
				continue // a histogram's bucket, a summary's quantile
			}
			set = append(set, k+"="+v)
			if looksNamed.MatchString(v) || slices.Contains(named, v) {
				t.Errorf("%s has label %s=%q, which names a server, a session, a player or a process", sm.Name, k, v)
			}
			if k == "fleet" && !slices.Contains([]string{"arena", "hang", "_other"}, v) {
				t.Errorf("%s has fleet=%q, not one of the fleets", sm.Name, v)
			}
		}
		sort.Strings(set)
		if series[sm.Name] == nil {
			series[sm.Name] = map[string]bool{}
		}
		series[sm.Name][strings.Join(set, ",")] = true
	}
	// Two fleets, two hosts: what is bounded by the label sets (fleets ×
	// states or reasons, methods × codes) stays well under this.
	const maxSeries = 64
	for name, sets := range series {
		if len(sets) > maxSeries {
			t.Errorf("%s has %d series, more than %d", name, len(sets), maxSeries)
		}
	}

	// Every instrument the running code registered gets a sample, and
	// then every metric the dashboards and rules use must be in the scrape.
	registered.Touch(context.Background())
	served := promcheck.Names(s.scrape())
	problems, err := promcheck.Check(grafanaDir, served)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}

	// And every Tether metric served is in docs/observability.md's table,
	// under its family's name (a histogram's without _bucket, _sum and
	// _count), whether a dashboard uses it or not.
	doc, err := os.ReadFile(observabilityDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(served)) {
		if !strings.HasPrefix(name, "tether_") {
			continue
		}
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && !bytes.Contains(doc, []byte("`"+name+"`")) {
				family = base
			}
		}
		if !bytes.Contains(doc, []byte("`"+family+"`")) {
			t.Errorf("%s is served but docs/observability.md does not name `%s`", name, family)
		}
	}
}

// observabilityDoc documents every metric (docs/observability.md).
const observabilityDoc = "../../docs/observability.md"
