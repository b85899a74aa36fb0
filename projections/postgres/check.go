package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DiffKind says how a live row differs from the replayed one.
type DiffKind string

// Kinds of difference.
const (
	// DiffMissing: the replay has the row, the live views do not.
	DiffMissing DiffKind = "MISSING"
	// DiffExtra: the live views have a row the replay does not.
	DiffExtra DiffKind = "EXTRA"
	// DiffDifferent: both have the row, with different values.
	DiffDifferent DiffKind = "DIFFERENT"
)

// Difference is one row that differs between the live views and a replay.
type Difference struct {
	// Table is the view table.
	Table string
	// Key is the row's name (its sequence in events and dead_letters).
	Key string
	// Kind says how it differs.
	Kind DiffKind
	// Columns lists the differing columns (DiffDifferent only).
	Columns []string
}

// CheckReport is the result of Check.
type CheckReport struct {
	// Sequence is the checkpoint both sides were compared at.
	Sequence uint64
	// Rows counts the rows compared (live and replayed, by key).
	Rows int64
	// Differences lists up to MaxDifferences differences, by table and key.
	Differences []Difference
	// Truncated is set when there were more.
	Truncated bool
	// Duration is the whole check.
	Duration time.Duration
}

// MaxDifferences bounds the differences a check reports per table.
const MaxDifferences = 1000

// checkTables are the tables Check compares, with their keys and the
// columns that are not derived from the events (left out).
var checkTables = func() []checkTable {
	var out []checkTable
	for _, v := range viewOrder() {
		out = append(out, checkTable{table: v.tableName(), key: "name",
			archived: `EXISTS (SELECT 1 FROM %s.archived_aggregates a WHERE a.aggregate = l.name AND a.last_sequence >= l.last_sequence)`})
	}
	return append(out, checkTable{table: "events", key: "sequence",
		archived: `EXISTS (SELECT 1 FROM %s.archived_aggregates a WHERE a.aggregate = l.aggregate AND a.last_sequence >= l.sequence)`},
		checkTable{table: "dead_letters", key: "sequence", skip: []string{"create_time"}})
}()

// checkTable is a table Check compares: its key, the columns it skips,
// and, for a table with rows per aggregate, the condition (on the live
// row l, %s the live schema) that the archive catalog holds the row's
// events.
type checkTable struct {
	table, key string
	skip       []string
	archived   string
}

