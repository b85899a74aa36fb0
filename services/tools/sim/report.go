package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a simulation measured and found. Durations are in
// milliseconds, sizes in bytes.
type Report struct {
	Hosts                  int     `json:"hosts"`
	GameServers            int     `json:"game_servers"`
	Fleets                 int     `json:"fleets"`
	ReadySeconds           float64 `json:"ready_seconds"`             // from start until every server was READY
	SteadySeconds          float64 `json:"steady_seconds"`            // length of the steady phase
	SteadyEvents           uint64  `json:"steady_events"`             // events appended in the steady phase
	EventsPerSecond        float64 `json:"events_per_second"`         // their rate
	StartupEventsPerSecond float64 `json:"startup_events_per_second"` // rate while the fleets came up

	ProjectionLag Latency `json:"projection_lag_ms"` // publish→view lag samples (steady phase)
	// SlowestLag are the slowest of those samples and when each was taken.
	SlowestLag []TimedSample `json:"slowest_lag,omitempty"`

	ControlPlaneApart    bool    `json:"control_plane_apart"`     // it ran in another process (RoleHosts): no PostgreSQL memory; its own figures read from its steadyFile
	ControllerPasses     uint64  `json:"controller_passes"`       // reconcile passes in the steady phase
	ControllerPassMeanMs float64 `json:"controller_pass_mean_ms"` // their mean duration
	ControllerPassMaxMs  float64 `json:"controller_pass_max_ms"`  // their max, to histogram-bucket precision

	Allocations       int64   `json:"allocations"`
	AllocationErrors  int64   `json:"allocation_errors"`
	NoReadyServer     int64   `json:"no_ready_server"`
	AllocationLatency Latency `json:"allocation_latency_ms"`
	// AllocationServed is the same calls as the API server timed them
	// (ControlPlaneFigures): bucket upper bounds, and without the
	// matchmaker's own waits.
	AllocationServed Latency `json:"allocation_served_ms"`
	ReconnectLatency Latency `json:"reconnect_latency_ms"`
	PlayersJoined    int64   `json:"players_joined"`
	PlayersDropped   int64   `json:"players_dropped"`
	PlayersRejoined  int64   `json:"players_rejoined"`
	PlayersLeft      int64   `json:"players_left"`
	MatchesEnded     int64   `json:"matches_ended"`
	MatchesSkipped   int64   `json:"matches_skipped"` // not started: the matchmaker had its maximum in flight
	MatchesLost      int64   `json:"matches_lost"`    // cut short: their server failed (an injected fault) or a player call did
	PlayerErrors     int64   `json:"player_errors"`
	LastPlayerError  string  `json:"last_player_error,omitempty"`

	Crashes           int     `json:"crashes"`
	Hangs             int     `json:"hangs"`
	Flaps             int     `json:"sdk_resets"`
	Partitions        int     `json:"host_partitions"`
	SlowStarts        int64   `json:"slow_starts"`
	SDKErrors         int64   `json:"sdk_errors"`         // SDK calls of simulated processes the agent refused (e.g. Ready on a server stopped meanwhile)
	CrashDetection    Latency `json:"crash_detection_ms"` // injection → GameServerTerminated/ProcessExited
	HangDetection     Latency `json:"hang_detection_ms"`  // injection → GameServerUnhealthy
	HangBoundMs       float64 `json:"hang_bound_ms"`      // period × threshold + 1 s
	MissedDetections  int     `json:"missed_detections"`
	FalseTerminations int     `json:"false_terminations"`
	// HealthNearMisses counts missed-heartbeat reports (HealthDegraded) of
	// servers given no hang, and MaxMissedPeriods is the most periods one of
	// them missed in a row: how close a healthy server came to the failure
	// threshold, a false termination (the margin a loaded machine left).
	HealthNearMisses int `json:"health_near_misses"`
	// HealthNearMissesBeforeSteady of them were reported before the steady
	// phase (while the fleet came up), and HealthNearMissesNoBeatYet by a
	// server that had not heartbeated yet (its first period).
	HealthNearMissesBeforeSteady int   `json:"health_near_misses_before_steady"`
	HealthNearMissesNoBeatYet    int   `json:"health_near_misses_no_beat_yet"`
	MaxMissedPeriods             int32 `json:"max_missed_periods"`
	FailureThreshold             int   `json:"failure_threshold"`
	// SlowHeartbeatCalls counts healthy processes' heartbeat calls that the
	// agent answered later than a heartbeat interval, and
	// SlowestHeartbeatCallMs is the longest: a process waits for its call,
	// so a held call is a beat the agent did not see in time.
	SlowHeartbeatCalls     int64   `json:"slow_heartbeat_calls"`
	SlowestHeartbeatCallMs float64 `json:"slowest_heartbeat_call_ms"`
	// LateHeartbeats counts heartbeat calls a process began more than a
	// health period after its last one (the simulator's own lateness: a
	// busy hosts process), and WidestHeartbeatGapMs is the widest gap.
	LateHeartbeats       int64   `json:"late_heartbeats"`
	WidestHeartbeatGapMs float64 `json:"widest_heartbeat_gap_ms"`

	PublishedByAgents int64  `json:"published_by_agents"` // counted as the agents appended them
	InStreamByAgents  int64  `json:"in_stream_by_agents"` // counted in the stream by producer
	AppliedByAgents   int64  `json:"applied_by_agents"`   // counted in the projector's events table
	InStream          uint64 `json:"in_stream"`           // every event, whoever produced it
	Applied           int64  `json:"applied"`
	DeadLetters       int64  `json:"dead_letters"`
	// Archived and ArchivedByAgents count the events that left the stream
	// and the events table for the archive (with Options.Retention).
	Archived         int64 `json:"archived"`
	ArchivedByAgents int64 `json:"archived_by_agents"`

	// Storage samples what the run stores every Options.StorageEvery of the
	// steady phase (storage.go), and once more at rest with retention.
	Storage []StorageSample `json:"storage"`
	// Retention is the archive's figures; nil without Options.Retention.
	Retention *RetentionReport `json:"retention,omitempty"`

	Tables          []TableSize      `json:"tables"`
	Streams         []StreamSize     `json:"streams"`
	HeapPeak        map[string]int64 `json:"heap_peak_bytes"`        // Go heap in use, by component, peak of the samples (every 30 s)
	ProcessPeakRSS  int64            `json:"process_peak_rss_bytes"` // this process (everything but PostgreSQL)
	PostgresPeakPSS int64            `json:"postgres_peak_pss_bytes"`

	// CPU is where the steady phase's CPU went, by component; CPUError
	// says why it is missing (another CPU profile was running).
	CPU      *CPUReport `json:"cpu,omitempty"`
	CPUError string     `json:"cpu_error,omitempty"`

	// Demand is demand mode's capacity report; nil in other runs.
	Demand *DemandReport `json:"demand,omitempty"`

	// Failures lists what made the run fail (lost events, false
	// terminations, missed detections, a system that did not settle).
	Failures []string `json:"failures"`
}

