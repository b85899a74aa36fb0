package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tetherhq/tether/events"
	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
	agonessdkalpha "github.com/tetherhq/tether/proto/agones/dev/sdk/alpha"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// agonesHelperEnv, set, makes the test binary a game server built for
// Agones' SDK (agonesHelper) instead of running the tests.
const agonesHelperEnv = "TETHER_TEST_AGONES_HELPER"

// The ways agonesHelper can behave after its Ready, the value of
// agonesHelperEnv.
const (
	// helperPinging pings every 100 ms.
	helperPinging = "1"
	// helperSilent pings once, sets the label pinged, and holds its Health
	// stream open without another ping.
	helperSilent = "silent"
	// helperDrops pings once, sets the label pinged, closes its
	// connection, and connects again (and pings) once it is sent SIGUSR1.
	helperDrops = "drops"
	// helperSeats pings once, sets the label pinged and, once it is sent
	// SIGUSR1 (its allocation is recorded), reports player alice connected,
	// gone and connected again through Agones' player tracking, then sets
	// the label seated.
	helperSeats = "seats"
)

// awaitGo waits for the SIGUSR1 a test sends a helper process to go on
// (goOn, registered before the helper tells the test it is ready for
// it), for at most a minute; false if ctx ended first.
func awaitGo(ctx context.Context, goOn <-chan os.Signal) (bool, error) {
	select {
	case <-goOn:
		return true, nil
	case <-ctx.Done():
		return false, nil
	case <-time.After(time.Minute):
		return false, errors.New("no SIGUSR1 within a minute")
	}
}

// agonesHelper is a game server that speaks Agones' SDK to the agent it
// was started by: it finds the SDK by AGONES_SDK_*, calls Ready and
// SetLabel, and holds a Health stream open, pinging as mode says, until
// it is told to stop.
func agonesHelper(mode string) int {
	addr := os.Getenv(agent.EnvAgonesGRPCHost) + ":" + os.Getenv(agent.EnvAgonesGRPCPort)
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "agones helper: %s: %v\n", what, err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	goOn := make(chan os.Signal, 1)
	signal.Notify(goOn, syscall.SIGUSR1) // helperDrops's cue to connect again
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fail("dial", err)
	}
	defer func() { conn.Close() }()
	sdk := agonessdk.NewSDKClient(conn)
	if _, err := sdk.Ready(ctx, &agonessdk.Empty{}); err != nil {
		return fail("Ready", err)
	}
	if _, err := sdk.SetLabel(ctx, &agonessdk.KeyValue{Key: "mode", Value: "ctf"}); err != nil {
		return fail("SetLabel", err)
	}
	h, err := sdk.Health(ctx)
	if err != nil {
		return fail("Health", err)
	}
	if mode != helperPinging {
		if err := h.Send(&agonessdk.Empty{}); err != nil {
			return fail("Health ping", err)
		}
		if _, err := sdk.SetLabel(ctx, &agonessdk.KeyValue{Key: "pinged", Value: "1"}); err != nil {
			return fail("SetLabel pinged", err)
		}
	}
	if mode == helperDrops {
		conn.Close()
		if ok, err := awaitGo(ctx, goOn); err != nil {
			return fail("wait to connect again", err)
		} else if !ok {
			return 0
		}
		if conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return fail("dial again", err)
		}
		sdk = agonessdk.NewSDKClient(conn)
		if h, err = sdk.Health(ctx); err == nil {
			err = h.Send(&agonessdk.Empty{})
		}
		if err != nil {
			return fail("Health after the reconnect", err)
		}
		if _, err := sdk.SetLabel(ctx, &agonessdk.KeyValue{Key: "back", Value: "1"}); err != nil {
			return fail("SetLabel back", err)
		}
	}
	if mode == helperSeats {
		if ok, err := awaitGo(ctx, goOn); err != nil || !ok {
			return fail("wait for the allocation", err)
		}
		players := agonessdkalpha.NewSDKClient(conn)
		for _, connect := range []bool{true, false, true} {
			call := players.PlayerConnect
			if !connect {
				call = players.PlayerDisconnect
			}
			if ok, err := call(ctx, &agonessdkalpha.PlayerID{PlayerID: "alice"}); err != nil || !ok.GetBool() {
				return fail(fmt.Sprintf("alice connected %v: %v", connect, ok), err)
			}
		}
		if _, err := sdk.SetLabel(ctx, &agonessdk.KeyValue{Key: "seated", Value: "1"}); err != nil {
			return fail("SetLabel seated", err)
		}
	}
	if mode != helperPinging {
		<-ctx.Done()
		return 0
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
			if err := h.Send(&agonessdk.Empty{}); err != nil && err != io.EOF {
				return fail("Health ping", err)
			}
		}
	}
}

