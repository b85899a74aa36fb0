package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	tether "github.com/tetherhq/tether/sdk/go"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The ping benchmark's game server (pingBenchHelper) is the test binary
// run with agonesHelperEnv set to pingBench: once ready it writes the
// file ready in TETHER_TEST_BENCH_DIR; sent SIGUSR1, it sends
// TETHER_TEST_BENCH_N health pings over the transport
// TETHER_TEST_BENCH_TRANSPORT, then writes there the file done with the
// nanoseconds they took.
const pingBench = "bench-ping"

// The transports BenchmarkHealthPing compares.
// agones-rest reuses its connection (keep-alive); agones-rest-dial opens
// one a ping, as curl run once a ping does.
var pingTransports = []string{"tether-grpc-stream", "agones-grpc-stream", "agones-rest", "agones-rest-dial"}

// pingBenchHelper is the ping benchmark's game server; its exit code.
func pingBenchHelper() int {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "ping bench: %s: %v\n", what, err)
		return 1
	}
	n, err := strconv.Atoi(os.Getenv("TETHER_TEST_BENCH_N"))
	if err != nil {
		return fail("N", err)
	}
	dir, transport := os.Getenv("TETHER_TEST_BENCH_DIR"), os.Getenv("TETHER_TEST_BENCH_TRANSPORT")
	goOn := make(chan os.Signal, 1)
	signal.Notify(goOn, syscall.SIGUSR1) // the benchmark's cue to start
	pings, err := pinger(ctx, transport)
	if err != nil {
		return fail("connect", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		return fail("ready file", err)
	}
	if ok, err := awaitGo(ctx, goOn); err != nil {
		return fail("wait for the start", err)
	} else if !ok {
		return 0
	}
	start := time.Now()
	if err := pings(n); err != nil {
		return fail("pings", err)
	}
	took := time.Since(start)
	if err := os.WriteFile(filepath.Join(dir, "done"), []byte(strconv.FormatInt(took.Nanoseconds(), 10)), 0o644); err != nil {
		return fail("done file", err)
	}
	<-ctx.Done()
	return 0
}

// pinger readies the server over transport and returns what sends n
// pings over it, returning once the agent has read them all.
func pinger(ctx context.Context, transport string) (func(n int) error, error) {
	agones := os.Getenv(agent.EnvAgonesGRPCHost) + ":" + os.Getenv(agent.EnvAgonesGRPCPort)
	switch transport {
	case "tether-grpc-stream":
		token, err := tether.Token()
		if err != nil {
			return nil, err
		}
		conn, err := grpc.NewClient(os.Getenv(tether.EnvSDKAddr), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		sdk := sdkv1.NewSDKServiceClient(conn)
		if _, err := sdk.Ready(ctx, &sdkv1.ReadyRequest{}); err != nil {
			return nil, err
		}
		return func(n int) error {
			s, err := sdk.HealthStream(ctx)
			for i := 0; i < n && err == nil; i++ {
				err = s.Send(&sdkv1.HealthStreamRequest{})
			}
			if err == nil {
				_, err = s.CloseAndRecv()
			}
			return err
		}, nil
	case "agones-grpc-stream":
		conn, err := grpc.NewClient(agones, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		sdk := agonessdk.NewSDKClient(conn)
		if _, err := sdk.Ready(ctx, &agonessdk.Empty{}); err != nil {
			return nil, err
		}
		return func(n int) error {
			s, err := sdk.Health(ctx)
			for i := 0; i < n && err == nil; i++ {
				err = s.Send(&agonessdk.Empty{})
			}
			if err == nil {
				_, err = s.CloseAndRecv()
			}
			return err
		}, nil
	case "agones-rest", "agones-rest-dial":
		base := "http://127.0.0.1:" + os.Getenv(agent.EnvAgonesHTTPPort)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: transport == "agones-rest-dial"}}
		post := func(path string) error {
			resp, err := client.Post(base+path, "application/json", strings.NewReader("{}"))
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
			resp.Body.Close()
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("POST %s: HTTP %d", path, resp.StatusCode)
			}
			return nil
		}
		if err := post("/ready"); err != nil {
			return nil, err
		}
		return func(n int) error {
			for range n {
				if err := post("/health"); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("unknown transport %q", transport)
}

// BenchmarkHealthPing is what a health ping costs the agent, by SDK and
// transport: a real game server process sends b.N pings (Tether's
// heartbeat stream, Agones' Health stream, Agones' POST /health one
// request each, on one kept connection or on a new connection each, whose
// owner the agent proves before it reads it), and the benchmark reports the CPU the agent's process
// (the test process, with its embedded NATS idle meanwhile) spent per
// ping, and the process's own time per ping (docs/benchmarks.md; run
// with -benchtime 20000x).
func BenchmarkHealthPing(b *testing.B) {
	for _, transport := range pingTransports {
		b.Run(transport, func(b *testing.B) {
			h := newHarness(b)
			dir := publicDir(b)
			tmpl := agonesHelperTemplate(b)
			tmpl.Env[agonesHelperEnv] = pingBench
			tmpl.Env["TETHER_TEST_BENCH_N"] = strconv.Itoa(b.N)
			tmpl.Env["TETHER_TEST_BENCH_DIR"] = dir
			tmpl.Env["TETHER_TEST_BENCH_TRANSPORT"] = transport
			name := "fleets/arena/gameServers/gs-ping-" + strings.ReplaceAll(transport, "-", "")
			h.scheduleSpec(name, &eventsv1.FleetSpec{Template: tmpl, Health: &eventsv1.HealthPolicy{Disabled: true}, SdkDisconnectGraceSeconds: 600})
			wait.For(b, 60*time.Second, "the server ready to ping", func() bool {
				_, err := os.Stat(filepath.Join(dir, "ready"))
				return err == nil
			})
			h.waitEvent(name, "GameServerReady")
			pid := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid()
			cpu0 := processCPU(b)
			b.ResetTimer()
			if err := syscall.Kill(int(pid), syscall.SIGUSR1); err != nil {
				b.Fatal(err)
			}
			var took []byte
			wait.For(b, 10*time.Minute, "the pings sent", func() bool {
				var err error
				took, err = os.ReadFile(filepath.Join(dir, "done"))
				return err == nil && len(took) > 0
			})
			b.StopTimer()
			cpu := processCPU(b) - cpu0
			ns, err := strconv.ParseInt(string(took), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "agent-cpu-µs/ping")
			b.ReportMetric(float64(ns)/1e3/float64(b.N), "client-µs/ping")
		})
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
