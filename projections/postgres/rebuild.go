package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	"github.com/tetherhq/tether/projections"
)

// viewTables are the tables a rebuild replaces, in the order they are
// locked and moved: the checkpoint first (locking it is what pauses the
// live projector at a batch boundary), each registered aggregate's view,
// then the events and the dead letters.
var viewTables = func() []string {
	out := []string{"projector_checkpoints"}
	for _, v := range viewOrder() {
		out = append(out, v.tableName())
	}
	return append(out, "events", "dead_letters")
}()

// ErrReplayBusy is returned when another rebuild or check is running
// against the same database.
var ErrReplayBusy = errors.New("projections: another rebuild or check is running")

// replayLockKey is the advisory lock that lets one rebuild or check run at a time.
const replayLockKey = 0x7465_7468_6572 // "tether"

// RebuildPhase is the stage a rebuild is in.
type RebuildPhase string

// Rebuild phases, in order.
const (
	// PhasePrepare creates the fresh tables.
	PhasePrepare RebuildPhase = "PREPARE"
	// PhaseReplay replays the stream from sequence 1 up to its last
	// sequence as of the start.
	PhaseReplay RebuildPhase = "REPLAY"
	// PhaseCatchUp applies what was appended during the replay.
	PhaseCatchUp RebuildPhase = "CATCH_UP"
	// PhaseSwap pauses the live projector and swaps the tables in.
	PhaseSwap RebuildPhase = "SWAP"
	// PhaseDone: the rebuilt tables are the live views.
	PhaseDone RebuildPhase = "DONE"
)

// RebuildProgress reports how far a rebuild is.
type RebuildProgress struct {
	// Phase is the current stage.
	Phase RebuildPhase
	// Applied is the sequence the rebuilt tables have reached.
	Applied uint64
	// Target is the stream's last sequence: as of the start during REPLAY,
	// as last seen afterwards.
	Target uint64
	// Rate is the replay rate so far, in events per second.
	Rate float64
	// ETA estimates the time left to reach Target at Rate.
	ETA time.Duration
	// Elapsed is the time since the rebuild started.
	Elapsed time.Duration
}

// RebuildResult is what a finished rebuild did.
type RebuildResult struct {
	// Checkpoint is the sequence the swapped-in views had applied.
	Checkpoint uint64
	// Events is the number of stream events replayed.
	Events uint64
	// Duration is the whole rebuild, swap included.
	Duration time.Duration
	// Rate is the replay rate in events per second.
	Rate float64
	// SwapAttempts counts swap transactions tried (lock timeouts retry).
	SwapAttempts int
}

// ReplayOptions configure Rebuild and Check.
type ReplayOptions struct {
	// Pool is the PostgreSQL pool of the live views (required). Its
	// current schema is the one whose tables are rebuilt or checked.
	Pool *pgxpool.Pool
	// JetStream is the event store's JetStream context (required).
	JetStream jetstream.JetStream
	// Stream is the event stream; default events.StreamName.
	Stream string
	// Partition names the checkpoint row; default projections.Partition.
	Partition string
	// Schema is the scratch schema the replay writes; default
	// "tether_rebuild" for Rebuild, "tether_check" for Check. It is dropped
	// and created afresh.
	Schema string
	// BatchSize is the replay's batch size; default 4000.
	BatchSize int
	// Upcast is handed to the replaying projector (ProjectorOptions.Upcast).
	Upcast Upcaster
	// Verifier is handed to the replaying projector
	// (ProjectorOptions.Verifier): a replay must judge writers as the live
	// projector does.
	Verifier *natsjs.Verifier
	// Progress, when set, is called at most every ProgressInterval and at
	// each phase change, from the replaying goroutine.
	Progress func(RebuildProgress)
	// ProgressInterval; default 250ms.
	ProgressInterval time.Duration
	// SwapLockTimeout bounds how long the swap waits for readers' locks on
	// the live tables before it gives up and retries; default 500ms, below
	// PostgreSQL's deadlock_timeout, so a reader is never the deadlock victim.
	SwapLockTimeout time.Duration
	// SwapAttempts bounds the swap retries; default 20.
	SwapAttempts int
	// Logger; default discards.
	Logger *slog.Logger
}

