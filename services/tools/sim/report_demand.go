package sim

import (
	"fmt"
	"io"
)

// DemandReport is what a demand-mode run measured (capacity.go): how
// often a match found no READY server, what the READY servers waiting for
// matches cost, and how a rolling update went under load. Times are
// seconds; server-seconds integrate a count of servers over the steady
// phase.
type DemandReport struct {
	Curve           string  `json:"curve"`  // matches per second, time:rate points
	Buffer          string  `json:"buffer"` // the autoscaling buffer
	MinReplicas     int     `json:"min_replicas"`
	MaxReplicas     int     `json:"max_replicas"`
	MatchLength     float64 `json:"match_length_seconds"`
	ExpectedMatches float64 `json:"expected_matches"` // the curve's integral over the steady phase

	Attempted         int64   `json:"allocations_attempted"`
	Succeeded         int64   `json:"allocations_succeeded"`
	NoReadyGameServer int64   `json:"no_ready_game_server"` // refused: the fleet had no READY server
	NoReadyPercent    float64 `json:"no_ready_game_server_percent"`
	OtherFailures     int64   `json:"other_failures"`
	AllocationLatency Latency `json:"allocation_latency_ms"` // every attempt, refused ones included

	// IdleReadyServerSeconds integrates the fleet's READY servers over the
	// steady phase: capacity paid for and waiting, the cost of the buffer.
	IdleReadyServerSeconds float64 `json:"idle_ready_server_seconds"`
	AllocatedServerSeconds float64 `json:"allocated_server_seconds"` // ALLOCATED or RESERVED: capacity in use
	MeanReady              float64 `json:"mean_ready"`
	MeanAllocated          float64 `json:"mean_allocated"`
	PeakReady              int     `json:"peak_ready"`
	PeakAllocated          int     `json:"peak_allocated"`
	PeakReplicas           int     `json:"peak_replicas"`   // the most replicas the autoscaler set
	PeakServers            int     `json:"peak_servers"`    // the most servers holding a slot (not TERMINATED)
	ScaleDecisions         int     `json:"scale_decisions"` // FleetAutoscaled events

	Rollout RolloutReport `json:"rollout"`
	// AllocatedScaledDown counts servers with a match the autoscaler
	// stopped (must be 0); MatchesInterrupted counts matches cut short on
	// servers the simulation gave no fault (must be 0).
	AllocatedScaledDown int   `json:"allocated_scaled_down"`
	MatchesInterrupted  int64 `json:"matches_interrupted"`

	Timeline []DemandWindow `json:"timeline"`
}

// RolloutReport is demand mode's rolling update, from the fleet's history.
type RolloutReport struct {
	RequestedAtSeconds float64 `json:"requested_at_seconds"` // into the steady phase
	Error              string  `json:"error,omitempty"`      // the template change was refused
	Revision           int64   `json:"revision"`
	Started            bool    `json:"started"`
	StartedAtSeconds   float64 `json:"started_at_seconds"` // FleetRolloutStarted, into the steady phase
	Completed          bool    `json:"completed"`
	Halted             bool    `json:"halted"`
	HaltReason         string  `json:"halt_reason,omitempty"`
	// Seconds runs from FleetRolloutStarted to FleetRolloutCompleted: until
	// the last match on the old revision ended and its server was
	// replaced.
	Seconds float64 `json:"seconds"`
	// OutdatedReadyGoneSeconds is when, after the start, the last READY
	// server of the old revision left READY (replaced or allocated).
	OutdatedReadyGoneSeconds float64 `json:"outdated_ready_gone_seconds"`
	ProgressEvents           int     `json:"progress_events"`
	Replaced                 int     `json:"replaced"`          // servers stopped with FLEET_UPDATED
	AllocatedTouched         int     `json:"allocated_touched"` // of those, ALLOCATED or RESERVED ones: must be 0
	// OutdatedAllocations counts matches placed on old-revision servers
	// while the rollout ran: each holds the rollout open until it ends.
	OutdatedAllocations int   `json:"outdated_allocations"`
	Attempts            int64 `json:"allocations_during"`
	NoReadyGameServer   int64 `json:"no_ready_game_server_during"`
}