// agonesHelperTemplate runs the test binary, copied where the agent
// allows commands from, as an Agones game server.
func agonesHelperTemplate(t testing.TB) *eventsv1.GameServerTemplate {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(publicDir(t), "agonesgame")
	raw, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	return &eventsv1.GameServerTemplate{Command: bin, Env: map[string]string{agonesHelperEnv: helperPinging}}
}

// label waits for the game server to have set agones.dev/sdk-<key>.
func (h *harness) waitAgonesLabel(name, key string) {
	h.t.Helper()
	wait.For(h.t, 20*time.Second, name+" to set the label "+key, func() bool {
		return fold(h.t, h.history(name)).GetLabels()["agones.dev/sdk-"+key] != ""
	})
}

// A server on Agones' SDK that stops its Health pings is judged by its
// fleet's health contract, as one on Tether's SDK: unhealthy, with the
// threshold's missed periods and its last ping as evidence, once the
// periods have passed on the agent's clock, and not before.
func TestAgonesHealthPingsJudgedByTheFleetsContract(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h := newHarnessOpts(t, func(o *agent.Options) { o.Clock = clk })
	name := "fleets/arena/gameServers/gs-agones-silent"
	tmpl := agonesHelperTemplate(t)
	tmpl.Env[agonesHelperEnv] = helperSilent
	h.scheduleSpec(name, &eventsv1.FleetSpec{Template: tmpl, Health: &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3}})
	h.waitAgonesLabel(name, "pinged")
	pinged := clk.Now()
	clk.Advance(10 * time.Second)
	wait.Holds(t, notYet, "no verdict before the threshold's periods have passed", func() bool { return !h.has(name, "GameServerUnhealthy") })
	clk.Advance(10 * time.Second)
	u := h.waitEvent(name, "GameServerUnhealthy").Data.(*eventsv1.GameServerUnhealthy)
	ev := u.GetEvidence()
	if u.GetReason() != eventsv1.Reason_REASON_HEALTH_CHECK_FAILED || ev.GetMissedPeriods() != 3 ||
		!ev.GetLastHeartbeatTime().AsTime().Equal(pinged) {
		t.Fatalf("unhealthy: %s, evidence %v; want HEALTH_CHECK_FAILED, 3 missed periods, the last ping at %s", u.GetReason(), ev, pinged)
	}
}

