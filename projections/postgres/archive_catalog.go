package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reads of the archive catalog (archive_segments, archived_aggregates:
// migrations 00009 and 00010) for the API: where an archived aggregate's
// history is, which archived stretches hold events of a range, and the
// archive's state. The archiver (services/archiver) writes the catalog.

// storedSegment is the condition on a catalog segment (alias sg) whose
// file is in the segment store, written and verified: STORED, PURGED or
// DONE. Before STORED (INTENT), the stream still holds its events and the
// file may not exist.
const storedSegment = `sg.state <> 'INTENT'`

// ArchivedStretch is one stretch of an aggregate's history that an
// archive segment holds: its events on Subject from FirstSequence to
// LastSequence. An aggregate whose name came back after it was archived
// (a fleet created again) has a stretch per archived life.
type ArchivedStretch struct {
	// Aggregate is its resource name.
	Aggregate string
	// Subject is its stream subject.
	Subject string
	// Kind is its aggregate kind (the subject's token).
	Kind string
	// Segment is the name of the segment that holds it.
	Segment string
	// FirstSequence and LastSequence are the stream sequences of its first
	// and last events.
	FirstSequence uint64
	// LastSequence is the stream sequence of its last event.
	LastSequence uint64
	// Events counts its events.
	Events int64
	// EndTime is when it ended: its view row's update time.
	EndTime time.Time
	// FirstTime and LastTime are when the stream stored its first and last
	// events, to the microsecond; zero when the catalog does not know
	// (recorded before migration 00010).
	FirstTime time.Time
	// LastTime is when the stream stored its last event.
	LastTime time.Time
}

// stretchColumns are the columns scanStretch reads, of archived_aggregates
// a.
const stretchColumns = `a.aggregate, a.subject, a.kind, a.segment, coalesce(a.first_sequence, 0), a.last_sequence, coalesce(a.events, 0),
  a.end_time, a.first_time, a.last_time`

// scanStretch scans stretchColumns.
func scanStretch(r pgx.CollectableRow) (ArchivedStretch, error) {
	var s ArchivedStretch
	var first, last int64
	var firstTime, lastTime *time.Time
	err := r.Scan(&s.Aggregate, &s.Subject, &s.Kind, &s.Segment, &first, &last, &s.Events, &s.EndTime, &firstTime, &lastTime)
	s.FirstSequence, s.LastSequence = uint64(first), uint64(last)
	if firstTime != nil && lastTime != nil {
		s.FirstTime, s.LastTime = *firstTime, *lastTime
	}
	return s, err
}

// ArchivedHistory returns the stretches of an aggregate's history (its
// resource name) that stored segments hold and that end at or after
// sequence from, oldest first. Each names its subject: a game server whose
// name came back may have had another host, and with it another subject.
func (v *Views) ArchivedHistory(ctx context.Context, aggregate string, from uint64) ([]ArchivedStretch, error) {
	rows, err := v.pool.Query(ctx, `SELECT `+stretchColumns+`
FROM archived_aggregates a JOIN archive_segments sg ON sg.name = a.segment
WHERE a.aggregate = $1 AND a.last_sequence >= $2 AND `+storedSegment+`
ORDER BY a.last_sequence`, aggregate, int64(from))
	if err != nil {
		return nil, fmt.Errorf("archive catalog: the history of %s: %w", aggregate, err)
	}
	out, err := pgx.CollectRows(rows, scanStretch)
	if err != nil {
		return nil, fmt.Errorf("archive catalog: the history of %s: %w", aggregate, err)
	}
	return out, nil
}

// ArchiveRange selects the archived stretches with events in a range, for
// an export (ArchivedStretches). Zero fields do not bound it.
type ArchiveRange struct {
	// After: only stretches with an event after this sequence.
	After uint64
	// Until: only stretches with an event at or before this sequence.
	Until uint64
	// Start and End: only stretches with an event stored in [Start, End).
	Start, End time.Time
	// AfterFirst and AfterSubject: only stretches after this one in the
	// order of ArchivedStretches (the last of the previous page).
	AfterFirst   uint64
	AfterSubject string
	// Limit bounds the stretches returned; default 500.
	Limit int
}

// timeSlack widens the start of a range: PostgreSQL keeps the catalog's
// times to the microsecond, truncated, so a stretch whose last event was
// stored at or after the start may record a time just before it. (Its
// first event's time, truncated, is before the end if the event was.) A
// reader checks each event's own time.
const timeSlack = time.Microsecond

// ArchivedStretches returns a page of the stretches in stored segments
// that may hold events in r, in the order of their first sequences (then
// subjects): the order a reader merging them by sequence needs them in.
// A stretch may hold no event in r besides those that make it qualify:
// the reader filters the events.
func (v *Views) ArchivedStretches(ctx context.Context, r ArchiveRange) ([]ArchivedStretch, error) {
	if r.Limit <= 0 {
		r.Limit = 500
	}
	until := int64(-1) // no bound
	if r.Until > 0 {
		until = int64(r.Until)
	}
	var start, end *time.Time
	if !r.Start.IsZero() {
		s := r.Start.Add(-timeSlack)
		start = &s
	}
	if !r.End.IsZero() {
		end = &r.End
	}
	rows, err := v.pool.Query(ctx, `SELECT `+stretchColumns+`
FROM archived_aggregates a JOIN archive_segments sg ON sg.name = a.segment
WHERE `+storedSegment+` AND a.last_sequence > $1 AND ($2 < 0 OR a.first_sequence <= $2)
  AND ($3::timestamptz IS NULL OR a.last_time IS NULL OR a.last_time >= $3)
  AND ($4::timestamptz IS NULL OR a.first_time IS NULL OR a.first_time < $4)
  AND (a.first_sequence, a.subject COLLATE "C") > ($5, $6 COLLATE "C")
ORDER BY a.first_sequence, a.subject COLLATE "C"
LIMIT $7`, int64(r.After), until, start, end, int64(r.AfterFirst), r.AfterSubject, r.Limit)
	if err != nil {
		return nil, fmt.Errorf("archive catalog: stretches in a range: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanStretch)
	if err != nil {
		return nil, fmt.Errorf("archive catalog: stretches in a range: %w", err)
	}
	return out, nil
}

// ArchiveSegment is one segment as the catalog records it.
type ArchiveSegment struct {
	// Name is its name in the segment store.
	Name string
	// State is INTENT, STORED, PURGED or DONE.
	State string
	// Aggregates counts the stretches it holds.
	Aggregates int
	// Events, Bytes and SHA256 are recorded from STORED on (zero and nil
	// before).
	Events int64
	// Bytes is its size.
	Bytes int64
	// SHA256 is its sum, its file's last 32 bytes.
	SHA256 []byte
	// CreateTime is when its intent was recorded; UpdateTime when its
	// state last changed.
	CreateTime time.Time
	// UpdateTime is when its state last changed.
	UpdateTime time.Time
}

// segmentColumns are the columns scanSegment reads, of archive_segments
// sg.
const segmentColumns = `sg.name, sg.state, sg.aggregates, coalesce(sg.events, 0), coalesce(sg.bytes, 0), sg.sha256, sg.create_time, sg.update_time`

// scanSegment scans segmentColumns.
func scanSegment(r pgx.CollectableRow) (ArchiveSegment, error) {
	var s ArchiveSegment
	err := r.Scan(&s.Name, &s.State, &s.Aggregates, &s.Events, &s.Bytes, &s.SHA256, &s.CreateTime, &s.UpdateTime)
	return s, err
}

// ArchiveSegments returns the segments the catalog records, in the order
// of their names: every one, or only the one named name.
func (v *Views) ArchiveSegments(ctx context.Context, name string) ([]ArchiveSegment, error) {
	rows, err := v.pool.Query(ctx, `SELECT `+segmentColumns+` FROM archive_segments sg
WHERE $1 = '' OR sg.name = $1 ORDER BY sg.name COLLATE "C"`, name)
	if err != nil {
		return nil, fmt.Errorf("archive catalog: segments: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanSegment)
	if err != nil {
		return nil, fmt.Errorf("archive catalog: segments: %w", err)
	}
	return out, nil
}

// SegmentStretches returns the stretches the catalog records in a
// segment, in increasing bytewise order of subject (the segment index's
// order). Their first sequences and event counts are known from STORED on.
func (v *Views) SegmentStretches(ctx context.Context, segment string) ([]ArchivedStretch, error) {
	rows, err := v.pool.Query(ctx, `SELECT `+stretchColumns+`
FROM archived_aggregates a WHERE a.segment = $1 ORDER BY a.subject COLLATE "C"`, segment)
	if err != nil {
		return nil, fmt.Errorf("archive catalog: aggregates of segment %s: %w", segment, err)
	}
	out, err := pgx.CollectRows(rows, scanStretch)
	if err != nil {
		return nil, fmt.Errorf("archive catalog: aggregates of segment %s: %w", segment, err)
	}
	return out, nil
}

// ArchiveStatus is the archive's state as the catalog records it.
type ArchiveStatus struct {
	// Segments counts the segments by state (INTENT, STORED, PURGED,
	// DONE).
	Segments map[string]int64
	// Aggregates, Events and Bytes count what stored segments hold.
	Aggregates int64
	// Events counts the events of stored segments.
	Events int64
	// Bytes is the size of stored segments.
	Bytes int64
	// OldestEnd and NewestEnd bound the ends of the stretches stored
	// segments hold; zero when there is none.
	OldestEnd time.Time
	// NewestEnd is the latest end of an archived stretch.
	NewestEnd time.Time
	// LastPass is when the archiver's last pass ended, by its clock; zero
	// before any. Retention is the window it applied, LastPassError its
	// error ("" when it succeeded).
	LastPass time.Time
	// Retention is the retention window of the last pass.
	Retention time.Duration
	// LastPassError is why the last pass failed, "" if it did not.
	LastPassError string
	// Unfinished are the segments not DONE, oldest first, at most
	// maxUnfinished.
	Unfinished []ArchiveSegment
}

// maxUnfinished bounds ArchiveStatus.Unfinished.
const maxUnfinished = 100

// ArchiveStatus reads the archive's state from the catalog.
func (v *Views) ArchiveStatus(ctx context.Context) (ArchiveStatus, error) {
	st := ArchiveStatus{Segments: map[string]int64{}}
	rows, err := v.pool.Query(ctx, `SELECT state, count(*), coalesce(sum(bytes), 0) FROM archive_segments GROUP BY state`)
	if err != nil {
		return st, fmt.Errorf("archive catalog: status: %w", err)
	}
	for rows.Next() {
		var state string
		var n, bytes int64
		if err := rows.Scan(&state, &n, &bytes); err != nil {
			rows.Close()
			return st, fmt.Errorf("archive catalog: status: %w", err)
		}
		st.Segments[state] = n
		if state != "INTENT" {
			st.Bytes += bytes
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("archive catalog: status: %w", err)
	}
	var oldest, newest *time.Time
	if err := v.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(a.events), 0), min(a.end_time), max(a.end_time)
FROM archived_aggregates a JOIN archive_segments sg ON sg.name = a.segment WHERE `+storedSegment).
		Scan(&st.Aggregates, &st.Events, &oldest, &newest); err != nil {
		return st, fmt.Errorf("archive catalog: status: %w", err)
	}
	if oldest != nil && newest != nil {
		st.OldestEnd, st.NewestEnd = *oldest, *newest
	}
	var seconds int64
	err = v.pool.QueryRow(ctx, `SELECT pass_time, retention_seconds, error FROM archive_last_pass`).Scan(&st.LastPass, &seconds, &st.LastPassError)
	switch {
	case err == nil:
		st.Retention = time.Duration(seconds) * time.Second
	case !errors.Is(err, pgx.ErrNoRows):
		return st, fmt.Errorf("archive catalog: the last pass: %w", err)
	}
	rows, err = v.pool.Query(ctx, `SELECT `+segmentColumns+` FROM archive_segments sg WHERE sg.state <> 'DONE'
ORDER BY sg.create_time, sg.name LIMIT $1`, maxUnfinished)
	if err != nil {
		return st, fmt.Errorf("archive catalog: unfinished segments: %w", err)
	}
	if st.Unfinished, err = pgx.CollectRows(rows, scanSegment); err != nil {
		return st, fmt.Errorf("archive catalog: unfinished segments: %w", err)
	}
	return st, nil
}
