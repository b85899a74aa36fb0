package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/events"
)

// What the views do for the archiver (services/archiver): which ended
// aggregates it may take, removing their rows once their events have
// left the stream, and the lock that keeps archiving and replays apart.
// The archive catalog (archive_segments, archived_aggregates: migrations
// 00009) is the archiver's; the views read it only to leave out what it
// holds.

// archiveLockKey is the advisory lock an archiving pass holds, and a
// rebuild or a check holds while it replays (LockArchiving).
const archiveLockKey = 0x7465_7468_6172_6376 // "tetharcv"

// ErrArchiveBusy is LockArchiving's error while a rebuild, a check or
// another archiving pass runs against the same database.
var ErrArchiveBusy = errors.New("projections: a rebuild, a check or another archiving pass is running")

// LockArchiving takes, without waiting, the lock an archiving pass holds
// for its whole length, and returns its release. A rebuild or a check
// holds the same lock while it replays (waiting for a pass that holds it
// to end): a pass purges the stream and removes rows from the views, and
// a replay that saw an aggregate's events before its purge would bring
// its rows back, or count them as differences. Two passes (two archivers
// during a leadership change) do not overlap either. While it is held
// elsewhere, LockArchiving returns ErrArchiveBusy.
//
// The lock belongs to one PostgreSQL session, held out of the pool until
// the release; a process that dies loses it with its connection.
func LockArchiving(ctx context.Context, pool *pgxpool.Pool) (release func(), err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("projections: archive lock: acquire: %w", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(archiveLockKey)).Scan(&locked); err != nil {
		conn.Release()
		return nil, fmt.Errorf("projections: archive lock: %w", err)
	}
	if !locked {
		conn.Release()
		return nil, ErrArchiveBusy
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(archiveLockKey)); err != nil {
			conn.Conn().Close(ctx) //nolint:errcheck // a closed session drops its lock
		}
		conn.Release()
	}, nil
}

// Ended is an aggregate whose history has ended: a terminated game server,
// an ended game session (with its player sessions), a deleted fleet.
type Ended struct {
	// Name is its resource name.
	Name string
	// Kind is its aggregate kind (events.KindGameServer,
	// events.KindGameSession or events.KindFleet).
	Kind string
	// Subject is its stream subject.
	Subject string
	// LastSequence is the stream sequence of the last event its view row
	// reflects.
	LastSequence uint64
	// EndTime is its row's update time: the time of its last event.
	EndTime time.Time
	// Events counts its events in the events table: the size of its
	// history, as projected.
	Events int64
}

// endedQueries choose, per kind, the ended aggregates the archiver may
// take: the table (alias x), what makes one ended and free to go ($1: the
// end before which), the order its oldest come in, and its subject from
// its name, as events.Subject computes it (EndedBefore checks it). Each
// kind waits for what still names it:
//   - a terminated game server, until no game session still running
//     names it (the controller reads a running session's server to end
//     the session);
//   - an ended game session, until its server is no longer allocated to
//     it (the controller creates the session of an allocated server that
//     has none in the views);
//   - a deleted fleet, until no game server and no game session of it is
//     left in the views: archived, or it never had any.
var endedQueries = []struct{ kind, table, where, order, subject string }{
	{events.KindGameServer, "game_servers", `x.state = 'TERMINATED' AND x.update_time < $1
  AND NOT EXISTS (SELECT 1 FROM game_sessions s WHERE s.game_server = x.name AND s.state <> 'ENDED')`,
		"x.update_time, x.name", `coalesce(nullif(x.subject, ''), 'tether.ev.gs.' || split_part(x.name, '/', 2) || '.' || split_part(x.name, '/', 4))`},
	{events.KindGameSession, "game_sessions", `x.state = 'ENDED' AND x.update_time < $1
  AND NOT EXISTS (SELECT 1 FROM game_servers g WHERE g.name = x.game_server AND g.game_session = x.name AND g.state = 'ALLOCATED')`,
		"x.create_time, x.name", `'tether.ev.gsess.' || split_part(x.name, '/', 2)`},
	{events.KindFleet, "fleets", `x.deleted AND x.update_time < $1
  AND NOT EXISTS (SELECT 1 FROM game_servers g WHERE g.fleet = x.name)
  AND NOT EXISTS (SELECT 1 FROM game_sessions s WHERE s.fleet = x.name)`,
		"x.update_time, x.name", `'tether.ev.fleet.' || split_part(x.name, '/', 2)`},
}

// endedQuery is the query of one of endedQueries ($2: the limit). Besides
// its own conditions, it leaves out an aggregate with a dead letter, one
// whose history up to its row is in the archive catalog, and one with a
// stretch of its subject in a segment not yet done.
func endedQuery(table, where, order, subject string) string {
	return `SELECT x.name, x.last_sequence, x.update_time, ` + subject + `
FROM ` + table + ` x
WHERE ` + where + `
  AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.subject = ` + subject + `)
  AND NOT EXISTS (SELECT 1 FROM archived_aggregates a JOIN archive_segments sg ON sg.name = a.segment
    WHERE a.aggregate = x.name AND (a.last_sequence >= x.last_sequence OR sg.state <> 'DONE'))
ORDER BY ` + order + ` LIMIT $2`
}