// A server on Agones' SDK whose connection drops has its fleet's SDK
// disconnect grace, as one on Tether's SDK: reconnected inside it, it is
// left alone (a reconnect never kills a healthy server); silent past it,
// it is unhealthy with SDK_DISCONNECT_GRACE_EXPIRED.
func TestAgonesReconnectInsideAndPastTheGraceWindow(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Now())
	h := newHarnessOpts(t, func(o *agent.Options) { o.Clock = clk })
	back, gone := "fleets/arena/gameServers/gs-agones-back", "fleets/arena/gameServers/gs-agones-gone"
	for _, name := range []string{back, gone} {
		tmpl := agonesHelperTemplate(t)
		tmpl.Env[agonesHelperEnv] = helperDrops
		h.scheduleSpec(name, &eventsv1.FleetSpec{Template: tmpl, Health: &eventsv1.HealthPolicy{Disabled: true}, SdkDisconnectGraceSeconds: 10})
	}
	for _, name := range []string{back, gone} {
		h.waitAgonesLabel(name, "pinged")
		h.waitEvent(name, "SdkDisconnected")
	}
	clk.Advance(5 * time.Second)
	pid := h.waitEvent(back, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid()
	if err := syscall.Kill(int(pid), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	h.waitAgonesLabel(back, "back")
	wait.For(t, 10*time.Second, "the reconnect recorded", func() bool {
		return fold(t, h.history(back)).GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED
	})
	clk.Advance(10 * time.Second)
	u := h.waitEvent(gone, "GameServerUnhealthy").Data.(*eventsv1.GameServerUnhealthy)
	if u.GetReason() != eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED {
		t.Fatalf("the silent server: unhealthy with %s, want SDK_DISCONNECT_GRACE_EXPIRED", u.GetReason())
	}
	wait.Holds(t, notYet, "the reconnected server left alone", func() bool { return !h.has(back, "GameServerUnhealthy") })
	if l := fold(t, h.history(back)).GetLifecycle(); l != eventsv1.Lifecycle_LIFECYCLE_READY {
		t.Fatalf("the reconnected server is %s, want READY", l)
	}
}

// A player whom an allocation reserved a seat takes it when the game
// server built for Agones' SDK reports them connected (PlayerConnect), keeps
// it for the reconnect window when reported gone, and takes it again inside
// the window: the seat's events are in the game session's history, with
// the game server as their actor, beside the server's own tracking events.
func TestAgonesTrackedPlayerTakesTheSeatItsAllocationReserved(t *testing.T) {
	h := newHarness(t)
	name := "fleets/arena/gameServers/gs-agones-seats"
	tmpl := agonesHelperTemplate(t)
	tmpl.Env[agonesHelperEnv] = helperSeats
	h.scheduleSpec(name, &eventsv1.FleetSpec{Template: tmpl, Health: &eventsv1.HealthPolicy{Disabled: true},
		PlayerSessions: &eventsv1.PlayerSessionPolicy{MaxPlayers: 4, ReservationTimeoutSeconds: 60, ReconnectWindowSeconds: 60}})
	h.waitAgonesLabel(name, "pinged")
	wait.For(t, 10*time.Second, name+" READY", func() bool {
		return fold(t, h.history(name)).GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_READY
	})
	gsess := events.GameSessionName("gsess-seats")
	h.decideElsewhere(name, events.Allocate{Allocated: &eventsv1.GameServerAllocated{GameSession: gsess, MaxPlayers: 4,
		Players: []*eventsv1.PlayerReservation{{PlayerSession: "ps-alice", PlayerId: "alice", Slot: 0}, {PlayerSession: "ps-bob", PlayerId: "bob", Slot: 1}}}})
	pid := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid()
	if err := syscall.Kill(int(pid), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	h.waitAgonesLabel(name, "seated")

	var seatEvents []string
	var state *eventsv1.GameSessionState
	for _, e := range h.history(gsess) {
		var err error
		if state, err = events.ApplyGameSession(state, e); err != nil {
			t.Fatalf("the game session's history does not fold: %v", err)
		}
		if _, ok := events.PlayerSessionOf(e.Data); ok && e.Type != "PlayerSessionReserved" {
			seatEvents = append(seatEvents, e.Type)
			if e.Actor != name {
				t.Errorf("%s by %q, want the game server %s", e.Type, e.Actor, name)
			}
		}
	}
	if want := []string{"PlayerAccepted", "PlayerDisconnected", "PlayerReconnected"}; !slices.Equal(seatEvents, want) {
		t.Fatalf("alice's seat events %v, want %v", seatEvents, want)
	}
	alice, bob := events.FindPlayer(state, "ps-alice"), events.FindPlayer(state, "ps-bob")
	if alice.GetStatus() != eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_ACTIVE || alice.GetSlot() != 0 || alice.GetReconnectCount() != 1 {
		t.Fatalf("alice's seat %v, want ACTIVE in slot 0 after one reconnect", alice)
	}
	if bob.GetStatus() != eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_RESERVED {
		t.Fatalf("bob's seat %v, want RESERVED: nobody reported him", bob)
	}
	if players := fold(t, h.history(name)).GetPlayers(); !slices.Equal(players, []string{"alice"}) {
		t.Fatalf("tracked players %v, want [alice]", players)
	}
}

// A game server built for Agones' SDK finds it by AGONES_SDK_* on a port
// pair of its own, and its calls are events of the server: Ready makes it
// READY, SetLabel sets the label with Agones' prefix. Another process on
// the host (the test itself) is refused on its ports.
func TestAgonesSDKServedToTheProcessAlone(t *testing.T) {
	h := newHarness(t)
	name := "fleets/arena/gameServers/gs-agones"
	h.schedule(name, agonesHelperTemplate(t))
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)
	env := processEnv(t, started.GetPid())
	for _, k := range []string{agent.EnvAgonesGRPCPort, agent.EnvAgonesHTTPPort, agent.EnvAgonesGRPCHost} {
		if env[k] == "" {
			t.Fatalf("process environment lacks %s: %v", k, env)
		}
	}
	if env[agent.EnvAgonesGRPCHost] != "127.0.0.1" || env[agent.EnvAgonesGRPCPort] == env[agent.EnvAgonesHTTPPort] {
		t.Fatalf("Agones SDK endpoint: %v", env)
	}
	h.waitEvent(name, "GameServerReady")
	wait.For(t, 20*time.Second, "the label the process set", func() bool {
		return fold(t, h.history(name)).GetLabels()["agones.dev/sdk-mode"] == "ctf"
	})

	conn, err := grpc.NewClient("127.0.0.1:"+env[agent.EnvAgonesGRPCPort], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	if gs, err := agonessdk.NewSDKClient(conn).GetGameServer(ctx, &agonessdk.Empty{}); err == nil {
		t.Fatalf("a foreign process read the server: %v", gs)
	}
	wait.For(t, 10*time.Second, "the refusal logged", func() bool {
		return strings.Contains(h.logs.String(), "Agones SDK connection refused")
	})
	if l := fold(t, h.history(name)).GetLifecycle(); l != eventsv1.Lifecycle_LIFECYCLE_READY {
		t.Fatalf("after the foreign call the server is %s, want READY", l)
	}
}

// TestDefaultAgonesRangeHoldsAPairPerGamePort: every game server takes a
// pair of Agones ports and at least one game port, and tether dev's hosts
// share both default ranges on one machine. A default Agones range of
// fewer pairs than the game range has ports failed the starts of servers
// the game ports had room for (the matchmaker benchmark's 600 servers on
// one machine never came up with 350 pairs).
func TestDefaultAgonesRangeHoldsAPairPerGamePort(t *testing.T) {
	pairs := (agent.DefaultAgonesPortMax - agent.DefaultAgonesPortMin + 1) / 2
	gamePorts := agent.DefaultPortMax - agent.DefaultPortMin + 1
	if pairs < gamePorts {
		t.Errorf("default Agones range %d-%d holds %d pairs, fewer than the %d ports of the game range %d-%d",
			agent.DefaultAgonesPortMin, agent.DefaultAgonesPortMax, pairs, gamePorts, agent.DefaultPortMin, agent.DefaultPortMax)
	}
	if agent.DefaultAgonesPortMin <= agent.DefaultPortMax && agent.DefaultPortMin <= agent.DefaultAgonesPortMax {
		t.Errorf("default Agones range %d-%d overlaps the game range %d-%d",
			agent.DefaultAgonesPortMin, agent.DefaultAgonesPortMax, agent.DefaultPortMin, agent.DefaultPortMax)
	}
}

// The example game server of deploy/examples speaks only Agones' REST
// SDK, with curl, as a server built for Agones may: under the agent,
// unchanged, it is READY, sets its label, takes a room on its counter,
// and its watch of /watch/gameserver prints the server at once and on
// every change.
func TestAgonesRESTExampleWithCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("this test runs curl (.ci/run installs it): %v", err)
	}
	h := newHarness(t)
	raw, err := os.ReadFile("../../deploy/examples/agones-rest-gameserver.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(publicDir(t), "agones-rest-gameserver.sh")
	if err := os.WriteFile(script, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	name := "fleets/arena/gameServers/gs-curl"
	h.scheduleSpec(name, &eventsv1.FleetSpec{
		Template: &eventsv1.GameServerTemplate{Command: "/bin/sh", Args: []string{script},
			Counters: map[string]*eventsv1.Counter{"rooms": {Capacity: 4}}},
		Health: &eventsv1.HealthPolicy{InitialDelaySeconds: 5, PeriodSeconds: 5, FailureThreshold: 3},
	})
	h.waitEvent(name, "GameServerReady")
	wait.Until(t, 20*time.Second, "the label and the room", func() error {
		st := fold(t, h.history(name))
		if st.GetLabels()["agones.dev/sdk-mode"] != "ctf" || st.GetCounters()["rooms"].GetCount() != 1 {
			return fmt.Errorf("labels %v, counters %v", st.GetLabels(), st.GetCounters())
		}
		return nil
	})
	wait.Until(t, 20*time.Second, "the watch's lines in the log", func() error {
		lines, _, err := h.readLogs(name, &agentv1.LogsRequest{Stream: agentv1.LogLine_STDOUT})
		if err != nil {
			return err
		}
		var ready, room bool
		for _, l := range lines {
			raw, ok := strings.CutPrefix(l, "watch: ")
			if !ok {
				continue
			}
			// As Agones writes it: int64s as strings.
			var line struct {
				Result struct {
					Status struct {
						State    string `json:"state"`
						Counters map[string]struct {
							Count    string `json:"count"`
							Capacity string `json:"capacity"`
						} `json:"counters"`
					} `json:"status"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(raw), &line); err != nil {
				return fmt.Errorf("watch line %q: %v", raw, err)
			}
			st := line.Result.Status
			ready = ready || st.State == "Ready"
			room = room || st.Counters["rooms"].Count == "1" && st.Counters["rooms"].Capacity == "4"
		}
		if !ready || !room {
			return fmt.Errorf("stdout %q: want watch lines with the state Ready and the room taken", lines)
		}
		return nil
	})
}

// The example game server built for Agones' gRPC SDK
// (sdk/go/example/agonesgameserver, half of make chaos's servers) is
// READY under the agent, and a connection it drops and opens again every
// half second, pinging meanwhile, never makes it unhealthy: each drop is
// an SDK disconnect inside the fleet's grace window.
func TestAgonesExampleGameServerStaysReadyThroughReconnects(t *testing.T) {
	h := newHarness(t)
	bin := filepath.Join(publicDir(t), "agonesgameserver")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/tetherhq/tether/sdk/go/example/agonesgameserver").CombinedOutput(); err != nil {
		t.Fatalf("go build the Agones example game server: %v\n%s", err, out)
	}
	name := "fleets/arena/gameServers/gs-agones-flappy"
	h.scheduleSpec(name, &eventsv1.FleetSpec{
		Template: &eventsv1.GameServerTemplate{Command: bin, Env: map[string]string{
			"AGONES_EXAMPLE_HEALTH_EVERY": "200ms", "AGONES_EXAMPLE_RECONNECT_EVERY": "500ms"}},
		Health:                    &eventsv1.HealthPolicy{InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 3},
		SdkDisconnectGraceSeconds: 5,
	})
	h.waitEvent(name, "GameServerReady")
	wait.Until(t, 30*time.Second, "three reconnects", func() error {
		n := 0
		for _, e := range h.history(name) {
			if e.Type == "GameServerUnhealthy" {
				t.Fatalf("unhealthy through its reconnects: %v", e.Data)
			}
			if e.Type == "SdkDisconnected" {
				n++
			}
		}
		if n < 3 {
			return fmt.Errorf("%d SDK disconnects", n)
		}
		return nil
	})
	if st := fold(t, h.history(name)); st.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_READY {
		t.Fatalf("after its reconnects the server is %s (%s)", st.GetLifecycle(), st.GetReason())
	}
}