// Check replays the stream from sequence 1 into scratch tables with the
// current code (poison events go to the scratch dead letters, as live) and
// compares them row by row with the live views: every column, the snapshot
// bytes included. Both sides are compared at the same checkpoint: the live
// projector is paused at a batch boundary (its checkpoint table locked;
// readers go on) while the replay reaches exactly its checkpoint and the
// tables are compared.
//
// Aggregates the archiver (services/archiver) took out of the stream are
// in neither: their events are purged, and the archiver removes their
// rows. A live row of an aggregate whose events the archive catalog holds
// is no difference while the archiver has yet to remove it. Check and an
// archiving pass do not overlap (LockArchiving).
func Check(ctx context.Context, opts ReplayOptions) (CheckReport, error) {
	opts.setDefaults("tether_check")
	if err := opts.validate(); err != nil {
		return CheckReport{}, err
	}
	start := time.Now()
	r, err := startReplay(ctx, opts, false)
	if err != nil {
		return CheckReport{}, err
	}
	defer r.close(context.WithoutCancel(ctx), true)

	views := &Views{pool: opts.Pool}
	first, err := views.checkpointOf(ctx, opts.Partition)
	if err != nil {
		return CheckReport{}, err
	}
	r.progress(PhaseReplay, first, true)
	if err := r.reach(ctx, first, PhaseReplay); err != nil {
		return CheckReport{}, err
	}
	if err := r.proj.FlushViews(ctx); err != nil {
		return CheckReport{}, err
	}

	tx, err := opts.Pool.Begin(ctx)
	if err != nil {
		return CheckReport{}, fmt.Errorf("projections: check: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // read-only: nothing to keep
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		return CheckReport{}, fmt.Errorf("projections: check: %w", err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+r.live+`.projector_checkpoints IN EXCLUSIVE MODE`); err != nil {
		return CheckReport{}, fmt.Errorf("projections: check: pause the live projector: %w", err)
	}
	var cp int64
	err = tx.QueryRow(ctx, `SELECT sequence FROM `+r.live+`.projector_checkpoints WHERE partition = $1`, opts.Partition).Scan(&cp)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return CheckReport{}, fmt.Errorf("projections: check: live checkpoint: %w", err)
	}
	if err := r.reach(ctx, uint64(cp), PhaseCatchUp); err != nil {
		return CheckReport{}, err
	}
	rep := CheckReport{Sequence: uint64(cp)}
	for _, t := range checkTables {
		archived := ""
		if t.archived != "" {
			archived = fmt.Sprintf(t.archived, r.live)
		}
		n, diffs, more, err := compareTable(ctx, tx, r.live+"."+t.table, opts.Schema+"."+t.table, t.table, t.key, t.skip, archived)
		if err != nil {
			return CheckReport{}, err
		}
		rep.Rows += n
		rep.Differences = append(rep.Differences, diffs...)
		rep.Truncated = rep.Truncated || more
	}
	rep.Duration = time.Since(start)
	opts.Logger.Info("projection check done", "sequence", rep.Sequence, "rows", rep.Rows,
		"differences", len(rep.Differences), "duration", rep.Duration)
	return rep, nil
}

// compareTable full-joins a live table with its replayed copy by key and
// returns the row count and the rows that differ, naming their columns.
// A live row the replay lacks is no difference when archived holds for it
// (when not empty): its events left the stream for the archive, and the
// archiver has yet to remove it from the views (it was stopped between
// its purge and its removal, and resumes on its next pass).
func compareTable(ctx context.Context, tx pgx.Tx, live, replayed, table, key string, skip []string, archived string) (int64, []Difference, bool, error) {
	rows, err := tx.Query(ctx, `SELECT column_name FROM information_schema.columns
WHERE table_schema = split_part($1, '.', 1) AND table_name = $2 ORDER BY ordinal_position`, live, table)
	if err != nil {
		return 0, nil, false, fmt.Errorf("projections: check: columns of %s: %w", live, err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, nil, false, fmt.Errorf("projections: check: columns of %s: %w", live, err)
	}
	var cases, conds []string
	for _, c := range cols {
		if c == key || slices.Contains(skip, c) {
			continue
		}
		q := pgx.Identifier{c}.Sanitize()
		cond := "l." + q + " IS DISTINCT FROM s." + q
		cases = append(cases, "CASE WHEN "+cond+" THEN '"+c+"' END")
		conds = append(conds, cond)
	}
	k := pgx.Identifier{key}.Sanitize()
	var count int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+live+` l FULL JOIN `+replayed+` s ON l.`+k+` = s.`+k).Scan(&count); err != nil {
		return 0, nil, false, fmt.Errorf("projections: check: count %s: %w", table, err)
	}
	where := `(l.` + k + ` IS NULL OR s.` + k + ` IS NULL OR ` + strings.Join(conds, " OR ") + `)`
	if archived != "" {
		where += ` AND NOT (s.` + k + ` IS NULL AND ` + archived + `)`
	}
	sql := `SELECT coalesce(l.` + k + `, s.` + k + `)::text, l.` + k + ` IS NULL, s.` + k + ` IS NULL,
  array_remove(ARRAY[` + strings.Join(cases, ", ") + `]::text[], NULL)
FROM ` + live + ` l FULL JOIN ` + replayed + ` s ON l.` + k + ` = s.` + k + `
WHERE ` + where + `
ORDER BY 1 LIMIT ` + fmt.Sprint(MaxDifferences+1)
	rows, err = tx.Query(ctx, sql)
	if err != nil {
		return 0, nil, false, fmt.Errorf("projections: check: compare %s: %w", table, err)
	}
	defer rows.Close()
	var diffs []Difference
	for rows.Next() {
		var d Difference
		var noLive, noReplay bool
		if err := rows.Scan(&d.Key, &noLive, &noReplay, &d.Columns); err != nil {
			return 0, nil, false, fmt.Errorf("projections: check: scan %s: %w", table, err)
		}
		d.Table = table
		switch {
		case noLive:
			d.Kind, d.Columns = DiffMissing, nil
		case noReplay:
			d.Kind, d.Columns = DiffExtra, nil
		default:
			d.Kind = DiffDifferent
		}
		diffs = append(diffs, d)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, false, fmt.Errorf("projections: check: compare %s: %w", table, err)
	}
	more := len(diffs) > MaxDifferences
	if more {
		diffs = diffs[:MaxDifferences]
	}
	return count, diffs, more, nil
}

// checkpointOf reads a partition's checkpoint (0 if none).
func (v *Views) checkpointOf(ctx context.Context, partition string) (uint64, error) {
	var cp int64
	err := v.pool.QueryRow(ctx, `SELECT sequence FROM projector_checkpoints WHERE partition = $1`, partition).Scan(&cp)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("views: read checkpoint: %w", err)
	}
	return uint64(cp), nil
}
