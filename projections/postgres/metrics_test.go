package postgres_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// readings are a collection's int64 points: metric name → "k=v,k=v"
// (attributes in key order) → value.
type readings map[string]map[string]int64

func collect(t *testing.T, r *sdkmetric.ManualReader) readings {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := readings{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points = d.DataPoints
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			default:
				continue
			}
			series := map[string]int64{}
			for _, p := range points {
				var kv []string
				for _, a := range p.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.AsString())
				}
				series[strings.Join(kv, ",")] = p.Value
			}
			out[m.Name] = series
		}
	}
	return out
}

// metricsScenario writes three fleets (arena the largest), a host that is
// lost, a termination, a health failure and two game sessions on arena's
// servers: one whose player disconnects and comes back, one that ends
// with a player seated after another left. All of it happens now, except
// a termination an hour ago.
func (e *env) metricsScenario() {
	e.t.Helper()
	e.at = time.Now().Add(-time.Minute)
	spec := func(replicas int32) *eventsv1.FleetSpec {
		s := &eventsv1.FleetSpec{Replicas: replicas, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
		events.NormalizeFleetSpec(s)
		return s
	}
	e.append("hosts/h1", &eventsv1.HostRegistered{Capacity: 100, Address: "127.0.0.1"})
	ready := func(name string) {
		e.append(name, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}},
			&eventsv1.ProcessStarted{Pid: 1000, Address: "127.0.0.1", Attempt: 1}, &eventsv1.GameServerReady{})
	}
	for fleet, servers := range map[string]int{"arena": 5, "beta": 2, "gamma": 1} {
		e.append("fleets/"+fleet, &eventsv1.FleetCreated{Spec: spec(int32(servers))})
		for i := range servers {
			ready(fmt.Sprintf("fleets/%s/gameServers/gs-%d", fleet, i))
		}
	}
	e.append("fleets/arena/gameServers/gs-0", &eventsv1.ProcessExited{Signal: "killed"},
		&eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_EXITED})
	e.append("fleets/arena/gameServers/gs-1", &eventsv1.GameServerUnhealthy{Reason: eventsv1.Reason_REASON_HEALTH_CHECK_FAILED})
	for i, s := range []string{"s1", "s2"} {
		gs := fmt.Sprintf("fleets/arena/gameServers/gs-%d", i+2)
		e.append(gs, &eventsv1.GameServerAllocated{GameSession: "gameSessions/" + s})
		e.append("gameSessions/"+s, &eventsv1.GameSessionCreated{GameServer: gs, Players: []*eventsv1.PlayerSeat{
			{PlayerSession: "p1", PlayerId: "alice", Slot: 0}, {PlayerSession: "p2", PlayerId: "bob", Slot: 1}}})
	}
	e.append("gameSessions/s1", &eventsv1.PlayerAccepted{PlayerSession: "p1"},
		&eventsv1.PlayerDisconnected{PlayerSession: "p1", ReconnectDeadline: timestamppb.New(time.Now().Add(time.Minute))},
		&eventsv1.PlayerReconnected{PlayerSession: "p1"})
	e.append("gameSessions/s2", &eventsv1.PlayerSessionCompleted{PlayerSession: "p2", Reason: eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_LEFT},
		&eventsv1.GameSessionEnded{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_READY_AGAIN})
	e.append("hosts/h1", &eventsv1.HostUnreachable{}, &eventsv1.HostLost{})
	// History: an hour old when applied, so not counted.
	e.at = time.Now().Add(-time.Hour)
	e.append("fleets/arena/gameServers/gs-4", &eventsv1.ProcessExited{Signal: "killed"},
		&eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_HOST_LOST})
}

