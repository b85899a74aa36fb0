package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// controllerPassMetric is the controller's pass-duration histogram.
const controllerPassMetric = "tether_controller_pass_duration_seconds"

// run carries out the phases and the audit.
func (w *world) run(ctx context.Context) (*Report, error) {
	o := w.opts
	total := o.Hosts * o.ServersPerHost
	rep := &Report{Hosts: o.Hosts, GameServers: total, Fleets: o.Fleets, ControlPlaneApart: w.controlPlanePID > 0}
	var mem memory
	memCtx, stopMem := context.WithCancel(ctx)
	defer stopMem()
	var bg sync.WaitGroup
	bg.Go(func() { mem.run(memCtx) })

	// Phase 1: fleets come up.
	began := time.Now()
	startSeq, err := w.stack.Store.StreamLastSequence(ctx)
	if err != nil {
		return nil, err
	}
	target := w.readyTarget()
	if err := w.create(ctx); err != nil {
		return nil, err
	}
	if err := w.waitFor(ctx, o.ReadyTimeout, func(s reading) bool { return s.ready == target }); err != nil {
		return nil, fmt.Errorf("sim: the fleets did not come up: %w", err)
	}
	rep.ReadySeconds = time.Since(began).Seconds()
	readySeq, err := w.stack.Store.StreamLastSequence(ctx)
	if err != nil {
		return nil, err
	}
	rep.StartupEventsPerSecond = float64(readySeq-startSeq) / rep.ReadySeconds
	fmt.Fprintf(o.Progress, "all %d servers READY after %.1f s\n", target, rep.ReadySeconds)

	// Phase 2: steady state with misbehaviour and matches.
	// The control plane's own figures: from this process's meters, or
	// from a control plane apart, which reads its own at the signals.
	var metersBefore meterReading
	if w.controlPlanePID > 0 {
		err = removeSteadyFigures(o.ControlPlaneDir)
	} else {
		metersBefore, err = w.readMeters(ctx)
	}
	if err != nil {
		return nil, err
	}
	lag, slowLag := &latencies{}, &slowSamples{keep: 5}
	w.spans.reset()
	cpu := startCPU(w.controlPlanePID)
	w.signalControlPlane(signalSteadyBegins)
	steadyCtx, endSteady := context.WithTimeout(ctx, o.Duration)
	steadyBegan := time.Now()
	var steady sync.WaitGroup
	if w.demand != nil {
		w.demand.steadyBegan = steadyBegan
		steady.Go(func() { w.rollout(steadyCtx) })
	} else {
		fmt.Fprintf(o.Progress, "steady phase: %s of faults, matches and players\n", o.Duration)
	}
	steady.Go(func() { w.injectFaults(steadyCtx) })
	steady.Go(func() { w.mm.run(steadyCtx) })
	steady.Go(func() { w.sampleLag(steadyCtx, lag, slowLag) })
	steady.Go(func() { w.progress(steadyCtx, "steady") })
	steady.Go(func() { w.sampleStorage(steadyCtx, steadyBegan, &rep.Storage) })
	steady.Wait()
	endSteady()
	w.signalControlPlane(signalSteadyEnds)
	if rep.CPU, err = cpu.stop(o.CPUProfile); err != nil {
		rep.CPUError = err.Error() // no shares (another profile was running); the rest stands
	}
	if n := len(rep.Storage); n == 0 || time.Since(steadyBegan).Seconds()-rep.Storage[n-1].Seconds > o.StorageEvery.Seconds()/4 {
		w.addStorageSample(ctx, steadyBegan, "steady", &rep.Storage)
	}
	if w.demand != nil {
		w.demand.steadyEnded = steadyBegan.Add(o.Duration)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.SteadySeconds = time.Since(steadyBegan).Seconds()
	steadySeq, err := w.stack.Store.StreamLastSequence(ctx)
	if err != nil {
		return nil, err
	}
	rep.SteadyEvents = steadySeq - readySeq
	rep.EventsPerSecond = float64(rep.SteadyEvents) / rep.SteadySeconds
	rep.ProjectionLag = lag.summary()
	rep.SlowestLag = slowLag.list()
	var cp ControlPlaneFigures
	if w.controlPlanePID > 0 {
		if cp, err = awaitSteadyFigures(ctx, o.ControlPlaneDir, steadyFileWait); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			rep.Failures = append(rep.Failures, "the control plane's own figures: "+err.Error())
		}
	} else {
		metersAfter, err := w.readMeters(ctx)
		if err != nil {
			return nil, err
		}
		cp = metersAfter.since(metersBefore)
	}
	rep.ControllerPasses, rep.ControllerPassMeanMs, rep.ControllerPassMaxMs = cp.ControllerPasses, cp.ControllerPassMeanMs, cp.ControllerPassMaxMs
	rep.AllocationServed = cp.AllocationServed
	w.spans.print(o.Progress)

	// Phase 3: settle.
	fmt.Fprintln(o.Progress, "settling: matches finish, partitions heal, failed servers are replaced")
	w.mm.wait()
	w.partitions.Wait()
	injected, flapped, ended, cuts := w.faults.snapshot()
	settleErr := w.waitFor(ctx, o.SettleTimeout, func(s reading) bool {
		return s.ready == target && s.caughtUp && w.allEnded(ctx, injected) && w.rolloutSettled(ctx)
	})
	if settleErr != nil {
		rep.Failures = append(rep.Failures, "did not settle: "+settleErr.Error())
	}
	stopMem()
	bg.Wait()

	// Phase 4: audit.
	fmt.Fprintln(o.Progress, "auditing the stream and the views")
	if err := w.audit(ctx, rep, injected, flapped, ended, steadyBegan); err != nil {
		return nil, err
	}

	// Phase 5, with retention: the archive catches up with the ended
	// aggregates, leaving the stream and the views with live ones only.
	if w.archiveDir() != "" {
		timeout := o.Retention + 3*o.ArchiveInterval + 2*time.Minute
		fmt.Fprintf(o.Progress, "retention: waiting (at most %s) for every ended game server and session to be archived\n", timeout)
		took, err := w.awaitRetention(ctx, timeout)
		rep.Retention.SettledSeconds = took.Seconds()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			rep.Retention.SettledSeconds = -1
			rep.Failures = append(rep.Failures, "retention: "+err.Error())
		}
		w.addStorageSample(ctx, steadyBegan, "rest", &rep.Storage)
	}
	rep.Partitions = cuts
	rep.SlowStarts = w.count.slowStarts.Load()
	rep.SDKErrors = w.count.sdkErrors.Load()
	rep.SlowHeartbeatCalls = w.count.slowBeats.Load()
	rep.SlowestHeartbeatCallMs = float64(w.count.slowestBeat.Load()) / 1e6
	rep.LateHeartbeats = w.count.beatGaps.Load()
	rep.WidestHeartbeatGapMs = float64(w.count.widestGap.Load()) / 1e6
	mm := w.mm
	rep.Allocations, rep.AllocationErrors, rep.NoReadyServer = mm.allocated.Load(), mm.allocErrors.Load(), mm.noServer.Load()
	rep.AllocationLatency, rep.ReconnectLatency = mm.allocLatency.summary(), mm.reconnectLatency.summary()
	rep.PlayersJoined, rep.PlayersDropped, rep.PlayersRejoined, rep.PlayersLeft = mm.joined.Load(), mm.dropped.Load(), mm.rejoined.Load(), mm.left.Load()
	rep.MatchesEnded, rep.MatchesLost, rep.PlayerErrors = mm.matchesEnded.Load(), mm.matchesLost.Load(), mm.playerErrors.Load()
	rep.MatchesSkipped = mm.skipped.Load()
	if s, ok := mm.lastErr.Load().(string); ok {
		rep.LastPlayerError = s
	}
	if rep.AllocationErrors > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d allocations failed with an error (last: %s)", rep.AllocationErrors, rep.LastPlayerError))
	}
	if rep.PlayerErrors > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d player calls failed on healthy servers (last: %s)", rep.PlayerErrors, rep.LastPlayerError))
	}
	if w.demand != nil {
		if err := w.measureDemand(ctx, rep); err != nil {
			return nil, err
		}
	}
	mem.mu.Lock()
	rep.HeapPeak, rep.PostgresPeakPSS = mem.heapPeak, mem.pgPeak
	mem.mu.Unlock()
	rep.ProcessPeakRSS = peakRSS()
	if rep.Tables, err = w.tableSizes(ctx); err != nil {
		return nil, err
	}
	if rep.Streams, err = w.streamSizes(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// reading is a reading of the views.
type reading struct {
	ready, live int
	caughtUp    bool
	stream, cp  uint64
}

func (w *world) status(ctx context.Context) (reading, error) {
	var s reading
	err := w.stack.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'READY'), count(*) FILTER (WHERE state <> 'TERMINATED') FROM game_servers`).Scan(&s.ready, &s.live)
	if err != nil {
		return s, err
	}
	if s.stream, err = w.stack.Store.StreamLastSequence(ctx); err != nil {
		return s, err
	}
	if s.cp, err = w.checkpoint(ctx); err != nil {
		return s, err
	}
	s.caughtUp = s.cp >= s.stream
	return s, nil
}

// waitFor polls the views every 500 ms until done holds, printing progress
// every ProgressEvery, for at most timeout.
func (w *world) waitFor(ctx context.Context, timeout time.Duration, done func(reading) bool) error {
	deadline := time.Now().Add(timeout)
	lastPrint := time.Now()
	var last reading
	var lastErr error
	for {
		s, err := w.status(ctx)
		if err == nil {
			last, lastErr = s, nil
			if done(s) {
				return nil
			}
		} else if ctx.Err() != nil {
			return ctx.Err()
		} else {
			lastErr = err
		}
		select {
		case <-w.stackDone:
			return fmt.Errorf("the control plane stopped: %w", w.stackErr)
		default:
		}
		if time.Since(lastPrint) >= w.opts.ProgressEvery {
			fmt.Fprintf(w.opts.Progress, "  %d READY, %d live, stream at %d, views at %d\n", last.ready, last.live, last.stream, last.cp)
			if lastErr != nil {
				fmt.Fprintf(w.opts.Progress, "  (could not read the status: %v)\n", lastErr)
			}
			lastPrint = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still %d READY of %d live, views at %d of %d after %s", last.ready, last.live, last.cp, last.stream, timeout)
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// progress prints a status line every ProgressEvery until ctx ends.
func (w *world) progress(ctx context.Context, phase string) {
	t := time.NewTicker(w.opts.ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := w.status(ctx)
		if err != nil {
			if ctx.Err() == nil { // not merely the phase ending mid-read
				fmt.Fprintf(w.opts.Progress, "  %s: could not read the status: %v\n", phase, err)
			}
			continue
		}
		fmt.Fprintf(w.opts.Progress, "  %s: %d READY, %d live, stream at %d, views at %d; %d matches allocated, %d refused\n",
			phase, s.ready, s.live, s.stream, s.cp, w.mm.allocated.Load(), w.mm.noServer.Load())
	}
}

// allEnded reports whether every server given a crash or hang is
// TERMINATED in the views.
func (w *world) allEnded(ctx context.Context, injected map[string]injection) bool {
	if len(injected) == 0 {
		return true
	}
	names := make([]string, 0, len(injected))
	for n := range injected {
		names = append(names, n)
	}
	var open int
	err := w.stack.Pool.QueryRow(ctx, `SELECT count(*) FROM game_servers WHERE name = ANY($1) AND state <> 'TERMINATED'`, names).Scan(&open)
	return err == nil && open == 0
}

// expectedReasons are the reasons a server may end with, by what the
// simulation did to it.
var expectedReasons = map[fault][]string{
	faultCrash: {"PROCESS_EXITED"},
	faultHang:  {"HEALTH_CHECK_FAILED"},
}

// audit counts events three ways and judges every server that ended.
func (w *world) audit(ctx context.Context, rep *Report, injected map[string]injection, flapped map[string]int, ended map[string]time.Time, steadyBegan time.Time) error {
	pool := w.stack.Pool
	// No archiving pass runs while the audit counts: the stream, the
	// events table and the archive hold each event exactly once.
	release, err := w.holdArchive(ctx, 2*time.Minute)
	if err != nil {
		return err
	}
	defer release()
	arch, err := w.readArchive(ctx)
	if err != nil {
		return err
	}
	if w.archiveDir() != "" {
		rep.Retention = &arch.report
	}
	// The count is taken while nothing publishes (a settled system's agents
	// only beat, outside the stream); it is taken again if the agents'
	// tally moved meanwhile.
	for range 5 {
		published := w.count.published.Load()
		last, err := w.stack.Store.StreamLastSequence(ctx)
		if err != nil {
			return err
		}
		if err := w.waitApplied(ctx, last); err != nil {
			return err
		}
		if rep.InStream, rep.InStreamByAgents, err = w.countStream(ctx, last); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE producer LIKE 'hosts/%') FROM events WHERE sequence <= $1`, int64(last)).
			Scan(&rep.Applied, &rep.AppliedByAgents); err != nil {
			return fmt.Errorf("sim: count applied events: %w", err)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE sequence <= $1`, int64(last)).Scan(&rep.DeadLetters); err != nil {
			return fmt.Errorf("sim: count dead letters: %w", err)
		}
		rep.PublishedByAgents = published
		if w.count.published.Load() == published {
			break
		}
	}
	rep.Archived, rep.ArchivedByAgents = arch.report.Events, arch.report.ByAgents
	if rep.PublishedByAgents != rep.InStreamByAgents+rep.ArchivedByAgents || rep.InStreamByAgents != rep.AppliedByAgents {
		rep.Failures = append(rep.Failures, fmt.Sprintf("lost events: agents published %d, the stream holds %d of theirs and the archive %d, the projector applied %d of those in the stream",
			rep.PublishedByAgents, rep.InStreamByAgents, rep.ArchivedByAgents, rep.AppliedByAgents))
	}
	if int64(rep.InStream) != rep.Applied+rep.DeadLetters {
		rep.Failures = append(rep.Failures, fmt.Sprintf("the stream holds %d events, the projector applied %d (+%d dead letters)", rep.InStream, rep.Applied, rep.DeadLetters))
	}

	// Every server that ended or is failing, against what was done to it.
	rows, err := pool.Query(ctx, `SELECT name, state, reason, update_time FROM game_servers WHERE state IN ('UNHEALTHY', 'SHUTTING_DOWN', 'TERMINATED')`)
	if err != nil {
		return fmt.Errorf("sim: read ended servers: %w", err)
	}
	defer rows.Close()
	var falses []string
	judged := map[string]bool{}
	rampFalses := 0
	// judge checks why a server ended; at is when its row last changed
	// (zero for an archived one).
	judge := func(name, state, reason string, at time.Time) {
		judged[name] = true
		var want []string
		if inj, ok := injected[name]; ok {
			want = expectedReasons[inj.kind]
		} else if _, ok := ended[name]; ok {
			want = []string{"SHUTDOWN_REQUESTED_BY_GAME"}
		} else if w.demand != nil {
			// The autoscaler and the rollout stop servers without a match
			// (that none had one is checked from the history: capacity.go).
			want = []string{"FLEET_SCALED_DOWN", "FLEET_UPDATED"}
		}
		if !slices.Contains(want, reason) {
			rep.FalseTerminations++
			when := ""
			if !at.IsZero() {
				when = fmt.Sprintf(", at %+.0f s of the steady phase", at.Sub(steadyBegan).Seconds())
				if at.Before(steadyBegan) {
					rampFalses++
				}
			}
			if len(falses) < 10 {
				falses = append(falses, fmt.Sprintf("%s %s %s (SDK resets: %d%s)", name, state, reason, flapped[name], when))
			}
		}
	}
	for rows.Next() {
		var name, state, reason string
		var at time.Time
		if err := rows.Scan(&name, &state, &reason, &at); err != nil {
			return err
		}
		judge(name, state, reason, at)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// The archived ones: gone from the views, judged by their histories.
	for name, st := range arch.servers {
		if !judged[name] {
			judge(name, events.LifecycleName(st.GetLifecycle()), events.ReasonName(st.GetReason()), time.Time{})
		}
	}
	if rep.FalseTerminations > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d false terminations (%d of them before the steady phase), e.g. %s", rep.FalseTerminations, rampFalses, strings.Join(falses, "; ")))
	}

	// Detection: each injected fault against the event that recorded it.
	var crashes, hangs []time.Duration
	for name, inj := range injected {
		typ := "GameServerTerminated"
		if inj.kind == faultHang {
			typ = "GameServerUnhealthy"
			rep.Hangs++
		} else {
			rep.Crashes++
		}
		var at *time.Time
		if err := pool.QueryRow(ctx, `SELECT min(occur_time) FROM events WHERE aggregate = $1 AND type = $2`, name, typ).Scan(&at); err != nil {
			return fmt.Errorf("sim: read the detection of %s: %w", name, err)
		}
		if at == nil {
			if t, ok := arch.firstTime(name, typ); ok {
				at = &t
			}
		}
		if at == nil || at.IsZero() {
			rep.MissedDetections++
			continue
		}
		if inj.kind == faultHang {
			hangs = append(hangs, at.Sub(inj.at))
		} else {
			crashes = append(crashes, at.Sub(inj.at))
		}
	}
	for _, n := range flapped {
		rep.Flaps += n
	}
	rep.CrashDetection, rep.HangDetection = summarize(crashes), summarize(hangs)
	rep.HangBoundMs = float64((w.opts.HealthPeriod*time.Duration(w.opts.FailureThreshold) + time.Second).Milliseconds())
	if rep.MissedDetections > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d injected faults never detected", rep.MissedDetections))
	}
	rep.FailureThreshold = w.opts.FailureThreshold
	for _, d := range arch.degraded {
		if inj, ok := injected[d.server]; ok && inj.kind == faultHang {
			continue
		}
		rep.HealthNearMisses++
		rep.MaxMissedPeriods = max(rep.MaxMissedPeriods, d.missed)
	}
	return w.nearMisses(ctx, rep, injected, steadyBegan)
}

// nearMisses counts the missed-heartbeat reports of servers that were given
// no hang: a healthy process late with its heartbeats (a starved machine, an
// SDK reset) and how many periods it missed.
func (w *world) nearMisses(ctx context.Context, rep *Report, injected map[string]injection, steadyBegan time.Time) error {
	rows, err := w.stack.Pool.Query(ctx, `SELECT aggregate, envelope FROM events WHERE type = 'HealthDegraded'`)
	if err != nil {
		return fmt.Errorf("sim: read missed heartbeats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var raw []byte
		if err := rows.Scan(&name, &raw); err != nil {
			return fmt.Errorf("sim: read missed heartbeats: %w", err)
		}
		if inj, ok := injected[name]; ok && inj.kind == faultHang {
			continue
		}
		env, err := events.Unmarshal(raw)
		if err != nil {
			return fmt.Errorf("sim: missed heartbeats of %s: %w", name, err)
		}
		d, ok := env.Data.(*eventsv1.HealthDegraded)
		if !ok {
			return fmt.Errorf("sim: event HealthDegraded of %s holds %T", name, env.Data)
		}
		rep.HealthNearMisses++
		rep.MaxMissedPeriods = max(rep.MaxMissedPeriods, d.GetMissedPeriods())
		if env.Time.Before(steadyBegan) {
			rep.HealthNearMissesBeforeSteady++
		}
		if d.GetLastHeartbeatTime() == nil {
			rep.HealthNearMissesNoBeatYet++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sim: read missed heartbeats: %w", err)
	}
	return nil
}

// waitApplied waits (at most a minute) until the views include seq.
func (w *world) waitApplied(ctx context.Context, seq uint64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		cp, err := w.checkpoint(ctx)
		if err != nil {
			return err
		}
		if cp >= seq {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sim: the views stayed at %d, short of %d", cp, seq)
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// countStream reads the event stream up to sequence last and counts its
// events: all, and those the simulated agents produced. Archiving may
// have purged any of them, the last one included: the count ends at last,
// or at the last event the stream holds.
func (w *world) countStream(ctx context.Context, last uint64) (all uint64, byAgents int64, err error) {
	if last == 0 {
		return 0, 0, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	stream, err := w.stack.JetStream.Stream(rctx, events.StreamName)
	if err != nil {
		return 0, 0, fmt.Errorf("sim: read the stream: %w", err)
	}
	info, err := stream.Info(rctx)
	if err != nil {
		return 0, 0, fmt.Errorf("sim: read the stream: %w", err)
	}
	if info.State.Msgs == 0 || info.State.FirstSeq > last {
		return 0, 0, nil
	}
	cons, err := w.stack.JetStream.OrderedConsumer(rctx, events.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, 0, fmt.Errorf("sim: read the stream: %w", err)
	}
	for {
		batch, err := cons.Fetch(4096, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return 0, 0, fmt.Errorf("sim: read the stream: %w", err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return 0, 0, err
			}
			if md.Sequence.Stream > last {
				return all, byAgents, nil
			}
			all++
			e, err := events.Unmarshal(m.Data())
			if err != nil {
				return 0, 0, fmt.Errorf("sim: event %d: %w", md.Sequence.Stream, err)
			}
			if strings.HasPrefix(e.Producer, "hosts/") {
				byAgents++
			}
			if md.Sequence.Stream == last || md.NumPending == 0 {
				return all, byAgents, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return 0, 0, fmt.Errorf("sim: read the stream: %w", err)
		}
		if rctx.Err() != nil {
			return 0, 0, fmt.Errorf("sim: read the stream: %w", rctx.Err())
		}
	}
}
