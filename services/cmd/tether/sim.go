package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/tetherhq/tether/services/archiver"
	"github.com/tetherhq/tether/services/tools/sim"
)

// simCommand runs the fleet simulator (services/sim).
func simCommand(g *global) *cobra.Command {
	var opts sim.Options
	var jsonOut, cpuProfile, demand string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate a fleet of hosts and game servers against the real control plane, and audit it",
		Long: `Starts the control plane as 'tether dev' does (embedded NATS, a throwaway
PostgreSQL, projector, API, controller) with --hosts simulated hosts: each a
real host agent whose game server processes are simulated in this process and
speak the SDK in-process. Fleets fill every slot; then, for --duration, servers
crash, hang and lose their SDK connection, hosts are partitioned briefly, and a
matchmaker allocates matches whose players join, drop, reconnect and leave.
After the system settles, the run is audited: every event the agents published
must be in the stream and applied by the projector, and every server that
ended must have ended for a fault the simulator injected. It prints a table
(and --json), and exits 1 if the audit failed. It runs with GOGC=400 unless
GOGC is set.

With --demand it plans capacity instead: one fleet, autoscaled with --buffer
within --min-replicas and --max-replicas (default every slot), takes matches
at the curve's rate (matches per second, linear between time:rate points; the
steady phase lasts until the last point unless --duration is given), its
template changes at --rollout-at (a rolling update under load), and the table
adds allocations refused with NO_READY_GAME_SERVER, the READY servers' idle
server-seconds, the replicas, and the rollout, which must complete without
stopping a server that holds a match. Faults are off unless their flags are
given.

With --retention the leading controller archives game servers and game
sessions that ended longer ago than that (services/archiver): their histories
leave the stream and the views for segments in --archive-dir. Every
--storage-every the run samples the events stream (bytes, messages,
subjects), the views' rows, the database's size and the archive's; the table
ends with these samples (--json has them all). With --retention the audit
counts the archive's events with the stream's, and the run then waits until
only live aggregates are left in the stream and the views.

  tether sim                                        # 1,000 servers, 60 s
  tether sim --hosts 10000 --servers-per-host 10    # the 100,000-server scale run
  tether sim --hosts 40 --demand 0s:2,30s:2,40s:20,60s:20,70s:2,120s:2 --buffer 5
  tether sim --hosts 50 --duration 15m --retention 2m --archive-interval 15s`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if err := demandMode(cmd, &opts, demand); err != nil {
				return err
			}
			opts.Logger = log
			if quiet {
				opts.Logger = slog.New(slog.DiscardHandler)
			}
			opts.Progress = os.Stderr
			if os.Getenv("GOGC") == "" {
				// Every component and ten thousand agents share this heap;
				// let it grow 4× between collections (GOGC=400), as
				// separate processes on a 24 GiB machine would afford.
				debug.SetGCPercent(400)
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				opts.CPUProfile = f
			}
			var writeErr error
			opts.OnReport = func(rep *sim.Report) {
				rep.Print(os.Stdout)
				if jsonOut == "" {
					return
				}
				data, err := json.MarshalIndent(rep, "", "  ")
				if err == nil {
					err = os.WriteFile(jsonOut, append(data, '\n'), 0o644)
				}
				if err != nil {
					writeErr = fmt.Errorf("--json: %w", err)
				}
			}
			rep, err := sim.Run(cmd.Context(), opts)
			if opts.Role == sim.RoleControlPlane {
				if errors.Is(err, context.Canceled) {
					return nil // stopped, as it is meant to be
				}
				return err
			}
			if err != nil {
				return err
			}
			if writeErr != nil {
				return writeErr
			}
			if !rep.OK() {
				return errors.New("the simulation's audit failed (see the table)")
			}
			return nil
		},
	}
	def := sim.Defaults()
	f := cmd.Flags()
	f.IntVar(&opts.Hosts, "hosts", def.Hosts, "simulated hosts")
	f.IntVar(&opts.ServersPerHost, "servers-per-host", def.ServersPerHost, "game server slots per host (the fleets fill them all)")
	f.IntVar(&opts.Fleets, "fleets", def.Fleets, "fleets sharing the servers")
	f.DurationVar(&opts.Duration, "duration", def.Duration, "length of the steady phase (faults, matches, players)")
	f.DurationVar(&opts.HealthPeriod, "health-period", def.HealthPeriod, "game server heartbeat period (whole seconds)")
	f.DurationVar(&opts.HeartbeatInterval, "heartbeat-interval", 0, "how often a simulated process heartbeats (default: half the health period)")
	f.IntVar(&opts.FailureThreshold, "failure-threshold", def.FailureThreshold, "missed heartbeat periods that make a server unhealthy")
	f.DurationVar(&opts.SDKGrace, "sdk-grace", def.SDKGrace, "how long a server may stay disconnected from the SDK")
	f.DurationVar(&opts.HostHeartbeat, "host-heartbeat", def.HostHeartbeat, "agents' host heartbeat interval")
	f.DurationVar(&opts.UnreachableAfter, "unreachable-after", def.UnreachableAfter, "controller: a silent host is UNREACHABLE after this")
	f.DurationVar(&opts.LostAfter, "lost-after", def.LostAfter, "controller: an unreachable host is LOST after this")
	f.Float64Var(&opts.CrashRate, "crash-rate", def.CrashRate, "crashes per second across the fleet")
	f.Float64Var(&opts.HangRate, "hang-rate", def.HangRate, "hangs (heartbeats stop, SIGTERM ignored) per second")
	f.Float64Var(&opts.FlapRate, "sdk-reset-rate", def.FlapRate, "SDK connection resets (back within the grace) per second")
	f.Float64Var(&opts.PartitionRate, "partition-rate", def.PartitionRate, "host partitions (heartbeat paused, shorter than --lost-after) per second")
	f.Float64Var(&opts.SlowStartFraction, "slow-start-fraction", def.SlowStartFraction, "fraction of starts that are slow")
	f.Float64Var(&opts.AllocationRate, "allocation-rate", def.AllocationRate, "matches allocated per second")
	f.IntVar(&opts.PlayersPerMatch, "players-per-match", def.PlayersPerMatch, "players per match")
	f.Float64Var(&opts.DropFraction, "drop-fraction", def.DropFraction, "fraction of players who drop and reconnect")
	f.DurationVar(&opts.MatchLength, "match-length", def.MatchLength, "how long a match lasts")
	f.DurationVar(&opts.StartDelay, "start-delay", def.StartDelay, "a simulated process's start-up time before Ready (jittered ±50%)")
	f.DurationVar(&opts.ReadyTimeout, "ready-timeout", def.ReadyTimeout, "how long the fleets may take to come up")
	f.StringVar(&demand, "demand", "", `demand mode: matches per second over the steady phase, "time:rate,…" (e.g. "0s:2,30s:2,40s:20,60s:20,70s:2,120s:2")`)
	f.StringVar(&opts.Buffer, "buffer", "3", `demand mode: the fleet's autoscaling buffer, a count ("3") or a percentage of allocated ("20%")`)
	f.IntVar(&opts.MinReplicas, "min-replicas", 0, "demand mode: the fleet's fewest replicas")
	f.IntVar(&opts.MaxReplicas, "max-replicas", 0, "demand mode: the fleet's most replicas (default: every slot)")
	f.DurationVar(&opts.RolloutAt, "rollout-at", 0, "demand mode: when, into the steady phase, the template changes (default: two thirds in; negative: no rollout)")
	f.DurationVar(&opts.Retention, "retention", 0,
		"archive game servers and game sessions that ended this long ago, as the leading controller does with --archive-dir (0: no archiving); the audit then counts the archive too")
	f.StringVar(&opts.ArchiveDir, "archive-dir", "", "with --retention: the archive's segment directory (default: archive in the run's data directory)")
	f.DurationVar(&opts.ArchiveInterval, "archive-interval", archiver.DefaultInterval, "with --retention: time between archiving passes")
	f.DurationVar(&opts.StorageEvery, "storage-every", def.StorageEvery, "how often the steady phase samples the storage: the events stream, the views' rows, the database, the archive")
	f.DurationVar(&opts.ProgressEvery, "progress-every", def.ProgressEvery, "status line interval")
	f.StringVar(&opts.Role, "role", "", `split the simulation over two processes, each given cores of its own (taskset): "control-plane" serves NATS, PostgreSQL, the projector, the API and the controller until stopped; "hosts" runs the simulated hosts and the run against it (--control-plane); empty: both in this process`)
	f.StringVar(&opts.ControlPlaneDir, "control-plane", "", "with --role hosts: the control plane's --data-dir")
	f.StringVar(&opts.DataDir, "data-dir", "", "keep the run's NATS store and logs here (default: a temporary directory, removed)")
	f.StringVar(&jsonOut, "json", "", "also write the report as JSON to this file")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write the CPU profile of the steady phase (the one the CPU table is read from) to this file")
	f.BoolVar(&opts.TraceAllocations, "trace-allocations", false, "trace the API's allocations of the steady phase and print where their server time went (by the process that runs the control plane)")
	f.BoolVar(&quiet, "quiet", true, "discard the components' logs (--quiet=false to see them at --log-level)")
	return cmd
}

// demandMode applies --demand: the curve, the curve's length as the
// steady phase unless --duration is given, and no faults unless their
// flags are given (demand mode measures capacity, not recovery).
func demandMode(cmd *cobra.Command, opts *sim.Options, demand string) error {
	curve, err := sim.ParseCurve(demand)
	if err != nil {
		return fmt.Errorf("--demand: %w", err)
	}
	if !curve.Set() {
		return nil
	}
	opts.Demand = curve
	f := cmd.Flags()
	if !f.Changed("duration") {
		opts.Duration = 0
	}
	for name, rate := range map[string]*float64{
		"crash-rate": &opts.CrashRate, "hang-rate": &opts.HangRate, "sdk-reset-rate": &opts.FlapRate,
		"partition-rate": &opts.PartitionRate, "slow-start-fraction": &opts.SlowStartFraction,
	} {
		if !f.Changed(name) {
			*rate = 0
		}
	}
	return nil
}