func (o *ReplayOptions) setDefaults(schema string) {
	if o.Stream == "" {
		o.Stream = events.StreamName
	}
	if o.Partition == "" {
		o.Partition = projections.Partition
	}
	if o.Schema == "" {
		o.Schema = schema
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 4000
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 250 * time.Millisecond
	}
	if o.SwapLockTimeout <= 0 {
		o.SwapLockTimeout = 500 * time.Millisecond
	}
	if o.SwapAttempts <= 0 {
		o.SwapAttempts = 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o *ReplayOptions) validate() error {
	if o.Pool == nil {
		return errors.New("projections: replay: Pool is required")
	}
	if o.JetStream == nil {
		return errors.New("projections: replay: JetStream is required")
	}
	if !validSchema(o.Schema) {
		return fmt.Errorf("projections: replay: schema %q must be lowercase letters, digits and underscores", o.Schema)
	}
	return nil
}

func validSchema(s string) bool {
	if s == "" || len(s) > 50 || s == "public" {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// replay is a projector writing scratch tables from sequence 1, with its own
// pool (search_path = the scratch schema) and an ordered consumer.
type replay struct {
	opts    ReplayOptions
	live    string // the live views' schema
	release func() // advisory lock
	// indexes are the scratch tables' secondary indexes, created once the
	// replay is done: maintaining them row by row would slow it down.
	indexes []string
	pool    *pgxpool.Pool
	proj    *Projector
	feed    *feed
	start   time.Time
	last    time.Time // last progress report
}

// startReplay takes the replay lock, creates the scratch schema with empty
// copies of the live tables, and starts reading the stream from sequence 1.
func startReplay(ctx context.Context, opts ReplayOptions, stopOnPoison bool) (_ *replay, err error) {
	r := &replay{opts: opts, start: time.Now()}
	defer func() {
		if err != nil {
			r.close(context.WithoutCancel(ctx), true)
		}
	}()
	conn, err := opts.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("projections: replay: acquire: %w", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(replayLockKey)).Scan(&locked); err != nil || !locked {
		conn.Release()
		if err != nil {
			return nil, fmt.Errorf("projections: replay: lock: %w", err)
		}
		return nil, ErrReplayBusy
	}
	r.release = func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock_all()`); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // a closed session drops its locks
		}
		conn.Release()
	}
	// Archiving changes the stream and the views under a replay: wait for
	// an archiving pass to finish, and hold passes off until the replay is
	// done (LockArchiving).
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(archiveLockKey)); err != nil {
		return nil, fmt.Errorf("projections: replay: wait for the archiver: %w", err)
	}
	if err := opts.Pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&r.live); err != nil {
		return nil, fmt.Errorf("projections: replay: current schema: %w", err)
	}
	if r.indexes, err = createScratch(ctx, opts.Pool, r.live, opts.Schema); err != nil {
		return nil, err
	}
	if _, err := opts.Pool.Exec(ctx, `INSERT INTO `+opts.Schema+`.projector_checkpoints (partition, sequence) VALUES ($1, 0)`,
		opts.Partition); err != nil {
		return nil, fmt.Errorf("projections: replay: checkpoint: %w", err)
	}
	cfg := opts.Pool.Config()
	cfg.ConnConfig.RuntimeParams["search_path"] = opts.Schema
	cfg.MaxConns = 2
	if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("projections: replay: pool: %w", err)
	}
	if r.proj, err = NewProjector(ProjectorOptions{
		Pool: r.pool, JetStream: opts.JetStream, Stream: opts.Stream, Partition: opts.Partition,
		BatchSize: opts.BatchSize, Logger: opts.Logger, Scratch: true, StopOnPoison: stopOnPoison, Upcast: opts.Upcast,
		Verifier: opts.Verifier,
	}); err != nil {
		return nil, err
	}
	r.proj.HoldViews() // the scratch tables start empty: rows are written once, when the replay is done
	r.proj.ordered = true
	if r.feed, err = openFeed(ctx, opts.JetStream, opts.Stream, opts.BatchSize); err != nil {
		return nil, err
	}
	return r, nil
}

// close stops reading, closes the scratch pool, drops the scratch schema if
// asked and releases the replay lock.
func (r *replay) close(ctx context.Context, drop bool) {
	if r.feed != nil {
		r.feed.stop()
	}
	if r.pool != nil {
		r.pool.Close()
	}
	if drop && r.live != "" {
		if _, err := r.opts.Pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+r.opts.Schema+` CASCADE`); err != nil {
			r.opts.Logger.Warn("replay could not drop its scratch schema", "schema", r.opts.Schema, "err", err)
		}
	}
	if r.release != nil {
		r.release()
	}
}

// step applies the next batch (up to upTo when it is not zero) and reports
// whether it applied anything; it waits at most idle for a first message.
func (r *replay) step(ctx context.Context, upTo uint64, idle time.Duration) (bool, error) {
	batch, err := r.feed.collect(ctx, r.opts.BatchSize, upTo, idle)
	if err != nil || len(batch) == 0 {
		return false, err
	}
	if err := r.proj.ApplyBatch(ctx, batch); err != nil {
		return false, fmt.Errorf("projections: replay: %w", err)
	}
	return true, nil
}

// reach applies batches until the scratch checkpoint is at least target,
// reporting progress in phase. Events the stream no longer holds
// (archived and purged) never come: once none is left at or below
// target, the checkpoint moves to target (skipPurged).
func (r *replay) reach(ctx context.Context, target uint64, phase RebuildPhase) error {
	for r.proj.Checkpoint() < target {
		applied, err := r.step(ctx, target, time.Second)
		if err != nil {
			return err
		}
		if !applied {
			if err := r.skipPurged(ctx, target); err != nil {
				return err
			}
		}
		r.progress(phase, target, false)
	}
	return nil
}

// skipPurged moves the checkpoint to target when the stream holds no event
// after it up to target: they were archived and purged.
func (r *replay) skipPurged(ctx context.Context, target uint64) error {
	cp := r.proj.Checkpoint()
	if cp >= target {
		return nil
	}
	first, found, err := firstAfter(ctx, r.opts.JetStream, r.opts.Stream, cp)
	if err != nil {
		return fmt.Errorf("projections: replay: %w", err)
	}
	if found && first <= target {
		return nil // still to come
	}
	return r.proj.skipTo(ctx, target)
}

// progress reports at most every ProgressInterval, or always when force.
func (r *replay) progress(phase RebuildPhase, target uint64, force bool) {
	if r.opts.Progress == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(r.last) < r.opts.ProgressInterval {
		return
	}
	r.last = now
	applied := r.proj.Checkpoint()
	elapsed := now.Sub(r.start)
	p := RebuildProgress{Phase: phase, Applied: applied, Target: target, Elapsed: elapsed}
	if s := elapsed.Seconds(); s > 0 {
		p.Rate = float64(applied) / s
	}
	if p.Rate > 0 && target > applied {
		p.ETA = time.Duration(float64(target-applied) / p.Rate * float64(time.Second))
	}
	r.opts.Progress(p)
}

// streamLast returns the stream's last sequence.
func streamLast(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("projections: stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("projections: stream %s info: %w", stream, err)
	}
	return info.State.LastSeq, nil
}

// Rebuild replays the stream from sequence 1 into fresh copies of the view
// tables in a scratch schema, catches up with what was appended meanwhile,
// then swaps them in for the live tables in one transaction; the live views
// keep serving throughout. A poison event stops it with a *PoisonError and
// leaves the live views untouched.
//
// The swap pauses the live projector, wherever it runs, at a batch
// boundary: it locks the live checkpoint table (EXCLUSIVE: readers go on,
// the projector's next batch waits), applies to the rebuilt tables what
// the live projector had applied beyond them, then moves the live tables
// out and the rebuilt ones in. Readers wait for the moves (milliseconds) and
// then read the rebuilt tables; the live projector resumes from the rebuilt
// checkpoint, which is at or past its own.
//
// Archived aggregates stay out of the rebuilt views: their events are no
// longer in the stream, and the archive is not replayed. A rebuild and an
// archiving pass do not overlap (LockArchiving).
func Rebuild(ctx context.Context, opts ReplayOptions) (RebuildResult, error) {
	opts.setDefaults("tether_rebuild")
	if err := opts.validate(); err != nil {
		return RebuildResult{}, err
	}
	log := opts.Logger
	target, err := streamLast(ctx, opts.JetStream, opts.Stream)
	if err != nil {
		return RebuildResult{}, err
	}
	if opts.Progress != nil {
		opts.Progress(RebuildProgress{Phase: PhasePrepare, Target: target})
	}
	r, err := startReplay(ctx, opts, true)
	if err != nil {
		return RebuildResult{}, err
	}
	swapped := false
	defer func() { r.close(context.WithoutCancel(ctx), !swapped) }()
	log.Info("rebuild started", "target", target, "schema", opts.Schema, "live_schema", r.live)

	phase := PhaseReplay
	r.progress(phase, target, true)
	if err := r.reach(ctx, target, phase); err != nil {
		return RebuildResult{}, err
	}
	replayed := time.Since(r.start)
	rate := float64(r.proj.Checkpoint()) / max(replayed.Seconds(), 1e-9)
	log.Info("rebuild replayed the stream", "events", r.proj.Checkpoint(), "duration", replayed, "events_per_second", int(rate))
	if err := r.proj.FlushViews(ctx); err != nil {
		return RebuildResult{}, err
	}
	if err := r.createIndexes(ctx); err != nil {
		return RebuildResult{}, err
	}

	// Catch up until a batch finds little left, then swap; a swap that
	// cannot get its locks in time is rolled back and tried again.
	phase = PhaseCatchUp
	attempts := 0
	for {
		last, err := streamLast(ctx, opts.JetStream, opts.Stream)
		if err != nil {
			return RebuildResult{}, err
		}
		r.progress(phase, last, true)
		if last > r.proj.Checkpoint()+uint64(opts.BatchSize) {
			applied, err := r.step(ctx, 0, time.Second)
			if err != nil {
				return RebuildResult{}, err
			}
			if !applied {
				if err := r.skipPurged(ctx, last); err != nil {
					return RebuildResult{}, err
				}
			}
			continue
		}
		attempts++
		r.progress(PhaseSwap, last, true)
		err = r.swap(ctx)
		if err == nil {
			break
		}
		if !isLockTimeout(err) || attempts >= opts.SwapAttempts {
			return RebuildResult{}, fmt.Errorf("projections: rebuild: swap (attempt %d): %w", attempts, err)
		}
		log.Warn("rebuild swap timed out on a lock; retrying", "attempt", attempts, "err", err)
	}
	swapped = true
	res := RebuildResult{Checkpoint: r.proj.Checkpoint(), Events: r.proj.Checkpoint(), Duration: time.Since(r.start),
		Rate: rate, SwapAttempts: attempts}
	r.progress(PhaseDone, res.Checkpoint, true)
	log.Info("rebuild swapped in", "checkpoint", res.Checkpoint, "duration", res.Duration, "swap_attempts", attempts)
	return res, nil
}

// swap pauses the live projector, brings the scratch tables to at least its
// checkpoint and moves them in, in one transaction.
func (r *replay) swap(ctx context.Context) error {
	live, scratch := r.live, r.opts.Schema
	retired := scratch + "_retired"
	if _, err := r.opts.Pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+retired+` CASCADE`); err != nil {
		return fmt.Errorf("drop %s: %w", retired, err)
	}
	tx, err := r.opts.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // No-op after commit.
	// The live projector's batch holds the checkpoint row until it
	// commits: wait for it as long as a batch may take.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+live+`.projector_checkpoints IN EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("pause the live projector: %w", err)
	}
	var liveCP int64
	err = tx.QueryRow(ctx, `SELECT sequence FROM `+live+`.projector_checkpoints WHERE partition = $1`, r.opts.Partition).Scan(&liveCP)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read the live checkpoint: %w", err)
	}
	if err := r.reach(ctx, uint64(liveCP), PhaseSwap); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, r.opts.SwapLockTimeout.Milliseconds())); err != nil {
		return err
	}
	qualified := make([]string, len(viewTables))
	for i, t := range viewTables {
		qualified[i] = live + "." + t
	}
	stmts := []string{
		`LOCK TABLE ` + strings.Join(qualified, ", ") + ` IN ACCESS EXCLUSIVE MODE`,
		// The live projector's fence (its lease epoch) carries over, so a
		// projector that lost its lease cannot write over the swapped views.
		`UPDATE ` + scratch + `.projector_checkpoints s SET fence = l.fence FROM ` + live +
			`.projector_checkpoints l WHERE s.partition = l.partition`,
		`CREATE SCHEMA ` + retired,
	}
	for _, t := range viewTables {
		stmts = append(stmts, `ALTER TABLE `+live+`.`+t+` SET SCHEMA `+retired, `ALTER TABLE `+scratch+`.`+t+` SET SCHEMA `+live)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	// The retired tables go after the commit, outside the readers' way;
	// close drops the (now empty) scratch schema.
	if _, err := r.opts.Pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+retired+` CASCADE`); err != nil {
		r.opts.Logger.Warn("rebuild could not drop the retired tables", "schema", retired, "err", err)
	}
	if _, err := r.opts.Pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA IF EXISTS `+scratch+` CASCADE`); err != nil {
		r.opts.Logger.Warn("rebuild could not drop its scratch schema", "schema", scratch, "err", err)
	}
	return nil
}

// isLockTimeout reports a PostgreSQL lock_timeout (55P03) or deadlock (40P01).
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01")
}

// createIndexes builds the scratch tables' secondary indexes.
func (r *replay) createIndexes(ctx context.Context) error {
	for _, stmt := range r.indexes {
		if _, err := r.opts.Pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("projections: %s: %w", stmt, err)
		}
	}
	r.indexes = nil
	return nil
}

// createScratch creates schema scratch afresh with empty copies of the live
// view tables: columns, defaults, storage parameters and constraints under
// the same names, so the tables can take the live ones' place. It returns
// the statements that create the secondary indexes (same names), for after
// the tables are filled.
func createScratch(ctx context.Context, pool *pgxpool.Pool, live, scratch string) (indexes []string, err error) {
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+scratch+` CASCADE`); err != nil {
		return nil, fmt.Errorf("projections: drop schema %s: %w", scratch, err)
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+scratch); err != nil {
		return nil, fmt.Errorf("projections: create schema %s: %w", scratch, err)
	}
	for _, t := range viewTables {
		src := live + "." + t
		var opts []string
		if err := pool.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`, src).Scan(&opts); err != nil {
			return nil, fmt.Errorf("projections: options of %s: %w", src, err)
		}
		with := ""
		if len(opts) > 0 {
			with = " WITH (" + strings.Join(opts, ", ") + ")"
		}
		stmts := []string{`CREATE TABLE ` + scratch + `.` + t + ` (LIKE ` + src +
			` INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)` + with}
		rows, err := pool.Query(ctx, `
SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s', $2::text, c.conname, pg_get_constraintdef(c.oid))
FROM pg_constraint c WHERE c.conrelid = $1::regclass AND c.contype IN ('p', 'u', 'x')
UNION ALL
SELECT pg_get_indexdef(i.indexrelid)
FROM pg_index i WHERE i.indrelid = $1::regclass
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`, src, scratch+"."+t)
		if err != nil {
			return nil, fmt.Errorf("projections: indexes of %s: %w", src, err)
		}
		defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("projections: indexes of %s: %w", src, err)
		}
		for _, d := range defs {
			if strings.HasPrefix(d, "CREATE") {
				on := " ON " + src + " "
				if !strings.Contains(d, on) {
					return nil, fmt.Errorf("projections: cannot copy index of %s: %s", src, d)
				}
				indexes = append(indexes, strings.Replace(d, on, " ON "+scratch+"."+t+" ", 1))
				continue
			}
			stmts = append(stmts, d)
		}
		for _, s := range stmts {
			if _, err := pool.Exec(ctx, s); err != nil {
				return nil, fmt.Errorf("projections: %s: %w", s, err)
			}
		}
	}
	return indexes, nil
}

