package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// With Retention, the archiver takes the histories of ended game servers
// and game sessions out of the stream and the views while the simulation
// runs. The audit then holds the archive lock (no pass runs while it
// counts) and reads the archive's segments as well: every event the agents
// published must be in the stream or in the archive, once, and a game
// server that ended is judged from its archived history when its view row
// is gone.

// RetentionReport is what the archive held at the audit and how the
// retention phase ended. Sizes are bytes.
type RetentionReport struct {
	Retention       float64 `json:"retention_seconds"`
	ArchiveInterval float64 `json:"archive_interval_seconds"`
	// Segments, Aggregates, Events and Bytes are the archive's, as its
	// segments hold them (read back at the audit).
	Segments   int   `json:"segments"`
	Aggregates int   `json:"aggregates"`
	Events     int64 `json:"events"`
	Bytes      int64 `json:"bytes"`
	// GameServers and GameSessions count the archived aggregates by kind.
	GameServers  int `json:"game_servers"`
	GameSessions int `json:"game_sessions"`
	// ByAgents counts the archived events the simulated agents published.
	ByAgents int64 `json:"by_agents"`
	// SettledSeconds is how long after the audit the stream and the views
	// came to hold only live aggregates (every ended one archived); -1 if
	// they did not within the retention phase's deadline.
	SettledSeconds float64 `json:"settled_seconds"`
}

// archiveDir is the directory the archiver writes to; empty when the run
// does not archive.
func (w *world) archiveDir() string {
	if w.opts.Retention <= 0 {
		return ""
	}
	return w.opts.ArchiveDir
}

