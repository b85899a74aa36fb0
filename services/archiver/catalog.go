package archiver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/projections/postgres"
)

// The states of a segment in the catalog (archive_segments.state), in
// order.
const (
	stateIntent = "INTENT"
	stateStored = "STORED"
	statePurged = "PURGED"
	stateDone   = "DONE"
)

// segment is one segment as the catalog records it.
type segment struct {
	name   string
	state  string
	aggs   []aggregate // in increasing order of subject
	sum    [sha256.Size]byte
	bytes  int64
	events int64
}

// aggregate is one aggregate of a segment.
type aggregate struct {
	name, subject, kind string
	last                uint64
	first               uint64 // from STORED on
	events              int64  // from STORED on
	endTime             time.Time
	// firstTime and lastTime are when the stream stored its first and last
	// events (recorded STORED; zero on a segment resumed from STORED on).
	firstTime, lastTime time.Time
}

// catalog reads and writes the archive catalog (archive_segments and
// archived_aggregates), each change one transaction.
type catalog struct {
	pool *pgxpool.Pool
}

// unfinished returns the segments not DONE, oldest first, with their
// aggregates.
func (c catalog) unfinished(ctx context.Context) ([]*segment, error) {
	rows, err := c.pool.Query(ctx, `SELECT name, state, coalesce(sha256, ''), coalesce(bytes, 0), coalesce(events, 0)
FROM archive_segments WHERE state <> 'DONE' ORDER BY create_time, name`)
	if err != nil {
		return nil, fmt.Errorf("archiver: unfinished segments: %w", err)
	}
	var segs []*segment
	for rows.Next() {
		s := &segment{}
		var sum []byte
		if err := rows.Scan(&s.name, &s.state, &sum, &s.bytes, &s.events); err != nil {
			rows.Close()
			return nil, fmt.Errorf("archiver: unfinished segments: %w", err)
		}
		copy(s.sum[:], sum)
		segs = append(segs, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archiver: unfinished segments: %w", err)
	}
	for _, s := range segs {
		rows, err := c.pool.Query(ctx, `SELECT aggregate, subject, kind, last_sequence, coalesce(first_sequence, 0), coalesce(events, 0), end_time
FROM archived_aggregates WHERE segment = $1 ORDER BY subject COLLATE "C"`, s.name)
		if err != nil {
			return nil, fmt.Errorf("archiver: aggregates of segment %s: %w", s.name, err)
		}
		s.aggs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (aggregate, error) {
			var ag aggregate
			var last, first int64
			err := r.Scan(&ag.name, &ag.subject, &ag.kind, &last, &first, &ag.events, &ag.endTime)
			ag.last, ag.first = uint64(last), uint64(first)
			return ag, err
		})
		if err != nil {
			return nil, fmt.Errorf("archiver: aggregates of segment %s: %w", s.name, err)
		}
		if len(s.aggs) == 0 {
			return nil, fmt.Errorf("archiver: segment %s records no aggregate", s.name)
		}
	}
	return segs, nil
}

// intent records a new segment and its aggregates, INTENT.
func (c catalog) intent(ctx context.Context, s *segment, now time.Time) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO archive_segments (name, state, aggregates, create_time, update_time)
VALUES ($1, $2, $3, $4, $4)`, s.name, stateIntent, len(s.aggs), now); err != nil {
			return fmt.Errorf("archiver: record the intent of segment %s: %w", s.name, err)
		}
		n := len(s.aggs)
		names, subjects, kinds := make([]string, n), make([]string, n), make([]string, n)
		lasts, ends := make([]int64, n), make([]time.Time, n)
		for i, ag := range s.aggs {
			names[i], subjects[i], kinds[i], lasts[i], ends[i] = ag.name, ag.subject, ag.kind, int64(ag.last), ag.endTime
		}
		if _, err := tx.Exec(ctx, `INSERT INTO archived_aggregates (aggregate, last_sequence, subject, kind, end_time, segment)
