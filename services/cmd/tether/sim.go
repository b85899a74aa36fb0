package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/tetherhq/tether/services/tools/sim"
)

// simCommand runs the fleet simulator (services/sim).
func simCommand(g *global) *cobra.Command {
	var opts sim.Options
	var jsonOut, cpuProfile string
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

  tether sim                                        # 1,000 servers, 60 s
  tether sim --hosts 10000 --servers-per-host 10    # the 100,000-server scale run`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
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
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
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
	f.DurationVar(&opts.ReadyTimeout, "ready-timeout", def.ReadyTimeout, "how long the fleets may take to come up")
	f.DurationVar(&opts.ProgressEvery, "progress-every", def.ProgressEvery, "status line interval")
	f.StringVar(&opts.DataDir, "data-dir", "", "keep the run's NATS store and logs here (default: a temporary directory, removed)")
	f.StringVar(&jsonOut, "json", "", "also write the report as JSON to this file")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	f.BoolVar(&quiet, "quiet", true, "discard the components' logs (--quiet=false to see them at --log-level)")
	return cmd
}