// DemandWindow is a slice of the steady phase.
type DemandWindow struct {
	FromSeconds       float64 `json:"from_seconds"`
	ToSeconds         float64 `json:"to_seconds"`
	Demand            float64 `json:"demand"` // the curve's mean rate, matches/s
	Attempts          int64   `json:"attempts"`
	NoReadyGameServer int64   `json:"no_ready_game_server"`
	MeanReady         float64 `json:"mean_ready"`
	MeanAllocated     float64 `json:"mean_allocated"`
	PeakReplicas      int     `json:"peak_replicas"`
	Rollout           bool    `json:"rollout"` // the rollout ran during the window
}

// print writes the demand section; row writes one "key\tvalue" line of w.
func (d *DemandReport) print(w io.Writer, row func(k, v string, args ...any)) {
	fmt.Fprintln(w, "DEMAND\t")
	row("curve (matches/s)", "%s; %.0f matches expected, %.0f s each", d.Curve, d.ExpectedMatches, d.MatchLength)
	row("autoscaling", "buffer %s, %d to %d replicas", d.Buffer, d.MinReplicas, d.MaxReplicas)
	row("allocations", "%d attempted, %d succeeded, %d NO_READY_GAME_SERVER (%.2f %%), %d other failures",
		d.Attempted, d.Succeeded, d.NoReadyGameServer, d.NoReadyPercent, d.OtherFailures)
	row("allocation latency", "p50 %.1f ms, p99 %.1f ms (every attempt)", d.AllocationLatency.P50, d.AllocationLatency.P99)
	row("idle READY server-seconds", "%.0f (mean %.1f READY, peak %d)", d.IdleReadyServerSeconds, d.MeanReady, d.PeakReady)
	row("allocated server-seconds", "%.0f (mean %.1f, peak %d)", d.AllocatedServerSeconds, d.MeanAllocated, d.PeakAllocated)
	row("replicas", "peak %d set by %d autoscaling decisions; peak %d servers holding a slot", d.PeakReplicas, d.ScaleDecisions, d.PeakServers)
	ro := d.Rollout
	switch {
	case ro.Error != "":
		row("rollout", "refused: %s", ro.Error)
	case !ro.Started:
		row("rollout", "none")
	default:
		state := "did not complete"
		if ro.Completed {
			state = fmt.Sprintf("completed in %.1f s", ro.Seconds)
		} else if ro.Halted {
			state = "halted: " + ro.HaltReason
		}
		row("rollout", "revision %d started at %.1f s, %s; old READY servers gone after %.1f s",
			ro.Revision, ro.StartedAtSeconds, state, ro.OutdatedReadyGoneSeconds)
		row("rollout under load", "%d servers replaced, %d matches placed on the old revision meanwhile, %d of %d allocations refused",
			ro.Replaced, ro.OutdatedAllocations, ro.NoReadyGameServer, ro.Attempts)
	}
	row("servers with a match stopped", "%d by the rollout, %d by the autoscaler; %d matches interrupted", ro.AllocatedTouched, d.AllocatedScaledDown, d.MatchesInterrupted)
	fmt.Fprintln(w, "timeline (s)\tdemand/s\tattempts\trefused\tmean READY\tmean allocated\treplicas\t")
	for _, t := range d.Timeline {
		mark := ""
		if t.Rollout {
			mark = "rollout"
		}
		fmt.Fprintf(w, "  %.0f-%.0f\t%.1f\t%d\t%d\t%.1f\t%.1f\t%d\t%s\n",
			t.FromSeconds, t.ToSeconds, t.Demand, t.Attempts, t.NoReadyGameServer, t.MeanReady, t.MeanAllocated, t.PeakReplicas, mark)
	}
	fmt.Fprintln(w, "\t")
}
