package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/testkit/freeport"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// logStack is the API, the projector and a real agent for host h1, all
// over the same NATS, without a controller: standalone servers only.
type logStack struct {
	*stack
	stopAgent func()
}

func newLogStack(t *testing.T) *logStack {
	t.Helper()
	k := kit.New(t, kit.WithProjector(), kit.WithAPI(1, func(k *kit.Stack, o *apiserver.Options) { o.JetStream = k.JS }))
	s := &stack{Stack: k, t: t, base: "http://" + k.APIs[0].HTTPAddr(), grpcAddrs: []string{k.APIs[0].GRPCAddr()}}
	s.bases = []string{s.base}
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
	ctx, cancel := context.WithCancel(k.Ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
	t.Cleanup(stop)
	wait.For(t, 20*time.Second, "host h1 ONLINE in the views", func() bool {
		return s.do("GET", "/v1/hosts/h1", nil).str("state") == "ONLINE"
	})
	return &logStack{stack: s, stopAgent: stop}
}

// talker is a standalone game server's spec: a shell script (given in
// the environment: the agent expands ${VAR}s in arguments) that says
// hello on both outputs, then a line on each SIGUSR1.
func talker() map[string]any {
	script := `echo "hello from stdout"; echo "oops on stderr" >&2; trap 'echo "got USR1"' USR1; while :; do sleep 0.05; done`
	return map[string]any{"template": map[string]any{
		"command": "/bin/sh", "args": []string{"-c", "${SCRIPT}"}, "env": map[string]string{"SCRIPT": script},
	}}
}

// logError is a REST error.
type logError struct {
	Message string `json:"message"`
	Details []struct {
		Reason string `json:"reason"`
	} `json:"details"`
}

// restLogs calls GET …:logs and returns its entries ("STDOUT hello"),
// the HTTP status, and an error's reason and message.
func (s *logStack) restLogs(name, query string) (lines []string, code int, reason, msg string) {
	s.t.Helper()
	resp, err := http.Get(s.base + "/v1/" + name + ":logs" + query)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	in := bufio.NewScanner(resp.Body)
	for in.Scan() {
		var chunk struct {
			Result *struct {
				Entries []struct {
					Stream string `json:"stream"`
					Text   string `json:"text"`
					Time   string `json:"time"`
				} `json:"entries"`
			} `json:"result"`
			Error    *logError `json:"error"`
			logError           // an error the gateway answers before the stream starts
		}
		if err := json.Unmarshal(in.Bytes(), &chunk); err != nil {
			s.t.Fatalf(":logs answered %q: %v", in.Text(), err)
		}
		if chunk.Error == nil && chunk.Result == nil {
			chunk.Error = &chunk.logError
		}
		if chunk.Error != nil {
			if len(chunk.Error.Details) > 0 {
				reason = chunk.Error.Details[0].Reason
			}
			return lines, resp.StatusCode, reason, chunk.Error.Message
		}
		for _, e := range chunk.Result.Entries {
			if _, err := time.Parse(time.RFC3339Nano, e.Time); err != nil {
				s.t.Errorf("entry %q has time %q", e.Text, e.Time)
			}
			lines = append(lines, e.Stream+" "+e.Text)
		}
	}
	if err := in.Err(); err != nil {
		s.t.Fatal(err)
	}
	return lines, resp.StatusCode, "", ""
}

// TestGameServerLogsThroughTheAPI: a real game server's output, read
// through the API from its host's agent over NATS, by REST and gRPC,
// followed live, and still served once the server has ended; an unknown
// server is NOT_FOUND, and a host whose agent is down UNAVAILABLE.
func TestGameServerLogsThroughTheAPI(t *testing.T) {
	s := newLogStack(t)
	const name = "fleets/standalone/gameServers/talker"
	if r := s.do("POST", "/v1/fleets/standalone/gameServers?gameServerId=talker", talker()); r.status != http.StatusOK {
		t.Fatalf("create the server: %d %v", r.status, r.body)
	}
	var lines []string
	wait.For(t, 20*time.Second, "both hello lines through REST", func() bool {
		var code int
		lines, code, _, _ = s.restLogs(name, "")
		return code == http.StatusOK && len(lines) == 2
	})
	// The two outputs are read apart: either may come first.
	if sorted := slices.Sorted(slices.Values(lines)); strings.Join(sorted, "|") != "STDERR oops on stderr|STDOUT hello from stdout" {
		t.Fatalf("logs: %q", lines)
	}
	if got, code, _, _ := s.restLogs(name, "?stream=STDERR&tailLines=5"); code != http.StatusOK || strings.Join(got, "|") != "STDERR oops on stderr" {
		t.Fatalf("stderr only: %d %q", code, got)
	}
	if _, code, reason, _ := s.restLogs(name, "?stream=STDIN"); code != http.StatusBadRequest {
		t.Errorf("an unknown stream: %d %s, want 400", code, reason)
	}
	if _, code, reason, _ := s.restLogs(name, "?tailLines=-1"); code != http.StatusBadRequest || reason != apiserver.ReasonInvalidArgument {
		t.Errorf("a negative tail: %d %s, want 400 INVALID_ARGUMENT", code, reason)
	}

	// gRPC, following: a line the server writes after the call started
	// comes on the open stream.
	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := tetherv1.NewGameServerServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follow, err := client.StreamGameServerLogs(ctx, &tetherv1.StreamGameServerLogsRequest{Name: name, Stream: tetherv1.LogEntry_STDOUT, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := follow.Recv()
	if err != nil || len(first.GetEntries()) != 1 || first.GetEntries()[0].GetText() != "hello from stdout" || first.GetEntries()[0].GetStream() != tetherv1.LogEntry_STDOUT {
		t.Fatalf("first chunk of the follow: %v %v", first, err)
	}
	// The logs come from the agent, the pid from the views: under load
	// the views may not have projected the process's start yet.
	var pid float64
	wait.For(t, 10*time.Second, "the server's pid in the views", func() bool {
		pid = s.do("GET", "/v1/"+name, nil).num("pid")
		return pid > 0
	})
	if err := syscall.Kill(int(pid), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	next, err := follow.Recv()
	if err != nil || len(next.GetEntries()) != 1 || next.GetEntries()[0].GetText() != "got USR1" {
		t.Fatalf("the follow after a new line: %v %v", next, err)
	}

	// The server ends: the follow ends once it has sent everything, and
	// its logs are still served.
	if r := s.do("DELETE", "/v1/"+name, nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %v", r.status, r.body)
	}
	for {
		_, err := follow.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the follow of a server that ended: %v, want its end", err)
		}
	}
	wait.For(t, 20*time.Second, "the server TERMINATED", func() bool { return s.do("GET", "/v1/"+name, nil).str("state") == "TERMINATED" })
	got, code, _, _ := s.restLogs(name, "?tailLines=1&stream=STDOUT")
	if code != http.StatusOK || strings.Join(got, "|") != "STDOUT got USR1" {
		t.Fatalf("logs of the TERMINATED server: %d %q", code, got)
	}
	ended, err := client.StreamGameServerLogs(ctx, &tetherv1.StreamGameServerLogsRequest{Name: name, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		chunk, err := ended.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("follow of a TERMINATED server: %v", err)
		}
		n += len(chunk.GetEntries())
	}
	if n != 3 {
		t.Errorf("follow of a TERMINATED server sent %d lines, want its 3", n)
	}

	// An unknown server.
	if _, code, reason, _ := s.restLogs("fleets/standalone/gameServers/nobody", ""); code != http.StatusNotFound || reason != apiserver.ReasonNotFound {
		t.Errorf("logs of an unknown server: %d %s, want 404 NOT_FOUND", code, reason)
	}
	_, err = recvAll(ctx, client, &tetherv1.StreamGameServerLogsRequest{Name: "fleets/standalone/gameServers/nobody"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("gRPC logs of an unknown server: %v, want NotFound", err)
	}

	// The host's agent stops: the logs are out of reach, and the answer
	// says so.
	s.stopAgent()
	_, code, reason, msg := s.restLogs(name, "")
	if code != http.StatusServiceUnavailable || reason != apiserver.ReasonAgentUnavailable || !strings.Contains(msg, "hosts/h1") {
		t.Fatalf("logs on a host whose agent is down: %d %s %q, want 503 %s naming the host", code, reason, msg, apiserver.ReasonAgentUnavailable)
	}
	if _, err := recvAll(ctx, client, &tetherv1.StreamGameServerLogsRequest{Name: name}); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC logs on a host whose agent is down: %v, want Unavailable", err)
	}
}

// recvAll reads a logs stream to its end.
func recvAll(ctx context.Context, client tetherv1.GameServerServiceClient, req *tetherv1.StreamGameServerLogsRequest) ([]string, error) {
	stream, err := client.StreamGameServerLogs(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []string
	for {
		chunk, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		for _, e := range chunk.GetEntries() {
			out = append(out, fmt.Sprintf("%s %s", e.GetStream(), e.GetText()))
		}
	}
}
