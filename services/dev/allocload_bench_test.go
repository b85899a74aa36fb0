package dev_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/platform/connect"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/platform/procstat"
	"github.com/tetherhq/tether/services/testkit/wait"
	"github.com/tetherhq/tether/services/tools/allocload"
)

// benchEnv reads a positive integer from the environment, or def.
func benchEnv(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// BenchmarkMatchmakerAllocate measures allocation as a matchmaker sees it:
// the whole stack in one process (embedded NATS, PostgreSQL beside it,
// projector, controller, host agents) with a fleet of real processes of
// the example game server, and TETHER_BENCH_CLIENTS matchmaker callers
// (default 32) calling AllocateGameServer over real gRPC connections, each
// call with its own request id and two players (services/tools/allocload).
//
// TETHER_BENCH_SERVERS servers (default 600) run on TETHER_BENCH_HOSTS
// hosts (default 8). A round allocates 90 % of them as fast as the callers
// go, and the next round starts when every server is READY again. Each
// allocated server comes back as a game's does: its match ends
// TETHER_BENCH_MATCH_MS (default 10) after the allocation reaches it
// (the example game server's --match-length) and the game calls the SDK's
// Ready. With TETHER_BENCH_RETURN=told the servers' matches last until the
// load generator tells them to end instead, as it did before (it polls
// each server's state on its game port every 100 ms, then sends "READY":
// allocload.ReturnByReady), and with TETHER_BENCH_RETURN=after it tells
// them only once the round's calls are done.
// TETHER_BENCH_ROUNDS rounds (default 5) make one iteration; the rate is
// the allocations over the rounds' calling time.
//
// TETHER_BENCH_REPLICAS (default 1) API replicas take the calls, callers
// spread over them: the stack's own, and more in this process over the
// same NATS and PostgreSQL (as BenchmarkAllocate's second replica).
// With TETHER_BENCH_TRACE=1 every replica is an extra one whose event
// store, views and freshness are traced (each call's steps as spans), and
// the breakdown of the allocations' server time is printed.
// TETHER_BENCH_GAME_CPUS, a list of CPU numbers ("1" or "2,3"), moves
// the game servers to those CPUs once they are READY: with the benchmark
// started on the other ones (go test -exec 'taskset -c 0'), the stack and
// PostgreSQL, which it starts, stay on those, and the game servers' CPU
// is not taken from them.
// TETHER_BENCH_PROFILE_DIR, when set, gets a CPU profile of each round
// (cpu-N.prof) and the block and mutex profiles of the run.
//
// Reports allocs/s, p50-ms, p90-ms, p99-ms, max-ms, errors and
// exhausted (calls that found no READY server), and the CPU per
// allocation over whole cycles (from the first call until every server
// is READY again after the last): this process's (the stack but
// PostgreSQL and the game servers), the game servers', PostgreSQL's and
// the machine's; the same less what each uses idle (active-…, measured
// over idleWindow before the rounds, at its rate over the cycles' wall
// time); and the idle game servers' and machine's cores.
func BenchmarkMatchmakerAllocate(b *testing.B) {
	servers := benchEnv(b, "TETHER_BENCH_SERVERS", 600)
	hosts := benchEnv(b, "TETHER_BENCH_HOSTS", 8)
	clients := benchEnv(b, "TETHER_BENCH_CLIENTS", 32)
	replicas := benchEnv(b, "TETHER_BENCH_REPLICAS", 1)
	rounds := benchEnv(b, "TETHER_BENCH_ROUNDS", 5)
	traced := os.Getenv("TETHER_BENCH_TRACE") == "1"
	returnMode := os.Getenv("TETHER_BENCH_RETURN")
	matchMs := benchEnv(b, "TETHER_BENCH_MATCH_MS", 10)
	var gameEnv map[string]string
	var giveBack func(context.Context, *tetherv1.AllocateGameServerResponse) error
	switch returnMode {
	case "":
		gameEnv = map[string]string{"TETHER_EXAMPLE_MATCH_LENGTH": fmt.Sprintf("%dms", matchMs)}
	case "told", "after":
		giveBack = allocload.ReturnByReady("game", 100*time.Millisecond)
	default:
		b.Fatalf("TETHER_BENCH_RETURN=%q: want told, after or nothing", returnMode)
	}
	profDir := os.Getenv("TETHER_BENCH_PROFILE_DIR")
	gameCPUs := cpuList(b, "TETHER_BENCH_GAME_CPUS")
	perHost := (servers + hosts - 1) / hosts
	if perHost > 99 {
		b.Fatalf("%d servers on %d hosts: at most 99 a host (its game ports)", servers, hosts)
	}
	const fleet = "mm"
	for range b.N {
		keys := playertoken.NewKeySpec("bench")
		s := startStack(b, hosts, func(o *dev.Options) { o.HostCapacity, o.PlayerTokenKeys = perHost, keys })
		if code := s.rest("POST", "/v1/fleets?fleetId="+fleet, fleetSpec(servers, gameEnv), nil); code != http.StatusOK {
			b.Fatalf("create fleet: %d", code)
		}
		allReady := func() bool {
			return len(byState(s.gameServers(fleet), "READY")) == servers
		}
		wait.For(b, 5*time.Minute, fmt.Sprintf("%d READY servers", servers), allReady)
		if gameCPUs != nil {
			pinGameServers(b, gameCPUs)
		}

		var rec *allocload.SpanRecorder
		var tp *sdktrace.TracerProvider
		var targets []string
		var pools []*pgxpool.Pool
		if traced {
			rec = allocload.NewSpanRecorder(2_000_000)
			tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) }) // spans are in rec already
		} else {
			targets = append(targets, s.addrs.GRPC)
		}
		var replicaTP trace.TracerProvider // nil (not a nil *TracerProvider) when untraced
		if tp != nil {
			replicaTP = tp
		}
		for len(targets) < replicas {
			addr, pool := startReplica(b, s, keys, replicaTP)
			targets = append(targets, addr)
			pools = append(pools, pool)
		}

		if profDir != "" { // from here on: the rounds, not the stack's start
			runtime.SetBlockProfileRate(10_000) // one sample per 10 µs blocked, on average
			runtime.SetMutexProfileFraction(10)
		}
		// What the fleet and the stack use idle (the servers' heartbeats,
		// the agents' beats, the controller's passes), to tell the cycles'
		// own CPU from it below.
		<-time.After(idleWindow) // the projector, agents and PostgreSQL settle after the fleet's start
		idleFrom := takeCPU(b)
		<-time.After(idleWindow)
		idle := takeCPU(b).since(idleFrom)
		total := allocload.Result{Targets: len(targets), Callers: clients, Errors: map[codes.Code]int{}}
		before := takeCPU(b)
		for r := range rounds {
			if r > 0 {
				wait.For(b, 2*time.Minute, "every server READY again", allReady)
			}
			if rec != nil && r == 0 {
				rec.Reset()
			}
			stopProfile := startCPUProfile(b, profDir, r)
			res, err := allocload.Run(s.ctx, allocload.Options{
				Targets: targets, Parent: "fleets/" + fleet, Callers: clients, Duration: time.Minute,
				Max: servers * 9 / 10, RequestPrefix: fmt.Sprintf("round-%d", r),
				Return:           giveBack,
				ReturnAfterCalls: returnMode == "after",
				CallsDone:        stopProfile, // the calls, not the returns held after them
			})
			stopProfile() // the run failed before its calls ended
			if err != nil {
				b.Fatal(err)
			}
			if res.Cut > 0 { // a round of Max calls ended by its minute: calls hung
				_ = res.Table(os.Stderr)
				b.Fatalf("round %d: %d calls unanswered when the round's minute ran out, after %d allocations in %s", r, res.Cut, res.Allocations, res.Elapsed)
			}
			if res.ReturnFailed > 0 {
				b.Fatalf("round %d: %d servers not returned: %v", r, res.ReturnFailed, res.ReturnErrors)
			}
			fmt.Fprintf(os.Stderr, "round %d:\n", r)
			_ = res.Table(os.Stderr) // a report on stderr
			total.Elapsed += res.Elapsed
			total.Allocations += res.Allocations
			total.Latencies = append(total.Latencies, res.Latencies...)
			total.Returned += res.Returned
			for c, n := range res.Errors {
				total.Errors[c] += n
			}
			if room := 5 - len(total.ErrorSamples); room > 0 {
				total.ErrorSamples = append(total.ErrorSamples, res.ErrorSamples[:min(room, len(res.ErrorSamples))]...)
			}
		}
		// The CPU of whole cycles: every round's calls, the agents' and
		// projector's work that follows them, and the servers' returns, up
		// to every server READY again. A round's rate counts only what
		// falls within its calls, and work that moves later (an agent that
		// hears of its allocations later) looks like a higher rate.
		wait.For(b, 2*time.Minute, "every server READY after the last round", allReady)
		cycles := takeCPU(b).since(before)
		perAlloc, active := cycles.per(total.Allocations), cycles.minusIdle(idle).per(total.Allocations)
		writeProfile(b, profDir, "block")
		writeProfile(b, profDir, "mutex")
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
		total = sortedResult(total)
		fmt.Fprintf(os.Stderr, "all %d rounds:\n", rounds)
		_ = total.Table(os.Stderr)
		if rec != nil {
			if err := tp.ForceFlush(context.Background()); err != nil {
				b.Logf("flush the spans (the breakdown below may miss some): %v", err)
			}
			_ = allocload.Breakdowns(rec.Spans()).Table(os.Stderr)
			for i, p := range pools {
				st := p.Stat()
				fmt.Fprintf(os.Stderr, "replica %d pool: %d acquires, %d had to wait for a connection, mean acquire %v\n",
					i+1, st.AcquireCount(), st.EmptyAcquireCount(), st.AcquireDuration()/time.Duration(max(1, st.AcquireCount())))
			}
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		errs := 0
		for _, n := range total.Errors {
			errs += n
		}
		b.ReportMetric(total.Rate(), "allocs/s")
		b.ReportMetric(ms(total.Quantile(0.5)), "p50-ms")
		b.ReportMetric(ms(total.Quantile(0.9)), "p90-ms")
		b.ReportMetric(ms(total.Quantile(0.99)), "p99-ms")
		b.ReportMetric(ms(total.Max()), "max-ms")
		b.ReportMetric(float64(errs), "errors")
		b.ReportMetric(float64(total.Errors[codes.ResourceExhausted]), "exhausted")
		µs := func(d time.Duration) float64 { return float64(d.Microseconds()) }
		b.ReportMetric(µs(perAlloc.stack), "cpu-µs/alloc")
		b.ReportMetric(µs(perAlloc.machine), "machine-cpu-µs/alloc")
		b.ReportMetric(µs(perAlloc.game), "game-cpu-µs/alloc")
		b.ReportMetric(µs(perAlloc.postgres), "postgres-cpu-µs/alloc")
		b.ReportMetric(µs(active.stack), "active-cpu-µs/alloc")
		b.ReportMetric(µs(active.machine), "active-machine-cpu-µs/alloc")
		b.ReportMetric(µs(active.game), "active-game-cpu-µs/alloc")
		b.ReportMetric(µs(active.postgres), "active-postgres-cpu-µs/alloc")
		b.ReportMetric(idle.cores(idle.game), "idle-game-cores")
		b.ReportMetric(idle.cores(idle.machine), "idle-machine-cores")
	}
}

