package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/testkit/syncbuf"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// receiver is an in-process OTLP/gRPC trace collector: it keeps every span
// it is sent.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// trace returns the spans of the trace with id.
func (r *receiver) trace(id []byte) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if bytes.Equal(s.GetTraceId(), id) {
			out = append(out, s)
		}
	}
	return out
}

// find returns the first span named name of the given kind, or nil.
func (r *receiver) find(name string, kind tracepb.Span_SpanKind) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.GetName() == name && s.GetKind() == kind {
			return s
		}
	}
	return nil
}

// One allocation is one trace, exported by tether's OTLP exporter (set up
// by the standard OTEL_EXPORTER_OTLP_* variables) to a collector: the API's
// call, the append of its events, the projector applying them, the agent
// handling the API's notice, and the agent telling the game server.
func TestAnAllocationIsOneTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs tether dev")
	}
	bin := buildTether(t)
	gameServer := filepath.Join(filepath.Dir(bin), "tether-gameserver")
	if out, err := exec.Command("go", "build", "-o", gameServer, "../../../sdk/go/example/gameserver").CombinedOutput(); err != nil {
		t.Fatalf("build the example game server: %v\n%s", err, out)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &receiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, recv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	data := filepath.Join(t.TempDir(), "data")
	out := &syncbuf.Buffer{}
	cmd := exec.CommandContext(ctx, bin, "dev", "--data-dir", data, "--hosts", "1",
		"--nats-port", "-1", "--rest-port", "-1", "--grpc-port", "-1", "--sdk-port", "-1", "--game-port-base", "-1")
	cmd.Env = append(os.Environ(),
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+lis.Addr().String(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_BSP_SCHEDULE_DELAY=200") // export every 200 ms, not every 5 s
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("tether dev:\n%s", out.String())
		}
	})
	wait.For(t, 90*time.Second, "tether dev's banner", func() bool { return strings.Contains(out.String(), "Press Ctrl-C to stop.") })
	rest := ""
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "REST" {
			rest = f[1]
		}
	}
	key, err := os.ReadFile(filepath.Join(dev.KeysDir(data), "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path string, body any, out any) int {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(ctx, method, rest+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if out != nil && json.Unmarshal(raw, out) != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
		return resp.StatusCode
	}
	spec := map[string]any{"replicas": 1, "template": map[string]any{
		"command": gameServer, "ports": []any{map[string]any{"name": "game", "protocol": "UDP"}}}}
	if code := call("POST", "/v1/fleets?fleetId=traced", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 60*time.Second, "a READY game server", func() bool {
		var list struct {
			GameServers []struct{ State string } `json:"gameServers"`
		}
		return call("GET", "/v1/fleets/traced/gameServers", nil, &list) == http.StatusOK && len(list.GameServers) == 1 && list.GameServers[0].State == "READY"
	})
	var alloc struct {
		GameServer struct{ Name string } `json:"gameServer"`
	}
	if code := call("POST", "/v1/fleets/traced/gameServers:allocate", map[string]any{}, &alloc); code != http.StatusOK {
		t.Fatalf("allocate: %d", code)
	}

	// The chain, each span in the same trace and a child of the step before.
	const apiSpan = "tether.v1.AllocationService/AllocateGameServer"
	wait.Until(t, 30*time.Second, "the allocation's trace: API → append → projector → agent → game server", func() error {
		root := recv.find(apiSpan, tracepb.Span_SPAN_KIND_SERVER)
		if root == nil {
			return fmt.Errorf("no server span %s", apiSpan)
		}
		spans := recv.trace(root.GetTraceId())
		byID := map[string]*tracepb.Span{}
		for _, s := range spans {
			byID[hex.EncodeToString(s.GetSpanId())] = s
		}
		descends := func(s, from *tracepb.Span) bool { // s is from or below it
			for i := 0; s != nil && i < 100; i++ {
				if bytes.Equal(s.GetSpanId(), from.GetSpanId()) {
					return true
				}
				s = byID[hex.EncodeToString(s.GetParentSpanId())]
			}
			return false
		}
		named := func(name string, under *tracepb.Span) *tracepb.Span {
			for _, s := range spans {
				if s.GetName() == name && !bytes.Equal(s.GetSpanId(), under.GetSpanId()) && descends(s, under) {
					return s
				}
			}
			return nil
		}
		var names []string
		for _, s := range spans {
			names = append(names, s.GetName())
		}
		appendSpan := named("events.append", root)
		if appendSpan == nil {
			return fmt.Errorf("no events.append under the API's span; the trace has %v", names)
		}
		if named("projector.apply", root) == nil {
			return fmt.Errorf("no projector.apply under the API's span; the trace has %v", names)
		}
		command := named("agent.command", root)
		if command == nil {
			return fmt.Errorf("no agent.command under the API's span; the trace has %v", names)
		}
		if named("agent.notify", command) == nil {
			return fmt.Errorf("no agent.notify under the agent's command; the trace has %v", names)
		}
		return nil
	})
}
