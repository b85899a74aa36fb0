// Package chaos runs the whole system with real game server processes and
// injects faults, to measure what docs/benchmarks.md's targets promise about
// health: hung and crashed servers are detected (and how fast), and servers
// whose SDK connection keeps dropping are never terminated.
//
// Faults: SIGSTOP (a hang: the process lives, heartbeats stop) and SIGKILL
// (a crash) on random READY servers of a steady fleet; a second fleet's
// servers drop and re-open their SDK connection every 2 s all along.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/dev"
)

// Options configure a chaos run.
type Options struct {
	// GameServer is the example game server binary (required).
	GameServer string
	// AgonesGameServer, when set, is the example game server built for
	// Agones' SDK (sdk/go/example/agonesgameserver): half of the servers,
	// steady and flapping alike, run it instead.
	AgonesGameServer string
	// Servers is the number of game servers; default 200 (a quarter flap).
	Servers int
	// Hosts is the number of simulated hosts; default 4.
	Hosts int
	// Duration of fault injection; default 3m.
	Duration time.Duration
	// FaultEvery is the time between two injected faults; default 2s.
	FaultEvery time.Duration
	// DatabaseURL, when set, is used instead of a throwaway PostgreSQL.
	DatabaseURL string
	// Logger; default discards.
	Logger *slog.Logger
	// Seed makes fault choices repeatable; default 1.
	Seed uint64
}

// Report is what a run measured.
type Report struct {
	Servers, Flapping     int
	AgonesServers         int // of Servers, on Agones' SDK
	AgonesFaults          int // of the faults, on servers on Agones' SDK
	Hangs, Crashes        int
	MissedDetections      int
	FalseTerminations     int
	FlapDisconnects       int
	HangDetectP50         time.Duration
	HangDetectP99         time.Duration
	CrashDetectP50        time.Duration
	CrashDetectP99        time.Duration
	HangContract          time.Duration // initialDelay is over: period × threshold + 1 s
	Duration              time.Duration
	UnexplainedTerminated []string
}

// health contract of both fleets: 1 s period, threshold 3.
const (
	periodSeconds = 1
	threshold     = 3
)

type fault struct {
	name string
	pid  int
	hang bool
	at   time.Time
}

// The defaults of Options, and of the `tether chaos` flags.
const (
	DefaultServers    = 200
	DefaultHosts      = 4
	DefaultDuration   = 3 * time.Minute
	DefaultFaultEvery = 2 * time.Second
)