// processCPU is this process's CPU time so far (user and system): the
// whole stack but PostgreSQL and the game servers.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU reads the machine's CPU so far (/proc/stat): with the
// benchmark alone on the machine, the stack, PostgreSQL and the game
// servers.
func machineCPU(b *testing.B) procstat.Machine {
	m, err := procstat.Read()
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// idleWindow is how long BenchmarkMatchmakerAllocate measures the idle
// stack and fleet before its rounds.
const idleWindow = 3 * time.Second

// cpuSample is the CPU used so far by the benchmark's processes, and when
// it was read.
type cpuSample struct {
	at       time.Time
	process  time.Duration // this process: the stack but PostgreSQL and the game servers
	machine  procstat.Machine
	children map[int]procstat.Process // the game servers and PostgreSQL, CPU read exactly
	scan     time.Duration            // the CPU this process spent reading children
}

// takeCPU reads the CPU so far. The descendants' CPU is read exactly
// (procstat.ExactCPU): a game server runs a millisecond at a time, under
// /proc/<pid>/stat's clock tick.
func takeCPU(b *testing.B) cpuSample {
	began := processCPU(b)
	s := cpuSample{children: map[int]procstat.Process{}}
	procs := procstat.Processes()
	for _, pid := range procstat.Descendants(procs, os.Getpid()) {
		p := procs[pid]
		cpu, err := procstat.ExactCPU(pid)
		if err != nil {
			continue // it ended meanwhile: not counted
		}
		p.CPU = cpu
		s.children[pid] = p
	}
	// This process and the machine are read after the scan, which each
	// interval then holds once (its end's): since takes it out.
	s.at, s.process, s.machine = time.Now(), processCPU(b), machineCPU(b)
	s.scan = s.process - began
	return s
}

// cpuUse is the CPU each part used over a wall time.
type cpuUse struct {
	wall                           time.Duration
	stack, game, postgres, machine time.Duration
}

// since is the CPU used from earlier to s, less s's own reading of it. A
// process that started since counts from zero; one that ended is not
// counted (the benchmark's game servers and PostgreSQL's pooled backends
// live through the rounds).
func (s cpuSample) since(earlier cpuSample) cpuUse {
	u := cpuUse{wall: s.at.Sub(earlier.at), stack: max(0, s.process-earlier.process-s.scan),
		machine: max(0, s.machine.BusySince(earlier.machine)-s.scan)}
	for pid, p := range s.children {
		used := p.CPU
		if was, ok := earlier.children[pid]; ok && was.Comm == p.Comm {
			used -= was.CPU
		}
		if p.Comm == "postgres" {
			u.postgres += used
		} else {
			u.game += used
		}
	}
	return u
}

// minusIdle is u less what each part used idle at idle's rate over u's
// wall time (never below zero).
func (u cpuUse) minusIdle(idle cpuUse) cpuUse {
	less := func(used, idleUsed time.Duration) time.Duration {
		if idle.wall <= 0 {
			return used
		}
		return max(0, used-time.Duration(float64(idleUsed)*float64(u.wall)/float64(idle.wall)))
	}
	return cpuUse{wall: u.wall, stack: less(u.stack, idle.stack), game: less(u.game, idle.game),
		postgres: less(u.postgres, idle.postgres), machine: less(u.machine, idle.machine)}
}

// per divides the CPU by a count of allocations.
func (u cpuUse) per(allocations int) cpuUse {
	n := time.Duration(max(1, allocations))
	return cpuUse{wall: u.wall / n, stack: u.stack / n, game: u.game / n, postgres: u.postgres / n, machine: u.machine / n}
}

// cores is CPU time d over u's wall time, in cores.
func (u cpuUse) cores(d time.Duration) float64 {
	if u.wall <= 0 {
		return 0
	}
	return float64(d) / float64(u.wall)
}

// cpuList reads a list of CPU numbers ("1", "2,3") from the environment;
// nil when it is not set.
func cpuList(b *testing.B, name string) []int {
	v := os.Getenv(name)
	if v == "" {
		return nil
	}
	cores := machineCPU(b).Cores // the machine's, where runtime.NumCPU counts this process's (taskset)
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n >= cores {
			b.Fatalf("%s=%q: want CPU numbers from 0 to %d, comma separated", name, v, cores-1)
		}
		out = append(out, n)
	}
	return out
}

