package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/compose"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/platform/connect"
	"github.com/tetherhq/tether/services/platform/playertoken"
)

// The roles of a simulation split over two processes, so that each can be
// given cores of its own (taskset) and the control plane measured apart
// from the simulated fleet that loads it: in one process on 2 cores, the
// simulated hosts took more CPU than the control plane they loaded
// (docs/scaling.md).
const (
	// RoleControlPlane runs NATS, PostgreSQL, the projector, the API
	// server and the controller, with no host, until stopped; it writes
	// where it listens to ControlPlaneFile in its DataDir.
	RoleControlPlane = "control-plane"
	// RoleHosts runs the simulated hosts, the matchmaker, the faults and
	// the audit against a control plane started with RoleControlPlane
	// (Options.ControlPlaneDir).
	RoleHosts = "hosts"
)

// ControlPlaneFile is what a control-plane role writes in its data
// directory for the hosts role: its addresses and the player-token keys
// the hosts' agents check tokens with (so: mode 0600).
const ControlPlaneFile = "control-plane.json"

// controlPlaneInfo is ControlPlaneFile's content.
type controlPlaneInfo struct {
	NATS            string `json:"nats"`
	GRPC            string `json:"grpc"`
	Database        string `json:"database"`
	PlayerTokenKeys string `json:"player_token_keys"`
	PID             int    `json:"pid"` // the control plane's process, whose CPU the hosts role reports
}

// serveControlPlane runs the control plane alone until ctx ends.
// Its components record to mp, whose reader the steady phase's figures
// are read from (measureOnSignal).
func (w *world) serveControlPlane(ctx context.Context, mp metric.MeterProvider) error {
	o := w.opts
	keys := playertoken.NewKeySpec("sim")
	fmt.Fprintln(o.Progress, "control plane: starting (no hosts)")
	pprof.SetGoroutineLabels(context.Background()) // dev labels its components itself
	go w.measureOnSignal(ctx)
	return dev.Run(ctx, dev.Options{
		DataDir: o.DataDir, Fresh: true, GRPCPort: -1, RESTPort: -1, NATSPort: -1, SDKPort: -1,
		NoAgents: true, HostCapacity: o.ServersPerHost, Logger: o.Logger, PlayerTokenKeys: keys, MeterProvider: mp,
		TracerProvider:    w.spans.provider(),
		ControllerOptions: w.controllerOptions,
		Started: func(s *dev.Stack) {
			cp := controlPlaneInfo{NATS: s.NATS, GRPC: s.GRPC, Database: s.Database, PlayerTokenKeys: keys, PID: os.Getpid()}
			if err := writeJSONFile(filepath.Join(o.DataDir, ControlPlaneFile), cp); err != nil {
				w.log.Error("control plane: write "+ControlPlaneFile, "err", err)
				return
			}
			fmt.Fprintf(o.Progress, "control plane: ready; run the hosts with --role %s --control-plane %s\n", RoleHosts, o.DataDir)
		},
	})
}

// The hosts role marks the steady phase for a control plane apart: it
// sends signalSteadyBegins when the phase begins and signalSteadyEnds when
// it ends, and the control plane measures its CPU in between (the same
// table, by component, as a run in one process).
const (
	signalSteadyBegins = syscall.SIGUSR1
	signalSteadyEnds   = syscall.SIGUSR2
)

// measureOnSignal measures this process's CPU between the hosts role's
// signals and prints the table to Progress (the profile to CPUProfile); it
// reads its meters at both signals and writes the steady phase's figures
// to steadyFile in its data directory for the hosts role.
func (w *world) measureOnSignal(ctx context.Context) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, signalSteadyBegins, signalSteadyEnds)
	defer signal.Stop(sigs)
	var m *cpuMeter
	var began meterReading
	var beganErr error // the meters could not be read when the phase began
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			switch {
			case sig == signalSteadyBegins && m == nil:
				if began, beganErr = w.readMeters(ctx); beganErr != nil {
					fmt.Fprintln(w.opts.Progress, "control plane: read its meters:", beganErr)
				}
				w.spans.reset()
				m = startCPU(0)
				fmt.Fprintln(w.opts.Progress, "control plane: the steady phase began; measuring its CPU")
			case sig == signalSteadyEnds && m != nil:
				if beganErr == nil {
					w.reportSteady(ctx, began)
				} // else no figures: the hosts role reports them missing
				rep, err := m.stop(w.opts.CPUProfile)
				m = nil
				if err != nil {
					fmt.Fprintln(w.opts.Progress, "control plane:", err)
					continue
				}
				tw := tabwriter.NewWriter(w.opts.Progress, 0, 4, 2, ' ', 0)
				rep.print(tw, func(k, v string, args ...any) { fmt.Fprintf(tw, "%s\t"+v+"\n", append([]any{k}, args...)...) }, "")
				_ = tw.Flush() // progress output: nothing to do if it fails
			}
		}
	}
}