// Run starts Tether, runs the faults and returns the report.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.GameServer == "" {
		return Report{}, errors.New("chaos: GameServer binary is required")
	}
	if o.Servers <= 0 {
		o.Servers = DefaultServers
	}
	if o.Hosts <= 0 {
		o.Hosts = DefaultHosts
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.FaultEvery <= 0 {
		o.FaultEvery = DefaultFaultEvery
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp("", "tether-chaos-")
	if err != nil {
		return Report{}, err
	}
	defer os.RemoveAll(dir)

	allowed := []string{o.GameServer}
	if o.AgonesGameServer != "" {
		allowed = append(allowed, o.AgonesGameServer)
	}
	sctx, stop := context.WithCancel(ctx)
	ready := make(chan dev.Addresses, 1)
	done := make(chan error, 1)
	go func() {
		done <- dev.Run(sctx, dev.Options{
			DataDir: dir, Fresh: true, GRPCPort: -1, RESTPort: -1, NATSPort: -1, SDKPort: -1, GamePortBase: 30000,
			Hosts: o.Hosts, HostCapacity: o.Servers/o.Hosts + 20, DatabaseURL: o.DatabaseURL, Logger: o.Logger,
			AllowedCommands: allowed, // the only programs its fleets run
			Ready:           func(a dev.Addresses) { ready <- a },
		})
	}()
	var addrs dev.Addresses
	select {
	case addrs = <-ready:
	case err := <-done:
		stop()
		return Report{}, fmt.Errorf("chaos: start: %w", err)
	}
	defer func() {
		stop()
		if err := <-done; err != nil {
			o.Logger.Error("chaos: the stack stopped with an error", "err", err)
		}
	}()

	fleets := chaosFleets(o)
	for _, f := range fleets {
		if err := createFleet(ctx, addrs.REST, f.id, f.n, f.bin, f.env); err != nil {
			return Report{}, err
		}
	}
	o.Logger.Info("chaos: waiting for the fleets to be READY", "servers", o.Servers)
	if err := waitReady(ctx, addrs.REST, fleets, o.Servers, 3*time.Minute); err != nil {
		return Report{}, err
	}

	start := time.Now()
	rng := rand.New(rand.NewPCG(o.Seed, 2))
	var faults []fault
	faulted := map[string]bool{}
	tick := time.NewTicker(o.FaultEvery)
	defer tick.Stop()
	for time.Since(start) < o.Duration {
		select {
		case <-ctx.Done():
			return Report{}, ctx.Err()
		case <-tick.C:
		}
		var candidates []server
		for _, f := range fleets {
			if f.flapping {
				continue // faults go to the steady fleets
			}
			list, err := listServers(ctx, addrs.REST, f.id)
			if err != nil {
				return Report{}, err
			}
			for _, s := range list {
				if s.State == "READY" && !faulted[s.Name] && s.Pid > 0 {
					candidates = append(candidates, s)
				}
			}
		}
		if len(candidates) == 0 {
			continue
		}
		s := candidates[rng.IntN(len(candidates))]
		f := fault{name: s.Name, pid: s.Pid, hang: rng.IntN(2) == 0, at: time.Now()}
		sig := syscall.SIGKILL
		if f.hang {
			sig = syscall.SIGSTOP
		}
		if err := syscall.Kill(s.Pid, sig); err != nil {
			continue // it went away on its own
		}
		faulted[s.Name] = true
		faults = append(faults, f)
	}
	// Let the last faults be detected.
	deadline := time.Now().Add(time.Duration(periodSeconds*threshold+10) * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return Report{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	hist, err := history(ctx, addrs.NATS)
	if err != nil {
		return Report{}, err
	}
	r := judge(hist, faults, faulted)
	r.Servers, r.Duration = o.Servers, o.Duration
	for _, f := range fleets {
		if f.flapping {
			r.Flapping += f.n
		}
		if f.agones {
			r.AgonesServers += f.n
		}
	}
	for _, f := range faults {
		if strings.HasPrefix(f.name, "fleets/"+agonesPrefix) {
			r.AgonesFaults++
		}
	}
	r.HangContract = time.Duration(periodSeconds*threshold+1) * time.Second
	return r, nil
}

// chaosFleet is one fleet of a run.
type chaosFleet struct {
	id       string
	n        int
	bin      string
	env      map[string]string
	flapping bool // its servers drop and re-open their SDK connection every 2 s
	agones   bool // its servers speak Agones' SDK
}

// agonesPrefix starts the ids of the fleets on Agones' SDK.
const agonesPrefix = "agones-"

// chaosFleets are a run's fleets: a quarter of the servers flapping, the
// rest steady; with an Agones game server, each of the two split in half
// between Tether's SDK and Agones'.
func chaosFleets(o Options) []chaosFleet {
	flapping := o.Servers / 4
	steady := o.Servers - flapping
	tetherFlap := map[string]string{"TETHER_EXAMPLE_RECONNECT_EVERY": "2s"}
	if o.AgonesGameServer == "" {
		return []chaosFleet{
			{id: "steady", n: steady, bin: o.GameServer},
			{id: "flappy", n: flapping, bin: o.GameServer, env: tetherFlap, flapping: true},
		}
	}
	agonesPing := map[string]string{"AGONES_EXAMPLE_HEALTH_EVERY": "1s"}
	agonesFlap := map[string]string{"AGONES_EXAMPLE_HEALTH_EVERY": "1s", "AGONES_EXAMPLE_RECONNECT_EVERY": "2s"}
	return []chaosFleet{
		{id: "steady", n: steady - steady/2, bin: o.GameServer},
		{id: agonesPrefix + "steady", n: steady / 2, bin: o.AgonesGameServer, env: agonesPing, agones: true},
		{id: "flappy", n: flapping - flapping/2, bin: o.GameServer, env: tetherFlap, flapping: true},
		{id: agonesPrefix + "flappy", n: flapping / 2, bin: o.AgonesGameServer, env: agonesFlap, flapping: true, agones: true},
	}
}

// judge reads the histories against the faults.
func judge(hist []events.Envelope, faults []fault, faulted map[string]bool) Report {
	byServer := map[string][]events.Envelope{}
	for _, e := range hist {
		byServer[e.Aggregate] = append(byServer[e.Aggregate], e)
	}
	var r Report
	var hangLat, crashLat []time.Duration
	for _, f := range faults {
		var seen time.Time
		for _, e := range byServer[f.name] {
			if e.Time.Before(f.at) {
				continue
			}
			if f.hang && e.Type == "GameServerUnhealthy" || !f.hang && e.Type == "ProcessExited" {
				seen = e.Time
				break
			}
		}
		if f.hang {
			r.Hangs++
		} else {
			r.Crashes++
		}
		if seen.IsZero() {
			r.MissedDetections++
			continue
		}
		if f.hang {
			hangLat = append(hangLat, seen.Sub(f.at))
		} else {
			crashLat = append(crashLat, seen.Sub(f.at))
		}
	}
	for name, evs := range byServer {
		for _, e := range evs {
			switch d := e.Data.(type) {
			case *eventsv1.SdkDisconnected:
				r.FlapDisconnects++
			case *eventsv1.GameServerUnhealthy:
				if !faulted[name] {
					r.FalseTerminations++
					r.UnexplainedTerminated = append(r.UnexplainedTerminated, name+" "+events.ReasonName(d.GetReason()))
				}
			case *eventsv1.GameServerTerminated:
				if !faulted[name] && d.GetReason() != eventsv1.Reason_REASON_HOST_SHUTDOWN {
					r.FalseTerminations++
					r.UnexplainedTerminated = append(r.UnexplainedTerminated, name+" "+events.ReasonName(d.GetReason()))
				}
			}
		}
	}
	r.HangDetectP50, r.HangDetectP99 = percentile(hangLat, 0.5), percentile(hangLat, 0.99)
	r.CrashDetectP50, r.CrashDetectP99 = percentile(crashLat, 0.5), percentile(crashLat, 0.99)
	return r
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// Print writes the report as a table against the targets.
func (r Report) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	pass := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "FALL SHORT"
	}
	fmt.Fprintf(tw, "chaos run: %d game servers (%d flapping their SDK connection every 2 s; %d on Agones' SDK), %s of faults\n", r.Servers, r.Flapping, r.AgonesServers, r.Duration)
	fmt.Fprintln(tw, "what\tmeasured\ttarget\t")
	fmt.Fprintf(tw, "hangs injected (SIGSTOP) / crashes (SIGKILL)\t%d / %d (%d of them on Agones' SDK)\t\t\n", r.Hangs, r.Crashes, r.AgonesFaults)
	fmt.Fprintf(tw, "missed detections\t%d\t0\t%s\n", r.MissedDetections, pass(r.MissedDetections == 0))
	fmt.Fprintf(tw, "false terminations\t%d\t0\t%s\n", r.FalseTerminations, pass(r.FalseTerminations == 0))
	fmt.Fprintf(tw, "SDK disconnects recorded\t%d\t\t\n", r.FlapDisconnects)
	fmt.Fprintf(tw, "hang detected after the fault, p50 / p99\t%s / %s\t≤ %s\t%s\n", r.HangDetectP50.Round(time.Millisecond),
		r.HangDetectP99.Round(time.Millisecond), r.HangContract, pass(r.HangDetectP99 <= r.HangContract))
	fmt.Fprintf(tw, "crash seen after the exit, p50 / p99\t%s / %s\t≤ 100ms\t%s\n", r.CrashDetectP50.Round(time.Millisecond),
		r.CrashDetectP99.Round(time.Millisecond), pass(r.CrashDetectP99 <= 100*time.Millisecond))
	for _, u := range r.UnexplainedTerminated {
		fmt.Fprintf(tw, "  unexplained: %s\t\t\t\n", u)
	}
	return tw.Flush()
}

// JSON returns the report for comparison between commits.
func (r Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

type server struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Pid   int    `json:"pid"`
}

func createFleet(ctx context.Context, rest, id string, n int, bin string, env map[string]string) error {
	body, err := json.Marshal(map[string]any{
		"replicas":                  n,
		"template":                  map[string]any{"command": bin, "ports": []any{map[string]any{"name": "game"}}, "env": env},
		"health":                    map[string]any{"initialDelaySeconds": 2, "periodSeconds": periodSeconds, "failureThreshold": threshold},
		"sdkDisconnectGraceSeconds": 5,
	})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rest+"/v1/fleets?fleetId="+id, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("chaos: create fleet %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body) // only for the message
		return fmt.Errorf("chaos: create fleet %s: %s: %s", id, resp.Status, b)
	}
	return nil
}

func listServers(ctx context.Context, rest, fleet string) ([]server, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rest+"/v1/fleets/"+fleet+"/gameServers?pageSize=1000", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("chaos: list %s: %w", fleet, err)
	}
	defer resp.Body.Close()
	var out struct {
		GameServers []server `json:"gameServers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("chaos: list %s: %w", fleet, err)
	}
	return out.GameServers, nil
}

func waitReady(ctx context.Context, rest string, fleets []chaosFleet, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		n := 0
		for _, f := range fleets {
			list, err := listServers(ctx, rest, f.id)
			if err != nil {
				return err
			}
			for _, s := range list {
				if s.State == "READY" {
					n++
				}
			}
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: only %d of %d servers READY after %s", n, want, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// history reads every game server event of the run.
func history(ctx context.Context, url string) ([]events.Envelope, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		return nil, err
	}
	return store.History(ctx, events.SubjectPrefix+"."+events.KindGameServer+".>", 0)
}