// The projector counts what it applies, once, by fleet and reason, and
// reports the views' gauges while it projects: fleets past MaxFleetLabels
// (the smallest) are added up under OtherFleets, and no label names a
// server, a session or a host.
func TestProjectorMetrics(t *testing.T) {
	e := newEnv(t)
	e.metricsScenario()
	reader := sdkmetric.NewManualReader()
	p, err := postgres.NewProjector(postgres.ProjectorOptions{
		Pool: e.pool(), JetStream: e.js, BatchSize: 5, Logger: testLogger(), MaxFleetLabels: 2,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	if err != nil {
		t.Fatal(err)
	}

	standby := collect(t, reader)
	if _, ok := standby["tether_fleet_game_servers"]; ok {
		t.Errorf("a projector that does not project reports the fleet gauges: %v", standby["tether_fleet_game_servers"])
	}
	if got := standby["tether_projector_active"]["partition=all"]; got != 0 {
		t.Errorf("tether_projector_active before Run = %d, want 0", got)
	}

	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	want := e.lastSeq()
	wait.For(t, 20*time.Second, fmt.Sprintf("checkpoint %d", want), func() bool { return p.Checkpoint() >= want })
	got := collect(t, reader)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	wantSeries := map[string]map[string]int64{
		"tether_projector_active": {"partition=all": 1},
		"tether_gameserver_terminations": {
			"fleet=arena,reason=PROCESS_EXITED": 1, // not the HOST_LOST of an hour ago
		},
		"tether_gameserver_health_failures": {"fleet=arena,reason=HEALTH_CHECK_FAILED": 1},
		"tether_player_disconnects":         {"fleet=arena": 1},
		"tether_player_reconnects":          {"fleet=arena": 1},
		"tether_player_sessions_ended": {
			"fleet=arena,reason=LEFT":               1,
			"fleet=arena,reason=GAME_SESSION_ENDED": 1,
		},
		"tether_host_status_changes": {
			"status=LOST": 1, "status=UNREACHABLE": 1, "status=ONLINE": 0,
			"status=DRAINING": 0, "status=DRAINED": 0, "status=DEREGISTERED": 0,
		},
		"tether_fleet_replicas":      {"fleet=arena": 5, "fleet=beta": 2, "fleet=_other": 1},
		"tether_fleet_game_sessions": {"fleet=arena": 1, "fleet=beta": 0, "fleet=_other": 0},
		"tether_fleet_players":       {"fleet=arena": 2, "fleet=beta": 0, "fleet=_other": 0},
		"tether_hosts": {
			"status=LOST": 1, "status=ONLINE": 0, "status=UNREACHABLE": 0,
			"status=DRAINING": 0, "status=DRAINED": 0, "status=DEREGISTERED": 0,
		},
	}
	for name, series := range wantSeries {
		if !maps.Equal(got[name], series) {
			t.Errorf("%s = %v, want %v", name, got[name], series)
		}
	}
	servers := got["tether_fleet_game_servers"]
	for _, c := range []struct {
		series string
		want   int64
	}{
		{"fleet=arena,state=READY", 0},
		{"fleet=arena,state=UNHEALTHY", 1},
		{"fleet=arena,state=ALLOCATED", 2},
		{"fleet=arena,state=SCHEDULED", 0},
		{"fleet=beta,state=READY", 2},
		{"fleet=_other,state=READY", 1},
	} {
		if v, ok := servers[c.series]; !ok || v != c.want {
			t.Errorf("tether_fleet_game_servers{%s} = %d (present %v), want %d", c.series, v, ok, c.want)
		}
	}
	// Every fleet label has every live state, and none TERMINATED.
	if n := len(servers); n != 3*7 {
		t.Errorf("tether_fleet_game_servers has %d series, want 3 fleets × 7 live states: %v", n, slices.Sorted(maps.Keys(servers)))
	}
	for name, series := range got {
		for s := range series {
			for _, bad := range []string{"gs-", "gameSessions", "s1", "s2", "p1", "p2", "h1", "TERMINATED"} {
				if strings.Contains(s, bad) {
					t.Errorf("%s has a series labelled %q, which names %q", name, s, bad)
				}
			}
		}
	}

	after := collect(t, reader)
	if after["tether_projector_active"]["partition=all"] != 0 || len(after["tether_fleet_game_servers"]) != 0 {
		t.Errorf("a stopped projector still reports itself active or the fleet gauges: %v %v",
			after["tether_projector_active"], after["tether_fleet_game_servers"])
	}
}