// Latency summarises durations in milliseconds.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// TableSize is one projection table.
type TableSize struct {
	Name  string `json:"name"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// StreamSize is one JetStream stream.
type StreamSize struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	Subjects uint64 `json:"subjects"`
}

func summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return Latency{N: len(s), P50: ms(at(0.50)), P99: ms(at(0.99)), Max: ms(s[len(s)-1])}
}

// bucketed prints a Latency read from a histogram: each figure is a bucket's
// upper bound, negative for "more than" the last.
func bucketed(l Latency) string {
	if l.N == 0 {
		return "not measured"
	}
	b := func(v float64) string {
		if v < 0 {
			return fmt.Sprintf("> %.1f ms", -v)
		}
		return fmt.Sprintf("≤ %.1f ms", v)
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d; to bucket precision)", b(l.P50), b(l.P99), b(l.Max), l.N)
}

// OK reports whether the run found nothing wrong.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

// Print writes the report as tables.
func (r *Report) Print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k string, v string, args ...any) { fmt.Fprintf(tw, "%s\t"+v+"\n", append([]any{k}, args...)...) }
	lat := func(l Latency) string {
		return fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms (n=%d)", l.P50, l.P99, l.Max, l.N)
	}
	fmt.Fprintln(tw, "SCALE\t")
	if r.Demand != nil {
		row("slots / hosts / fleets", "%d / %d / %d (servers as the autoscaler decides)", r.GameServers, r.Hosts, r.Fleets)
	} else {
		row("game servers / hosts / fleets", "%d / %d / %d", r.GameServers, r.Hosts, r.Fleets)
	}
	row("all READY after", "%.1f s (%.0f events/s while coming up)", r.ReadySeconds, r.StartupEventsPerSecond)
	row("steady phase", "%.0f s, %d events, %.0f events/s", r.SteadySeconds, r.SteadyEvents, r.EventsPerSecond)
	row("publish→view lag", "%s", lat(r.ProjectionLag))
	if len(r.SlowestLag) > 0 {
		var parts []string
		for _, t := range r.SlowestLag {
			parts = append(parts, fmt.Sprintf("%.0f ms at %s", t.Ms, t.At.UTC().Format("15:04:05.000")))
		}
		row("  slowest samples", "%s", strings.Join(parts, ", "))
	}
	passMax := fmt.Sprintf("max ≤ %.0f ms", r.ControllerPassMaxMs)
	if r.ControllerPassMaxMs < 0 {
		passMax = fmt.Sprintf("max > %.0f ms", -r.ControllerPassMaxMs)
	}
	row("controller pass (all fleets)", "mean %.0f ms, %s (%d passes)", r.ControllerPassMeanMs, passMax, r.ControllerPasses)
	row("allocation latency", "%s", lat(r.AllocationLatency))
	row("  as the API served it", "%s", bucketed(r.AllocationServed))
	row("allocations", "%d ok, %d no READY server, %d errors", r.Allocations, r.NoReadyServer, r.AllocationErrors)
	row("reconnect latency", "%s", lat(r.ReconnectLatency))
	row("players", "%d joined, %d dropped, %d rejoined, %d left; %d errors", r.PlayersJoined, r.PlayersDropped, r.PlayersRejoined, r.PlayersLeft, r.PlayerErrors)
	row("matches", "%d played to the end, %d cut short (a failed server or player call), %d not started (too many in flight)", r.MatchesEnded, r.MatchesLost, r.MatchesSkipped)
	fmt.Fprintln(tw, "\t")
	if r.Demand != nil {
		r.Demand.print(tw, row)
	}
	fmt.Fprintln(tw, "FAULTS\t")
	row("injected", "%d crashes, %d hangs, %d SDK resets, %d host partitions, %d slow starts", r.Crashes, r.Hangs, r.Flaps, r.Partitions, r.SlowStarts)
	row("crash detection", "%s", lat(r.CrashDetection))
	row("hang detection", "%s; bound %.0f ms", lat(r.HangDetection), r.HangBoundMs)
	row("SDK calls refused", "%d", r.SDKErrors)
	row("missed detections", "%d", r.MissedDetections)
	row("false terminations", "%d", r.FalseTerminations)
	row("healthy servers' missed heartbeats", "%d reports (%d before the steady phase, %d before a first heartbeat), at most %d periods in a row (threshold %d)",
		r.HealthNearMisses, r.HealthNearMissesBeforeSteady, r.HealthNearMissesNoBeatYet, r.MaxMissedPeriods, r.FailureThreshold)
	row("heartbeat calls held past an interval", "%d, the longest %.0f ms", r.SlowHeartbeatCalls, r.SlowestHeartbeatCallMs)
	row("heartbeats sent over a period late", "%d, the widest gap %.0f ms", r.LateHeartbeats, r.WidestHeartbeatGapMs)
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "EVENTS\t")
	row("published by simulated agents", "%d", r.PublishedByAgents)
	row("in the stream, by agents", "%d", r.InStreamByAgents)
	row("applied by the projector, by agents", "%d", r.AppliedByAgents)
	row("in the stream / applied, all producers", "%d / %d (%d dead letters)", r.InStream, r.Applied, r.DeadLetters)
	if rt := r.Retention; rt != nil {
		row("archived (all producers / by agents)", "%d / %d", r.Archived, r.ArchivedByAgents)
		fmt.Fprintln(tw, "\t")
		fmt.Fprintln(tw, "RETENTION\t")
		row("retention / archive interval", "%s / %s", time.Duration(rt.Retention*float64(time.Second)), time.Duration(rt.ArchiveInterval*float64(time.Second)))
		row("archive at the audit", "%d segments, %s, %d aggregates (%d game servers, %d game sessions), %d events",
			rt.Segments, mib(rt.Bytes), rt.Aggregates, rt.GameServers, rt.GameSessions, rt.Events)
		if rt.Events > 0 {
			row("archive per event", "%.0f B", float64(rt.Bytes)/float64(rt.Events))
		}
		if rt.SettledSeconds >= 0 {
			row("only live aggregates left", "%.1f s after the audit", rt.SettledSeconds)
		} else {
			row("only live aggregates left", "not reached")
		}
	}
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "SIZES\t")
	for _, s := range r.Streams {
		row("stream "+s.Name, "%d messages, %s, %d subjects", s.Messages, mib(int64(s.Bytes)), s.Subjects)
	}
	for _, t := range r.Tables {
		row("table "+t.Name, "%d rows, %s", t.Rows, mib(t.Bytes))
	}
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "MEMORY (peak)\t")
	keys := make([]string, 0, len(r.HeapPeak))
	for k := range r.HeapPeak {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(r.HeapPeak[b] - r.HeapPeak[a]) })
	for _, k := range keys {
		row("Go heap: "+k, "%s", mib(r.HeapPeak[k]))
	}
	row("tether process RSS", "%s", mib(r.ProcessPeakRSS))
	row("PostgreSQL (PSS, all processes)", "%s", mib(r.PostgresPeakPSS))
	if r.CPU != nil {
		r.CPU.print(tw, row, r.CPUError)
	}
	tw.Flush()
	if len(r.Storage) > 0 {
		fmt.Fprintln(out, "\nSTORAGE (time since the steady phase began)")
		printStorage(out, r.Storage)
	}
	if r.OK() && r.Demand != nil {
		rollout := ""
		if r.Demand.Rollout.Started {
			rollout = " the rollout completed,"
		}
		fmt.Fprintf(out, "\nresult: OK: no lost events, no false terminations,%s no server with a match stopped\n", rollout)
		return
	}
	if r.OK() {
		fmt.Fprintln(out, "\nresult: OK: no lost events, no false terminations, every injected fault detected")
		return
	}
	fmt.Fprintln(out, "\nresult: FAILED")
	for _, f := range r.Failures {
		fmt.Fprintln(out, "  -", f)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
