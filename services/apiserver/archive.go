package apiserver

import (
	"container/heap"
	"container/list"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tetherhq/tether/events"

	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
)

// Reads of the archive: the histories of ended aggregates that the
// archiver (services/archiver) moved out of the stream into segments
// (events/archive), recorded in the archive catalog. History reads and
// watches started in the past find archived events here and merge them
// with the stream's by sequence; each says the segment it came from.

// Error reasons of archive reads.
const (
	// ReasonArchiveNotRead: the answer needs archived events, and this API
	// server does not read the segment store (no --archive-dir).
	ReasonArchiveNotRead = "ARCHIVE_NOT_READ"
	// ReasonArchiveUnreadable: a segment the catalog records is missing
	// from the store, or corrupt (DATA_LOSS).
	ReasonArchiveUnreadable = "ARCHIVE_UNREADABLE"
)

// archiveCatalog is what the API reads of the archive catalog
// (projections/postgres.Views).
type archiveCatalog interface {
	ArchivedHistory(ctx context.Context, aggregate string, from uint64) ([]postgres.ArchivedStretch, error)
	ArchivedStretches(ctx context.Context, r postgres.ArchiveRange) ([]postgres.ArchivedStretch, error)
	ArchiveSegments(ctx context.Context, name string) ([]postgres.ArchiveSegment, error)
	SegmentStretches(ctx context.Context, segment string) ([]postgres.ArchivedStretch, error)
	ArchiveStatus(ctx context.Context) (postgres.ArchiveStatus, error)
}

var _ archiveCatalog = (*postgres.Views)(nil)

// storedDecoder decodes stored messages as the event store's reads do,
// verifying signatures as it does (events/natsjs.Store).
type storedDecoder interface {
	Decode(m natsjs.StoredMessage) (events.Envelope, error)
}

// maxOpenSegments bounds the segments an archive reader keeps open.
const maxOpenSegments = 64

// archiveReader reads archived events: where the catalog says they are,
// from the segment store, through a bounded cache of open segments. A nil
// catalog (views that are not PostgreSQL's) turns everything off; a nil
// store (no --archive-dir) leaves the catalog's answers only.
type archiveReader struct {
	catalog archiveCatalog
	store   archive.SegmentStore
	decode  func(natsjs.StoredMessage) (events.Envelope, error)

	mu    sync.Mutex
	open  map[string]*openSegment
	order *list.List // of *openSegment, most recently used first
	max   int
}

// openSegment is a cached open segment, shared by the reads using it.
type openSegment struct {
	name    string
	r       *archive.Reader
	refs    int           // reads using it
	evicted bool          // out of the cache: closed by its last read
	elem    *list.Element // in archiveReader.order, while cached
}

// newArchiveReader returns the archive reader of a server's options.
func newArchiveReader(opts Options) *archiveReader {
	a := &archiveReader{store: opts.Archive, open: map[string]*openSegment{}, order: list.New(), max: maxOpenSegments}
	a.catalog, _ = opts.Views.(archiveCatalog)
	if d, ok := opts.Store.(storedDecoder); ok {
		a.decode = d.Decode
	} else {
		a.decode = func(m natsjs.StoredMessage) (events.Envelope, error) {
			env, err := events.Unmarshal(m.Data)
			env.Sequence = m.Sequence
			return env, err
		}
	}
	return a
}

// sourced is an event with where it was read: an archive segment, or the
// stream ("").
type sourced struct {
	events.Envelope
	segment string
}

// notRead is the error of an answer that needs the events of segment when
// this server does not read the segment store.
func notRead(name, segment string) error {
	return &apiError{code: codes.FailedPrecondition, reason: ReasonArchiveNotRead, msg: fmt.Sprintf(
		"the history of %s is partly in archive segment %s, and this API server does not read the archive: start it with --archive-dir (the controller's archive directory)",
		name, segment)}
}

// unreadable is the error of a segment that cannot be read.
func unreadable(segment string, err error) error {
	return &apiError{code: codes.DataLoss, reason: ReasonArchiveUnreadable, msg: fmt.Sprintf(
		"archive segment %s, which the archive catalog records, cannot be read: %v (tetherctl archive verify)", segment, err)}
}