SELECT a.name, a.last, a.subject, a.kind, a.end_time, $6
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[]) AS a(name, last, subject, kind, end_time)`,
			names, lasts, subjects, kinds, ends, s.name); err != nil {
			return fmt.Errorf("archiver: record the aggregates of segment %s: %w", s.name, err)
		}
		return nil
	})
}

// stored records a written and verified segment, STORED: its sum, size and
// events, and each aggregate's first sequence and event count.
func (c catalog) stored(ctx context.Context, s *segment, now time.Time) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := setState(ctx, tx, s.name, stateIntent, stateStored, now,
			`, sha256 = $5, bytes = $6, events = $7`, s.sum[:], s.bytes, s.events); err != nil {
			return err
		}
		n := len(s.aggs)
		names, lasts, firsts, counts := make([]string, n), make([]int64, n), make([]int64, n), make([]int64, n)
		firstTimes, lastTimes := make([]time.Time, n), make([]time.Time, n)
		for i, ag := range s.aggs {
			names[i], lasts[i], firsts[i], counts[i] = ag.name, int64(ag.last), int64(ag.first), ag.events
			firstTimes[i], lastTimes[i] = ag.firstTime, ag.lastTime
		}
		tag, err := tx.Exec(ctx, `UPDATE archived_aggregates t SET first_sequence = a.first, events = a.events,
  first_time = a.first_time, last_time = a.last_time
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $6::timestamptz[], $7::timestamptz[])
  AS a(name, last, first, events, first_time, last_time)
WHERE t.aggregate = a.name AND t.last_sequence = a.last AND t.segment = $5`, names, lasts, firsts, counts, s.name, firstTimes, lastTimes)
		if err != nil {
			return fmt.Errorf("archiver: record the aggregates of segment %s stored: %w", s.name, err)
		}
		if tag.RowsAffected() != int64(n) {
			return fmt.Errorf("archiver: record the aggregates of segment %s stored: %d of %d recorded", s.name, tag.RowsAffected(), n)
		}
		return nil
	})
}

// advance moves a segment from one state to the next.
func (c catalog) advance(ctx context.Context, name, from, to string, now time.Time) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		return setState(ctx, tx, name, from, to, now, "")
	})
}

// done removes the segment's aggregates from the views and records it
// DONE, in one transaction, and returns the rows removed.
func (c catalog) done(ctx context.Context, s *segment, now time.Time) (int64, error) {
	var rows int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		archived := make([]postgres.Archived, len(s.aggs))
		for i, ag := range s.aggs {
			archived[i] = postgres.Archived{Name: ag.name, Kind: ag.kind, LastSequence: ag.last}
		}
		var err error
		if rows, err = postgres.RemoveArchived(ctx, tx, archived); err != nil {
			return fmt.Errorf("archiver: segment %s: %w", s.name, err)
		}
		return setState(ctx, tx, s.name, statePurged, stateDone, now, "")
	})
	if err != nil {
		return 0, err
	}
	s.state = stateDone
	return rows, nil
}

// lastPass records the end of a pass that ran: when, by the archiver's
// clock, the retention it applied, and its error, if any.
func (c catalog) lastPass(ctx context.Context, at time.Time, retention time.Duration, passErr error) error {
	msg := ""
	if passErr != nil {
		msg = passErr.Error()
	}
	_, err := c.pool.Exec(ctx, `INSERT INTO archive_last_pass (id, pass_time, retention_seconds, error) VALUES (1, $1, $2, $3)
ON CONFLICT (id) DO UPDATE SET pass_time = excluded.pass_time, retention_seconds = excluded.retention_seconds, error = excluded.error`,
		at, int64(retention/time.Second), msg)
	if err != nil {
		return fmt.Errorf("archiver: record the last pass: %w", err)
	}
	return nil
}

// errState marks a segment found in another state than its change
// expected: another archiver moved it (passes are meant not to overlap).
var errState = errors.New("archiver: segment not in the expected state")

// setState moves segment name from state from to state to in tx, setting
// the extra columns (set, with its arguments from $5 on) too.
func setState(ctx context.Context, tx pgx.Tx, name, from, to string, now time.Time, set string, args ...any) error {
	tag, err := tx.Exec(ctx, `UPDATE archive_segments SET state = $3, update_time = $4`+set+` WHERE name = $1 AND state = $2`,
		append([]any{name, from, to, now}, args...)...)
	if err != nil {
		return fmt.Errorf("archiver: record segment %s %s: %w", name, to, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s, to go from %s to %s", errState, name, from, to)
	}
	return nil
}
