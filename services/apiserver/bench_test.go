package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// benchInt reads a benchmark size from the environment.
func benchInt(b *testing.B, env string, def int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", env, v)
	}
	return n
}

// latencies collects call durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// quantile returns the q-quantile in milliseconds.
func (l *latencies) quantile(q float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))]) / float64(time.Millisecond)
}

// grpcClients dials every replica of the stack.
func (s *stack) grpcClients(b *testing.B) []*grpc.ClientConn {
	var out []*grpc.ClientConn
	for _, addr := range s.grpcAddrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		out = append(out, conn)
	}
	return out
}

// BenchmarkAllocate measures sustained allocations through two API
// replicas over gRPC, with every component on this machine: real NATS
// JetStream, PostgreSQL and projector. TETHER_BENCH_ALLOCATIONS READY
// servers (default 5000) are allocated by TETHER_BENCH_CLIENTS concurrent
// matchmaker calls (default 32), each with a request id and two players;
// one iteration allocates them all. With TETHER_BENCH_ROOMS=R, servers
// host R matches each (a counter rooms of R): n/R servers, and each call
// takes a room (an ALLOCATED selector with a room first, then a READY
// one, a counter action taking it and a list action adding the two
// players), so most allocations are into running servers and every one
// decides an action. Reported: allocations/s, p50 and p99 latency, and
// calls refused.
func BenchmarkAllocate(b *testing.B) {
	n := benchInt(b, "TETHER_BENCH_ALLOCATIONS", 5000)
	clients := benchInt(b, "TETHER_BENCH_CLIENTS", 32)
	rooms := 0
	if os.Getenv("TETHER_BENCH_ROOMS") != "" {
		rooms = benchInt(b, "TETHER_BENCH_ROOMS", 1)
		n -= n % rooms
	}
	s := newStack(b, stackOptions{replicas: 2, jetStream: true})
	conns := s.grpcClients(b)
	for i := range b.N {
		fleet := fmt.Sprintf("bench-%d", i)
		s.createFleet(fleet, fleetWithoutReplicas())
		request := func(k int64) *tetherv1.AllocateGameServerRequest {
			return &tetherv1.AllocateGameServerRequest{
				Parent: "fleets/" + fleet, RequestId: fmt.Sprintf("%s-%d", fleet, k),
				Selector:    &tetherv1.LabelSelector{MatchLabels: map[string]string{"mode": "ranked"}},
				GameSession: &tetherv1.GameSessionRequest{Properties: map[string]string{"map": "dust"}},
				Players:     []*tetherv1.PlayerRequest{{PlayerId: "a"}, {PlayerId: "b"}},
			}
		}
		if rooms == 0 {
			s.seedReady(fleet, n, 100, map[string]string{"mode": "ranked"})
		} else {
			s.seedRooms(fleet, n/rooms, 100, int64(rooms))
			free := map[string]*tetherv1.CounterSelector{"rooms": {MinAvailable: 1}}
			request = func(k int64) *tetherv1.AllocateGameServerRequest {
				return &tetherv1.AllocateGameServerRequest{
					Parent: "fleets/" + fleet, RequestId: fmt.Sprintf("%s-%d", fleet, k),
					Selectors: []*tetherv1.LabelSelector{
						{GameServerState: "ALLOCATED", Counters: free}, {GameServerState: "READY", Counters: free}},
					CounterActions: map[string]*tetherv1.CounterAction{"rooms": {Action: "INCREMENT", Amount: 1}},
					ListActions: map[string]*tetherv1.ListAction{"players": {
						AddValues: []string{fmt.Sprintf("p%d-a", k), fmt.Sprintf("p%d-b", k)}}},
				}
			}
		}
		var next atomic.Int64
		var failed atomic.Int64
		lat := &latencies{}
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for w := range clients {
			api := tetherv1.NewAllocationServiceClient(conns[w%len(conns)])
			wg.Go(func() {
				for {
					k := next.Add(1)
					if k > int64(n) {
						return
					}
					t0 := time.Now()
					_, err := api.AllocateGameServer(context.Background(), request(k))
					lat.add(time.Since(t0))
					if err != nil {
						failed.Add(1)
						if status.Code(err) != codes.ResourceExhausted {
							b.Errorf("allocate: %v", err)
						}
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		b.StopTimer()
		if f := failed.Load(); rooms > 0 && f > 0 {
			// As many calls as rooms: each one refused left a room empty.
			b.Fatalf("%d of %d room allocations refused with as many rooms", f, n)
		}
		if f := failed.Load(); f > int64(n)/100 {
			b.Fatalf("%d of %d allocations failed with %d READY servers", f, n, n)
		}
		b.ReportMetric(float64(n)/elapsed.Seconds(), "allocs/s")
		b.ReportMetric(lat.quantile(0.50), "p50-ms")
		b.ReportMetric(lat.quantile(0.99), "p99-ms")
		b.ReportMetric(float64(failed.Load()), "refused")
	}
}

// BenchmarkReconnect measures the one-call reconnect of a player who lost
// everything but their player session id (endpoint, seat, fresh token),
// through the REST gateway as game clients call it.
func BenchmarkReconnect(b *testing.B) {
	s := newStack(b, stackOptions{})
	s.createFleet("arena", fleetWithoutReplicas())
	s.seedReady("arena", 1, 1, nil)
	r := s.do(http.MethodPost, "/v1/fleets/arena/gameServers:allocate", map[string]any{"players": []any{map[string]any{"playerId": "p1"}}})
	if r.status != http.StatusOK {
		b.Fatalf("allocate: %d %v", r.status, r.body)
	}
	ps := r.body["playerSessions"].([]any)[0].(map[string]any)["name"].(string)
	gsess := strings.Split(ps, "/playerSessions/")[0]
	wait.For(b, 5*time.Second, "the game session in the views", func() bool {
		return s.do(http.MethodGet, "/v1/"+gsess, nil).status == http.StatusOK
	})
	lat := &latencies{}
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		resp, err := http.Post(s.base+"/v1/"+ps+":reconnect", "application/json", strings.NewReader("{}"))
		if err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("reconnect: %d", resp.StatusCode)
		}
		resp.Body.Close()
		lat.add(time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(lat.quantile(0.50), "p50-ms")
	b.ReportMetric(lat.quantile(0.99), "p99-ms")
}

// BenchmarkExplain measures :explain through the REST gateway for a game
// server with 1,000 events in its history (TETHER_BENCH_HISTORY): its
// history is read from the stream and folded on every call.
func BenchmarkExplain(b *testing.B) {
	n := benchInt(b, "TETHER_BENCH_HISTORY", 1000)
	s := newStack(b, stackOptions{})
	name := "fleets/arena/gameServers/gs-long"
	msgs := hungServer()
	var history []proto.Message
	history = append(history, msgs[:4]...) // scheduled, started, connected, ready
	for len(history) < n-len(msgs[4:]) {
		history = append(history, &eventsv1.HealthDegraded{MissedPeriods: 1, FailureThreshold: 3, PeriodSeconds: 5}, &eventsv1.HealthRecovered{})
	}
	history = append(history, msgs[4:]...)
	s.appendAt(name, times(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), len(history), time.Second), history...)
	lat := &latencies{}
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		resp, err := http.Get(s.base + "/v1/" + name + ":explain")
		if err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("explain: %d", resp.StatusCode)
		}
		resp.Body.Close()
		lat.add(time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64(len(history)), "events")
	b.ReportMetric(lat.quantile(0.50), "p50-ms")
	b.ReportMetric(lat.quantile(0.99), "p99-ms")
}