// EndedBefore returns up to limit aggregates whose histories ended before
// before, that the archiver may take, ended first first: terminated game
// servers, ended game sessions and deleted fleets, each once nothing in
// the views still names it (endedQueries). Left out: an aggregate with a
// dead letter (it waits for an operator: a retry reads its history from
// the stream), and one the archive catalog holds or is taking.
func (v *Views) EndedBefore(ctx context.Context, before time.Time, limit int) ([]Ended, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []Ended
	for _, q := range endedQueries {
		rows, err := v.pool.Query(ctx, endedQuery(q.table, q.where, q.order, q.subject), before, limit)
		if err != nil {
			return nil, fmt.Errorf("views: ended %s aggregates: %w", q.kind, err)
		}
		for rows.Next() {
			e := Ended{Kind: q.kind}
			var seq int64
			if err := rows.Scan(&e.Name, &seq, &e.EndTime, &e.Subject); err != nil {
				rows.Close()
				return nil, fmt.Errorf("views: ended %s aggregates: %w", q.kind, err)
			}
			e.LastSequence = uint64(seq)
			out = append(out, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("views: ended %s aggregates: %w", q.kind, err)
		}
	}
	for _, e := range out {
		if n, err := events.NameFromSubject(e.Subject); err != nil || n != e.Name || events.KindOf(e.Subject) != e.Kind {
			return nil, fmt.Errorf("views: ended aggregate %s: subject %q does not match its name (%v)", e.Name, e.Subject, err)
		}
	}
	sortEnded(out)
	if len(out) > limit {
		out = out[:limit]
	}
	names := make([]string, len(out))
	for i, e := range out {
		names[i] = e.Name
	}
	rows, err := v.pool.Query(ctx, `SELECT aggregate, count(*) FROM events WHERE aggregate = ANY($1) GROUP BY aggregate`, names)
	if err != nil {
		return nil, fmt.Errorf("views: count the events of ended aggregates: %w", err)
	}
	counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		name string
		n    int64
	}, error) {
		var c struct {
			name string
			n    int64
		}
		return c, r.Scan(&c.name, &c.n)
	})
	if err != nil {
		return nil, fmt.Errorf("views: count the events of ended aggregates: %w", err)
	}
	byName := make(map[string]int64, len(counts))
	for _, c := range counts {
		byName[c.name] = c.n
	}
	for i := range out {
		out[i].Events = byName[out[i].Name]
	}
	return out, nil
}

// sortEnded orders ended aggregates by end time, then name.
func sortEnded(es []Ended) {
	slices.SortFunc(es, func(a, b Ended) int {
		if c := a.EndTime.Compare(b.EndTime); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// Archived is an aggregate whose history, up to LastSequence, has left
// the stream for an archive segment.
type Archived struct {
	// Name is its resource name.
	Name string
	// Kind is its aggregate kind (the subject's token).
	Kind string
	// LastSequence is the stream sequence of its last archived event.
	LastSequence uint64
}

// RemoveArchived deletes, in tx, what the views hold of aggregates whose
// events the archive now holds: each one's view row, unless the row
// reflects an event after its last archived one, and its rows in the
// events table up to that event. It returns how many rows it deleted. The
// archiver calls it in the transaction that marks their segment done, so
// a crash leaves both or neither.
func RemoveArchived(ctx context.Context, tx pgx.Tx, aggs []Archived) (int64, error) {
	byKind := map[string][]Archived{}
	for _, a := range aggs {
		byKind[a.Kind] = append(byKind[a.Kind], a)
	}
	var n int64
	for _, a := range events.Aggregates() {
		as := byKind[a.Kind]
		v, ok := views[a.Kind]
		if len(as) == 0 || !ok {
			continue
		}
		delete(byKind, a.Kind)
		names, lasts := columns(as)
		tag, err := tx.Exec(ctx, `DELETE FROM `+v.tableName()+` t USING unnest($1::text[], $2::bigint[]) AS a(name, last)
WHERE t.name = a.name AND t.last_sequence <= a.last`, names, lasts)
		if err != nil {
			return 0, fmt.Errorf("views: remove archived rows of %s: %w", v.tableName(), err)
		}
		n += tag.RowsAffected()
	}
	for kind := range byKind {
		return 0, fmt.Errorf("views: remove archived aggregates: no view for kind %q", kind)
	}
	names, lasts := columns(aggs)
	tag, err := tx.Exec(ctx, `DELETE FROM events e USING unnest($1::text[], $2::bigint[]) AS a(name, last)
WHERE e.aggregate = a.name AND e.sequence <= a.last`, names, lasts)
	if err != nil {
		return 0, fmt.Errorf("views: remove archived events: %w", err)
	}
	return n + tag.RowsAffected(), nil
}

// columns splits archived aggregates into their names and last sequences.
func columns(as []Archived) ([]string, []int64) {
	names := make([]string, len(as))
	lasts := make([]int64, len(as))
	for i, a := range as {
		names[i], lasts[i] = a.Name, int64(a.LastSequence)
	}
	return names, lasts
}