// acquire returns segment name open, from the cache or opened now; the
// caller releases it.
func (a *archiveReader) acquire(ctx context.Context, name string) (*openSegment, error) {
	a.mu.Lock()
	if s, ok := a.open[name]; ok {
		s.refs++
		a.order.MoveToFront(s.elem)
		a.mu.Unlock()
		return s, nil
	}
	a.mu.Unlock()
	r, err := archive.OpenSegment(ctx, a.store, name)
	if err != nil {
		return nil, unreadable(name, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.open[name]; ok { // opened meanwhile by another read
		_ = r.Close() // read only: nothing to lose
		s.refs++
		a.order.MoveToFront(s.elem)
		return s, nil
	}
	s := &openSegment{name: name, r: r, refs: 1}
	s.elem = a.order.PushFront(s)
	a.open[name] = s
	for a.order.Len() > a.max {
		old := a.order.Remove(a.order.Back()).(*openSegment)
		delete(a.open, old.name)
		old.evicted = true
		if old.refs == 0 {
			_ = old.r.Close() // read only
		}
	}
	return s, nil
}

// release ends a read of s.
func (a *archiveReader) release(s *openSegment) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.refs--
	if s.refs == 0 && s.evicted {
		_ = s.r.Close() // read only
	}
}

// records reads a subject's records from a segment.
func (a *archiveReader) records(ctx context.Context, segment, subject string) ([]archive.Record, error) {
	s, err := a.acquire(ctx, segment)
	if err != nil {
		return nil, err
	}
	defer a.release(s)
	recs, err := s.r.Read(subject)
	if err != nil {
		return nil, unreadable(segment, err)
	}
	return recs, nil
}

// decodeRecord decodes an archived record as the store decodes events.
func (a *archiveReader) decodeRecord(rec archive.Record) (events.Envelope, error) {
	return a.decode(natsjs.StoredMessage{Sequence: rec.Sequence, Subject: rec.Subject, Time: rec.Time, Header: rec.Header, Data: rec.Data})
}

// history returns the archived events of an aggregate from sequence from
// on, oldest first, and the last sequence of each archived stretch they
// come from (each the end of one life of the aggregate: a name may come
// back, on another subject when a game server's names its host); none
// when nothing of it is archived. name is the resource asked for, for
// errors. An undecodable record is left out, as the stream's reads leave
// it out.
func (a *archiveReader) history(ctx context.Context, name, aggregate string, from uint64) ([]sourced, []uint64, error) {
	if a.catalog == nil {
		return nil, nil, nil
	}
	stretches, err := a.catalog.ArchivedHistory(ctx, aggregate, from)
	if err != nil || len(stretches) == 0 {
		return nil, nil, err
	}
	if a.store == nil {
		return nil, nil, notRead(name, stretches[len(stretches)-1].Segment)
	}
	var out []sourced
	var ends []uint64
	for _, st := range stretches {
		recs, err := a.records(ctx, st.Segment, st.Subject)
		if err != nil {
			return nil, nil, err
		}
		for _, rec := range recs {
			if rec.Sequence < from {
				continue
			}
			env, err := a.decodeRecord(rec)
			if errors.Is(err, events.ErrUndecodable) {
				continue // the stream's reads skipped it too (natsjs: logged and counted there)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("archive segment %s: %w", st.Segment, err)
			}
			out = append(out, sourced{env, st.Segment})
		}
		ends = append(ends, st.LastSequence)
	}
	return out, ends, nil
}

// mergeHistories merges a subject's events read from the stream and from
// the archive in sequence order. An event in both (its segment is stored
// but the archiver has not purged it yet) is the stream's.
func mergeHistories(stream []events.Envelope, archived []sourced) []sourced {
	out := make([]sourced, 0, len(stream)+len(archived))
	for _, e := range stream {
		out = append(out, sourced{Envelope: e})
	}
	if len(archived) == 0 {
		return out
	}
	out = append(out, archived...)
	slices.SortStableFunc(out, func(x, y sourced) int {
		switch {
		case x.Sequence < y.Sequence:
			return -1
		case x.Sequence > y.Sequence:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(out, func(x, y sourced) bool { return x.Sequence == y.Sequence })
}

// archivedNotFound turns a view's NOT_FOUND for aggregate (asked for as
// name: the aggregate, or a player session of it) into a NOT_FOUND that
// says the aggregate was archived and where its history is, when the
// catalog says so; any other error is returned as it is.
func (s *Server) archivedNotFound(ctx context.Context, name, aggregate string, err error) error {
	if !errors.Is(err, projections.ErrNotFound) || s.archive.catalog == nil {
		return err
	}
	stretches, cerr := s.archive.catalog.ArchivedHistory(ctx, aggregate, 0)
	if cerr != nil || len(stretches) == 0 {
		return err
	}
	last := stretches[len(stretches)-1]
	var b strings.Builder
	if name != aggregate {
		fmt.Fprintf(&b, "%s not found: ", name)
	}
	fmt.Fprintf(&b, "%s was archived: it ended at %s, and its history (%d events, to sequence %d) is in archive segment %s; "+
		"read it with GET /v1/%s/events, :stateAt or :explain (tetherctl audit history, state, explain)",
		aggregate, last.EndTime.UTC().Format(time.RFC3339), last.Events, last.LastSequence, last.Segment, name)
	if s.archive.store == nil {
		b.WriteString(", from an API server that reads the archive (--archive-dir)")
	}
	return &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: b.String(),
		meta: map[string]string{ArchiveSegmentMetadata: last.Segment, "aggregate": aggregate}}
}

// ArchiveSegmentMetadata is the ErrorInfo metadata key of the NOT_FOUND of
// an archived resource: the segment its history is in.
const ArchiveSegmentMetadata = "archiveSegment"

// archiveRange is what a watch started in the past reads of the archive:
// the events after a sequence or stored from a time, up to a sequence and
// before a time, on subjects.
type archiveRange struct {
	after    uint64    // 0: from start
	start    time.Time // zero: after after
	end      time.Time // zero: no bound but until
	until    uint64    // the stream's last sequence when the watch started
	subjects []string  // nil: every subject
	// learn, when set, is shown each archived game session's first event
	// (a fleet filter learns the sessions' fleets from it).
	learn func(events.Envelope)
}

// in reports whether a record is in the range.
func (q archiveRange) in(rec archive.Record) bool {
	return rec.Sequence > q.after && rec.Sequence <= q.until &&
		(q.start.IsZero() || !rec.Time.Before(q.start)) && (q.end.IsZero() || rec.Time.Before(q.end))
}

// keeps reports whether q's subjects (NATS subject filters: '*' one
// token, '>' the rest) match subject.
func (q archiveRange) keeps(subject string) bool {
	return q.subjects == nil || slices.ContainsFunc(q.subjects, func(f string) bool { return server.SubjectMatchesFilter(subject, f) })
}

// anyIn reports whether the catalog records an archived stretch that may
// hold events of q, and the segment of the first.
func (a *archiveReader) anyIn(ctx context.Context, q archiveRange) (string, bool, error) {
	r := postgres.ArchiveRange{After: q.after, Until: q.until, Start: q.start, End: q.end, Limit: 500}
	for {
		page, err := a.catalog.ArchivedStretches(ctx, r)
		if err != nil {
			return "", false, err
		}
		for _, st := range page {
			if q.keeps(st.Subject) {
				return st.Segment, true, nil
			}
		}
		if len(page) < r.Limit {
			return "", false, nil
		}
		last := page[len(page)-1]
		r.AfterFirst, r.AfterSubject = last.FirstSequence, last.Subject
	}
}

// cursor is an archived stretch's records in q, being merged.
type cursor struct {
	recs    []archive.Record
	segment string
}

// cursors is a min-heap of cursors by their next record's sequence.
type cursors []*cursor

func (c cursors) Len() int           { return len(c) }
func (c cursors) Less(i, j int) bool { return c[i].recs[0].Sequence < c[j].recs[0].Sequence }
func (c cursors) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *cursors) Push(x any)        { *c = append(*c, x.(*cursor)) }
func (c *cursors) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// events yields the archived events of q in sequence order, each with its
// segment. It reads the catalog a page of stretches at a time, in the
// order of their first sequences, and holds the records of the stretches
// that overlap the sequence reached: about the aggregates that were alive
// together then. An event that does not decode is yielded with an error
// wrapping events.ErrUndecodable, as the stream's watch does; any other
// error ends the iteration.
func (a *archiveReader) events(ctx context.Context, name string, q archiveRange) iter.Seq2[sourced, error] {
	return func(yield func(sourced, error) bool) {
		r := postgres.ArchiveRange{After: q.after, Until: q.until, Start: q.start, End: q.end, Limit: 500}
		var pending []postgres.ArchivedStretch
		more := true
		h := &cursors{}
		for {
			if len(pending) == 0 && more {
				page, err := a.catalog.ArchivedStretches(ctx, r)
				if err != nil {
					yield(sourced{}, err)
					return
				}
				pending, more = page, len(page) == r.Limit
				if len(page) > 0 {
					last := page[len(page)-1]
					r.AfterFirst, r.AfterSubject = last.FirstSequence, last.Subject
				}
			}
			if len(pending) > 0 && (h.Len() == 0 || pending[0].FirstSequence <= (*h)[0].recs[0].Sequence) {
				st := pending[0]
				pending = pending[1:]
				if !q.keeps(st.Subject) {
					continue
				}
				if a.store == nil {
					yield(sourced{}, notRead(name, st.Segment))
					return
				}
				recs, err := a.records(ctx, st.Segment, st.Subject)
				if err != nil {
					yield(sourced{}, err)
					return
				}
				if q.learn != nil && st.Kind == events.KindGameSession && len(recs) > 0 {
					if first, err := a.decodeRecord(recs[0]); err == nil {
						q.learn(first)
					}
				}
				recs = slices.DeleteFunc(recs, func(rec archive.Record) bool { return !q.in(rec) })
				if len(recs) > 0 {
					heap.Push(h, &cursor{recs: recs, segment: st.Segment})
				}
				continue
			}
			if h.Len() == 0 {
				return
			}
			c := (*h)[0]
			rec := c.recs[0]
			if c.recs = c.recs[1:]; len(c.recs) == 0 {
				heap.Pop(h)
			} else {
				heap.Fix(h, 0)
			}
			env, err := a.decodeRecord(rec)
			if err != nil {
				env.Sequence = rec.Sequence
				env.Aggregate, _ = events.NameFromSubject(rec.Subject)
				err = fmt.Errorf("archive segment %s: %w", c.segment, err)
			}
			if !yield(sourced{env, c.segment}, err) {
				return
			}
		}
	}
}

// fromStream marks a stream's events as read from it.
func fromStream(evs iter.Seq2[events.Envelope, error]) iter.Seq2[sourced, error] {
	return func(yield func(sourced, error) bool) {
		for e, err := range evs {
			if !yield(sourced{Envelope: e}, err) {
				return
			}
		}
	}
}

// merge yields the events of x and y, each in sequence order, in sequence
// order; an event in both (archived, not yet purged) comes once, x's. An
// error wrapping events.ErrUndecodable is an item at its sequence; any
// other error is yielded at once and ends the merge.
func merge(x, y iter.Seq2[sourced, error]) iter.Seq2[sourced, error] {
	return func(yield func(sourced, error) bool) {
		nextX, stopX := iter.Pull2(x)
		defer stopX()
		nextY, stopY := iter.Pull2(y)
		defer stopY()
		type item struct {
			e   sourced
			err error
			ok  bool
		}
		pull := func(next func() (sourced, error, bool)) item {
			e, err, ok := next()
			return item{e, err, ok}
		}
		fatal := func(it item) bool { return it.ok && it.err != nil && !errors.Is(it.err, events.ErrUndecodable) }
		a, b := pull(nextX), pull(nextY)
		for a.ok || b.ok {
			switch {
			case fatal(a):
				yield(a.e, a.err)
				return
			case fatal(b):
				yield(b.e, b.err)
				return
			case a.ok && b.ok && a.e.Sequence == b.e.Sequence:
				b = pull(nextY)
			case a.ok && (!b.ok || a.e.Sequence < b.e.Sequence):
				if !yield(a.e, a.err) {
					return
				}
				a = pull(nextX)
			default:
				if !yield(b.e, b.err) {
					return
				}
				b = pull(nextY)
			}
		}
	}
}

// concat yields x's items, then y's.
func concat(x, y iter.Seq2[sourced, error]) iter.Seq2[sourced, error] {
	return func(yield func(sourced, error) bool) {
		for e, err := range x {
			if !yield(e, err) || (err != nil && !errors.Is(err, events.ErrUndecodable)) {
				return
			}
		}
		for e, err := range y {
			if !yield(e, err) {
				return
			}
		}
	}
}
