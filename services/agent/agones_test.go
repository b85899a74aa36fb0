package agent_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// agonesHelperEnv, set, makes the test binary a game server built for
// Agones' SDK (agonesHelper) instead of running the tests.
const agonesHelperEnv = "TETHER_TEST_AGONES_HELPER"

// agonesHelper is a game server that speaks Agones' SDK to the agent it
// was started by: it finds the SDK by AGONES_SDK_*, calls Ready and
// SetLabel, and holds a Health stream open with a ping every 100 ms
// until it is told to stop.
func agonesHelper() int {
	addr := os.Getenv(agent.EnvAgonesGRPCHost) + ":" + os.Getenv(agent.EnvAgonesGRPCPort)
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "agones helper: %s: %v\n", what, err)
		return 1
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fail("dial", err)
	}
	defer conn.Close()
	sdk := agonessdk.NewSDKClient(conn)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
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
func agonesHelperTemplate(t *testing.T) *eventsv1.GameServerTemplate {
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
	return &eventsv1.GameServerTemplate{Command: bin, Env: map[string]string{agonesHelperEnv: "1"}}
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