// pinGameServers moves every thread of this process's descendants but
// PostgreSQL's (the game servers) to cpus.
func pinGameServers(b *testing.B, cpus []int) {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	procs := procstat.Processes()
	moved := 0
	for _, pid := range procstat.Descendants(procs, os.Getpid()) {
		if procs[pid].Comm == "postgres" {
			continue
		}
		tids, err := procstat.Threads(pid)
		if err != nil {
			b.Fatalf("game server %d: %v", pid, err)
		}
		for _, tid := range tids {
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				b.Fatalf("pin thread %d of game server %d to CPUs %v: %v", tid, pid, cpus, err)
			}
		}
		moved++
	}
	fmt.Fprintf(os.Stderr, "%d game servers moved to CPUs %v\n", moved, cpus)
}

// sortedResult sorts a result's latencies.
func sortedResult(r allocload.Result) allocload.Result {
	r.Latencies = slices.Sorted(slices.Values(r.Latencies))
	return r
}

// startCPUProfile profiles the CPU into dir/cpu-N.prof until the returned
// func is called; without dir it does nothing.
func startCPUProfile(b *testing.B, dir string, n int) func() {
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d.prof", n)))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// writeProfile writes the named runtime profile to dir/NAME.prof.
func writeProfile(b *testing.B, dir, name string) {
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, name+".prof"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// startReplica starts another API replica in this process over the
// stack's NATS and PostgreSQL, with its own connections, as `tether
// apiserver` would; with tp, its event store, views and freshness are
// traced. It returns its gRPC address and its database pool.
func startReplica(b *testing.B, s *stack, tokenKeys string, tp trace.TracerProvider) (string, *pgxpool.Pool) {
	b.Helper()
	ctx := s.ctx
	nc, err := nats.Connect(s.addrs.NATS)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	store, err := natsjs.New(ctx, js, natsjs.Options{TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	pool, err := connect.Postgres(ctx, s.addrs.Database, 20)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	bus, err := commands.New(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	tokens, err := playertoken.Parse(tokenKeys)
	if err != nil {
		b.Fatal(err)
	}
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	tracer := tp.Tracer("github.com/tetherhq/tether/services/dev/allocbench")
	fresh := postgres.NewFreshness(pool, slog.New(slog.DiscardHandler))
	api, err := apiserver.New(apiserver.Options{
		GRPCListener: grpcLis, HTTPListener: httpLis,
		Store: tracedStore{Store: store, tracer: tracer}, Views: tracedViews{Views: postgres.NewViews(pool), tracer: tracer},
		Freshness: tracedFreshness{Freshness: fresh, tracer: tracer}, Tokens: tokens, Commands: bus,
		JetStream: js, TracerProvider: tp,
	})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- fresh.Run(rctx) }()
	go func() { done <- api.Run(rctx) }()
	b.Cleanup(func() {
		cancel()
		for range 2 {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				b.Error("the extra API replica did not stop within 10s")
				return
			}
		}
	})
	return api.GRPCAddr(), pool
}

// tracedViews times, as spans, the view reads an allocation makes (from
// the client side: pool acquire, round trips, scan).
type tracedViews struct {
	*postgres.Views
	tracer trace.Tracer
}

func (v tracedViews) AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	ctx, span := v.tracer.Start(ctx, "views.AllocationCandidates")
	defer span.End()
	return v.Views.AllocationCandidates(ctx, q)
}

func (v tracedViews) AllocationByRequest(ctx context.Context, requestID string) (string, uint64, bool, error) {
	ctx, span := v.tracer.Start(ctx, "views.AllocationByRequest")
	defer span.End()
	return v.Views.AllocationByRequest(ctx, requestID)
}

func (v tracedViews) Fleet(ctx context.Context, name string) (projections.FleetRow, error) {
	ctx, span := v.tracer.Start(ctx, "views.Fleet")
	defer span.End()
	return v.Views.Fleet(ctx, name)
}

func (v tracedViews) GameServer(ctx context.Context, name string) (projections.Row[*eventsv1.GameServerState], error) {
	ctx, span := v.tracer.Start(ctx, "views.GameServer")
	defer span.End()
	return v.Views.GameServer(ctx, name)
}

// tracedStore times the event store's reads as spans (its appends have
// their own, events.append).
type tracedStore struct {
	*natsjs.Store
	tracer trace.Tracer
}

func (s tracedStore) LastEvent(ctx context.Context, subject string) (events.Envelope, bool, error) {
	ctx, span := s.tracer.Start(ctx, "store.LastEvent")
	defer span.End()
	return s.Store.LastEvent(ctx, subject)
}

func (s tracedStore) Event(ctx context.Context, seq uint64) (events.Envelope, error) {
	ctx, span := s.tracer.Start(ctx, "store.Event")
	defer span.End()
	return s.Store.Event(ctx, seq)
}

func (s tracedStore) LastSequence(ctx context.Context, subject string) (uint64, error) {
	ctx, span := s.tracer.Start(ctx, "store.LastSequence")
	defer span.End()
	return s.Store.LastSequence(ctx, subject)
}

func (s tracedStore) History(ctx context.Context, subject string, from uint64) ([]events.Envelope, error) {
	ctx, span := s.tracer.Start(ctx, "store.History")
	defer span.End()
	return s.Store.History(ctx, subject, from)
}

// tracedFreshness times waits for the views to show a sequence.
type tracedFreshness struct {
	*postgres.Freshness
	tracer trace.Tracer
}

func (f tracedFreshness) WaitFor(ctx context.Context, seq uint64) error {
	ctx, span := f.tracer.Start(ctx, "freshness.WaitFor")
	defer span.End()
	return f.Freshness.WaitFor(ctx, seq)
}