// holdArchive takes the archive lock for the audit, once no segment is
// left unfinished (a failed pass's is finished by the next pass), and
// returns its release; a run that does not archive takes nothing. It
// waits at most timeout.
func (w *world) holdArchive(ctx context.Context, timeout time.Duration) (func(), error) {
	if w.archiveDir() == "" {
		return func() {}, nil
	}
	deadline := time.Now().Add(timeout)
	var last error
	for {
		release, err := postgres.LockArchiving(ctx, w.stack.Pool)
		switch {
		case err == nil:
			var open int
			err = w.stack.Pool.QueryRow(ctx, `SELECT count(*) FROM archive_segments WHERE state <> 'DONE'`).Scan(&open)
			if err == nil && open == 0 {
				return release, nil
			}
			release()
			if err == nil {
				err = fmt.Errorf("%d archive segments not done", open)
			}
			last = err
		case errors.Is(err, postgres.ErrArchiveBusy):
			last = err
		default:
			return nil, fmt.Errorf("sim: archive lock: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("sim: the archive did not come to rest in %s: %w", timeout, last)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// archived is what the archive's segments hold, for the audit.
type archived struct {
	report RetentionReport
	// servers are the archived game servers' last states.
	servers map[string]*eventsv1.GameServerState
	// first holds the earliest time of each event type the audit looks
	// for (GameServerTerminated, GameServerUnhealthy), by aggregate.
	first map[string]map[string]time.Time
	// degraded are the archived HealthDegraded events: the server and the
	// periods it had missed.
	degraded []degradedEvent
}

// degradedEvent is a missed-heartbeat report.
type degradedEvent struct {
	server string
	missed int32
}

// firstTime returns the earliest time of an event type in an archived
// aggregate's history.
func (a *archived) firstTime(aggregate, typ string) (time.Time, bool) {
	t, ok := a.first[aggregate][typ]
	return t, ok
}

// readArchive reads every segment the catalog records done, checks each
// against its catalog row, and folds the archived game servers' histories.
// The caller holds the archive lock.
func (w *world) readArchive(ctx context.Context) (*archived, error) {
	a := &archived{servers: map[string]*eventsv1.GameServerState{}, first: map[string]map[string]time.Time{}}
	a.report.Retention, a.report.ArchiveInterval = w.opts.Retention.Seconds(), w.opts.ArchiveInterval.Seconds()
	if w.archiveDir() == "" {
		return a, nil
	}
	store, err := archive.NewDir(w.archiveDir())
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	rows, err := w.stack.Pool.Query(ctx, `SELECT name, aggregates, events, bytes FROM archive_segments WHERE state = 'DONE' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sim: read the archive catalog: %w", err)
	}
	type segRow struct {
		name               string
		aggregates, events int64
		bytes              int64
	}
	var segs []segRow
	for rows.Next() {
		var s segRow
		if err := rows.Scan(&s.name, &s.aggregates, &s.events, &s.bytes); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sim: read the archive catalog: %w", err)
		}
		segs = append(segs, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sim: read the archive catalog: %w", err)
	}
	for _, s := range segs {
		if err := a.readSegment(ctx, store, s.name); err != nil {
			return nil, err
		}
	}
	var catalogAggs, catalogEvents, catalogBytes int64
	for _, s := range segs {
		catalogAggs, catalogEvents, catalogBytes = catalogAggs+s.aggregates, catalogEvents+s.events, catalogBytes+s.bytes
	}
	if catalogAggs != int64(a.report.Aggregates) || catalogEvents != a.report.Events || catalogBytes != a.report.Bytes {
		return nil, fmt.Errorf("sim: the archive catalog records %d aggregates, %d events, %d bytes in %d segments; the segments hold %d, %d, %d",
			catalogAggs, catalogEvents, catalogBytes, len(segs), a.report.Aggregates, a.report.Events, a.report.Bytes)
	}
	return a, nil
}

// readSegment reads one segment into the tally.
func (a *archived) readSegment(ctx context.Context, store archive.SegmentStore, name string) error {
	r, err := archive.OpenSegment(ctx, store, name)
	if err != nil {
		return fmt.Errorf("sim: open archive segment %s: %w", name, err)
	}
	defer func() { _ = r.Close() }() // read only
	a.report.Segments++
	a.report.Bytes += r.Size()
	for agg, err := range r.All() {
		if err != nil {
			return fmt.Errorf("sim: read archive segment %s: %w", name, err)
		}
		a.report.Aggregates++
		kind := events.KindOf(agg.Subject)
		switch kind {
		case events.KindGameServer:
			a.report.GameServers++
		case events.KindGameSession:
			a.report.GameSessions++
		}
		var state *eventsv1.GameServerState
		for _, rec := range agg.Records {
			env, err := events.Unmarshal(rec.Data)
			if err != nil {
				return fmt.Errorf("sim: archive segment %s, event %d: %w", name, rec.Sequence, err)
			}
			env.Sequence = rec.Sequence
			a.report.Events++
			if strings.HasPrefix(env.Producer, "hosts/") {
				a.report.ByAgents++
			}
			if kind != events.KindGameServer {
				continue
			}
			if state, err = events.ApplyGameServer(state, env); err != nil {
				return fmt.Errorf("sim: archive segment %s: fold %s at %d: %w", name, env.Aggregate, rec.Sequence, err)
			}
			switch d := env.Data.(type) {
			case *eventsv1.GameServerTerminated, *eventsv1.GameServerUnhealthy:
				byType := a.first[env.Aggregate]
				if byType == nil {
					byType = map[string]time.Time{}
					a.first[env.Aggregate] = byType
				}
				if t, ok := byType[env.Type]; !ok || env.Time.Before(t) {
					byType[env.Type] = env.Time
				}
			case *eventsv1.HealthDegraded:
				a.degraded = append(a.degraded, degradedEvent{server: env.Aggregate, missed: d.GetMissedPeriods()})
			}
		}
		if state != nil {
			a.servers[state.GetName()] = state
		}
	}
	return nil
}

// awaitRetention waits, after the audit, until the stream and the views
// hold live aggregates only: every game server that terminated and every
// game session that ended during the run has been archived (the system is
// at rest, so each is past the retention window once the window has
// passed), every game server left is READY, and the stream has one
// subject per hosts, fleets, game servers and game sessions row. It
// returns how long that took, or an error after timeout.
func (w *world) awaitRetention(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	began := time.Now()
	deadline := began.Add(timeout)
	var last string
	for {
		var left, live int64
		err := w.stack.Pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM game_servers WHERE state <> 'READY') + (SELECT count(*) FROM game_sessions),
  (SELECT count(*) FROM hosts) + (SELECT count(*) FROM fleets) + (SELECT count(*) FROM game_servers) + (SELECT count(*) FROM game_sessions)`).Scan(&left, &live)
		if err != nil {
			return 0, fmt.Errorf("sim: retention: %w", err)
		}
		subjects, err := w.streamSubjects(ctx)
		if err != nil {
			return 0, fmt.Errorf("sim: retention: %w", err)
		}
		if left == 0 && subjects == uint64(live) {
			return time.Since(began), nil
		}
		last = fmt.Sprintf("%d game servers not READY and game sessions still in the views; %d subjects in the stream for %d rows", left, subjects, live)
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("not archived within %s: %s", timeout, last)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// streamSubjects is the events stream's subject count.
func (w *world) streamSubjects(ctx context.Context) (uint64, error) {
	s, err := w.stack.JetStream.Stream(ctx, events.StreamName)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.NumSubjects, nil
}
