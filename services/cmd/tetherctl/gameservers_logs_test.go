package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/testkit/freeport"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// newStackWithAgent is newStack with a real agent for host h1, whose
// game servers print what the tests read back.
func newStackWithAgent(t *testing.T) *stack {
	t.Helper()
	k := kit.New(t, kit.WithProjector(), kit.WithAPI(1, func(k *kit.Stack, o *apiserver.Options) {
		o.ProjectionPool, o.JetStream = k.Pool, k.JS
	}))
	ports := freeport.Block(t, 4)
	a, err := agent.New(agent.Options{
		HostID: "h1", JetStream: k.JS, Store: k.Store, Commands: k.Commands, LogDir: t.TempDir(),
		SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0", PortMin: ports, PortMax: ports + 3,
		KillProcessesOnExit: true, Logger: k.Logger,
		AllowedCommands: []string{"/bin"}, // its game servers are /bin/sh scripts
	})
	if err != nil {
		t.Fatal(err)
	}
	k.Go("agent h1", a.Run)
	s := &stack{t: t, ctx: k.Ctx, addr: k.APIs[0].GRPCAddr(), store: k.Store, js: k.JS}
	wait.For(t, 20*time.Second, "host h1 ONLINE", func() bool {
		return strings.Contains(s.ok("hosts", "list"), "ONLINE")
	})
	return s
}

// createStandalone creates a standalone game server running a shell
// script (given through the environment: the agent expands ${VAR}s in
// arguments) and returns its pid once it runs.
func (s *stack) createStandalone(id, script string) int {
	s.t.Helper()
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	client := tetherv1.NewGameServerServiceClient(conn)
	_, err = client.CreateGameServer(s.ctx, &tetherv1.CreateGameServerRequest{Parent: "fleets/standalone", GameServerId: id,
		Spec: &tetherv1.Fleet{Template: &tetherv1.GameServerTemplate{Command: "/bin/sh", Args: []string{"-c", "${SCRIPT}"}, Env: map[string]string{"SCRIPT": script}}}})
	if err != nil {
		s.t.Fatal(err)
	}
	var pid int32
	wait.For(s.t, 20*time.Second, id+" running", func() bool {
		g, err := client.GetGameServer(s.ctx, &tetherv1.GetGameServerRequest{Name: "fleets/standalone/gameServers/" + id})
		pid = g.GetPid()
		return err == nil && pid > 0
	})
	return int(pid)
}

func TestGameServerLogs(t *testing.T) {
	s := newStackWithAgent(t)
	pid := s.createStandalone("talker", `echo "hello from stdout"; echo "oops on stderr" >&2; trap 'echo "got USR1"' USR1; while :; do sleep 0.05; done`)
	var out string
	wait.For(t, 20*time.Second, "both lines in the logs", func() bool {
		out = s.ok("gameservers", "logs", "standalone/talker")
		return strings.Count(out, "\n") == 2
	})
	// The two outputs are read apart: either may come first.
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	slices.Sort(lines)
	if strings.Join(lines, "|") != "hello from stdout|oops on stderr" {
		t.Fatalf("logs:\n%s", out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"stderr", []string{"--stderr"}, "oops on stderr\n"},
		{"stdout, the last line", []string{"--stdout", "--tail", "1"}, "hello from stdout\n"},
		{"since a time to come", []string{"--since", time.Now().Add(time.Hour).Format(time.RFC3339)}, ""},
		{"since a minute ago", []string{"--stdout", "--since", "1m"}, "hello from stdout\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.ok(append([]string{"gs", "logs", "fleets/standalone/gameServers/talker"}, tc.args...)...); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	stamped := s.ok("gs", "logs", "standalone/talker", "--stderr", "--timestamps")
	stamp, text, _ := strings.Cut(strings.TrimSuffix(stamped, "\n"), " ")
	if ts, err := time.Parse(time.RFC3339Nano, stamp); err != nil || time.Since(ts) > time.Minute || text != "oops on stderr" {
		t.Fatalf("--timestamps: %q", stamped)
	}
	var entry struct{ Time, Stream, Text string }
	if err := json.Unmarshal([]byte(s.ok("gs", "logs", "standalone/talker", "--stderr", "-o", "json")), &entry); err != nil ||
		entry.Stream != "STDERR" || entry.Text != "oops on stderr" || entry.Time == "" {
		t.Fatalf("-o json: %+v %v", entry, err)
	}

	// -f prints a line the server writes after it started, until
	// interrupted.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var followed, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, newRoot(&followed), []string{"--addr", s.addr, "gs", "logs", "standalone/talker", "-f", "--stdout"}, &errOut)
	}()
	wait.For(t, 20*time.Second, "the follow to print the first line", func() bool { return followed.String() == "hello from stdout\n" })
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the follow to print the new line", func() bool { return followed.String() == "hello from stdout\ngot USR1\n" })
	cancel()
	if code := <-done; code != 0 && code != 130 {
		t.Fatalf("the interrupted follow exited %d: %s", code, errOut.String())
	}

	// A server its host keeps no logs of (it never started there) is not
	// "not found": the API's words say why.
	s.appendEvents("fleets/standalone/gameServers/ghost", &eventsv1.GameServerScheduled{Host: "hosts/h1"})
	wait.For(t, 20*time.Second, "the logs of a server that never started to be refused", func() bool {
		r := s.run("gs", "logs", "standalone/ghost")
		return r.code == 1 && strings.Contains(r.stderr, "this host keeps no log of fleets/standalone/gameServers/ghost") && strings.Contains(r.stderr, "(NO_LOGS)")
	})

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown server", []string{"gs", "logs", "standalone/nobody"}, "NOT_FOUND"},
		{"both streams named", []string{"gs", "logs", "standalone/talker", "--stdout", "--stderr"}, "not both"},
		{"negative tail", []string{"gs", "logs", "standalone/talker", "--tail", "-2"}, "--tail"},
		{"bad since", []string{"gs", "logs", "standalone/talker", "--since", "yesterday"}, "--since"},
		{"bad name", []string{"gs", "logs", "a/b/c"}, "FLEET/GAMESERVER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.run(tc.args...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q, want 1 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
}