// feed reads the whole stream from sequence 1 through an ordered consumer.
type feed struct {
	cc   jetstream.ConsumeContext
	msgs chan jetstream.Msg
	held jetstream.Msg // read past an upTo limit, to be returned next
	done chan struct{}
}

func openFeed(ctx context.Context, js jetstream.JetStream, stream string, size int) (*feed, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("projections: stream %s: %w", stream, err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("projections: ordered consumer: %w", err)
	}
	f := &feed{msgs: make(chan jetstream.Msg, 2*size), done: make(chan struct{})}
	f.cc, err = cons.Consume(func(m jetstream.Msg) {
		select {
		case f.msgs <- m:
		case <-f.done:
		}
	}, append(jsclient.FailoverPull(time.Second), jetstream.PullMaxMessages(2*size))...)
	if err != nil {
		return nil, fmt.Errorf("projections: consume: %w", err)
	}
	return f, nil
}

func (f *feed) stop() {
	f.cc.Stop()
	close(f.done)
}

// collect returns up to n messages in stream order, none above upTo when it
// is not zero. It waits at most idle for the first, then 5ms for more.
func (f *feed) collect(ctx context.Context, n int, upTo uint64, idle time.Duration) ([]jetstream.Msg, error) {
	var batch []jetstream.Msg
	take := func(m jetstream.Msg) (bool, error) {
		meta, err := m.Metadata()
		if err != nil {
			return false, fmt.Errorf("projections: message metadata: %w", err)
		}
		if upTo > 0 && meta.Sequence.Stream > upTo {
			f.held = m
			return false, nil
		}
		batch = append(batch, m)
		return len(batch) < n, nil
	}
	if f.held != nil {
		m := f.held
		f.held = nil
		if more, err := take(m); err != nil || !more {
			return batch, err
		}
	}
	wait := time.NewTimer(idle)
	defer wait.Stop()
	for {
		select {
		case m := <-f.msgs:
			more, err := take(m)
			if err != nil || !more {
				return batch, err
			}
			if len(batch) == 1 {
				wait.Reset(5 * time.Millisecond)
			}
		case <-wait.C:
			return batch, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