// reportSteady writes the figures of the steady phase, which began at
// began, for the hosts role, and prints them to Progress.
func (w *world) reportSteady(ctx context.Context, began meterReading) {
	ended, err := w.readMeters(ctx)
	if err != nil {
		fmt.Fprintln(w.opts.Progress, "control plane: read its meters:", err)
		return
	}
	f := ended.since(began)
	if err := writeJSONFile(filepath.Join(w.opts.DataDir, steadyFile), f); err != nil {
		fmt.Fprintln(w.opts.Progress, "control plane: write its figures for the hosts role:", err)
	}
	a := f.AllocationServed
	fmt.Fprintf(w.opts.Progress, "control plane: %d allocations served, p50 ≤ %.1f ms, p99 ≤ %.1f ms, max ≤ %.1f ms; %d controller passes, mean %.0f ms\n",
		a.N, a.P50, a.P99, a.Max, f.ControllerPasses, f.ControllerPassMeanMs)
	w.spans.print(w.opts.Progress)
}

// signalControlPlane tells a control plane apart that the steady phase
// begins or ends; a control plane that is gone is not an error here (the
// run finds out soon enough).
func (w *world) signalControlPlane(sig syscall.Signal) {
	if w.controlPlanePID > 0 {
		if err := syscall.Kill(w.controlPlanePID, sig); err != nil {
			w.log.Warn("signal the control plane", "pid", w.controlPlanePID, "err", err)
		}
	}
}

// writeJSONFile writes v as JSON to path atomically, readable by its
// owner only (the control plane's file holds player-token keys).
func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// awaitJSONFile waits (at most timeout) for path to hold JSON that decodes
// into into and that accept, if set, takes; ok is false when the time ran
// out first.
func awaitJSONFile(ctx context.Context, path string, timeout time.Duration, into any, accept func() bool) (ok bool, err error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			if err := json.Unmarshal(b, into); err != nil {
				return false, fmt.Errorf("sim: %s: %w", path, err)
			}
			if accept == nil || accept() {
				return true, nil
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("sim: %w", err)
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false, ctx.Err()
		}
	}
}

// awaitControlPlane waits (at most timeout) for a running control plane's
// file in dir.
func awaitControlPlane(ctx context.Context, dir string, timeout time.Duration) (controlPlaneInfo, error) {
	path := filepath.Join(dir, ControlPlaneFile)
	var cp controlPlaneInfo
	// A file left by a control plane that has ended is not one to join.
	running := func() bool { return cp.PID > 0 && syscall.Kill(cp.PID, 0) == nil }
	ok, err := awaitJSONFile(ctx, path, timeout, &cp, running)
	if err == nil && !ok {
		err = fmt.Errorf("sim: no running control plane wrote %s within %s (start one with --role %s --data-dir %s)", path, timeout, RoleControlPlane, dir)
	}
	return cp, err
}

// joinControlPlane builds the simulated hosts' agents against a control
// plane in another process and starts them; the returned stack has what
// the simulation reads (the stream, the views, the API), with no control
// plane of its own. w.stackDone closes when the agents have stopped.
func (w *world) joinControlPlane(ctx context.Context) (*dev.Stack, error) {
	o := w.opts
	cp, err := awaitControlPlane(ctx, o.ControlPlaneDir, time.Minute)
	if err != nil {
		return nil, err
	}
	w.controlPlanePID = cp.PID
	tokens, err := playertoken.Parse(cp.PlayerTokenKeys)
	if err != nil {
		return nil, err
	}
	nc, js, err := connect.NATS(cp.NATS, connect.NATSOptions{Name: "tether-sim", Logger: w.log})
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			nc.Close()
		}
	}()
	store, err := natsjs.New(ctx, js, natsjs.Options{Logger: w.log})
	if err != nil {
		return nil, err
	}
	pool, err := connect.Postgres(ctx, cp.Database, 10)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !started {
			pool.Close()
		}
	}()
	var agents []*agent.Agent
	for i := range o.Hosts {
		ao := agent.Options{
			HostID: hostID(i), Capacity: o.ServersPerHost, JetStream: js, Tokens: tokens,
			Logger: w.log.With("component", "agent"), AllowRootGameServers: true,
		}
		if err := w.agentOptions(i, &ao); err != nil {
			return nil, err
		}
		// agentOptions gave it its connection, store and commands:
		// compose adds what is left (its telemetry).
		a, err := compose.Agent(ctx, compose.Env{Logger: w.log}, compose.AgentOptions{Agent: ao})
		if err != nil {
			return nil, err
		}
		agents = append(agents, a)
	}
	started = true // the agents' goroutine closes the connections
	go func() {
		defer close(w.stackDone)
		defer nc.Close()
		defer pool.Close()
		g, gctx := errgroup.WithContext(ctx)
		for i, a := range agents {
			g.Go(func() error {
				pprof.SetGoroutineLabels(pprof.WithLabels(gctx, pprof.Labels(dev.ComponentLabel, dev.ComponentAgent)))
				if !sleepCtx(gctx, o.HostStartSpread*time.Duration(i)/time.Duration(len(agents))) {
					return nil
				}
				return a.Run(gctx)
			})
		}
		w.stackErr = g.Wait()
	}()
	return &dev.Stack{
		Addresses: dev.Addresses{GRPC: cp.GRPC, NATS: cp.NATS, Database: cp.Database},
		Store:     store, JetStream: js, Pool: pool, Agents: agents,
	}, nil
}
