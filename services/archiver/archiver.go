// Package archiver moves the histories of ended aggregates out of the
// events stream into archive segments (events/archive), after a retention
// window: terminated game servers, ended game sessions with their player
// sessions, and deleted fleets (docs/architecture.md, "The archive"). The
// stream and the views then keep what is live, and the archive keeps the
// rest, compressed and checksummed, for audits.
//
// A pass (RunOnce) takes ended aggregates from the views, writes their
// whole histories into one segment, records it in the archive catalog
// (migrations 00009), purges their subjects from the stream, and removes
// their rows from the views, in an order that makes a crash at any point
// lose nothing and duplicate nothing:
//
//  1. intent: the segment's name and its aggregates (subject and last
//     sequence) are recorded, state INTENT. Nothing is written yet.
//  2. stored: the segment is written from the stream (the writer's bytes
//     depend only on the events, so writing it again after a crash makes
//     the same file, which the store takes as already stored), read back
//     and verified (every block and the file's SHA-256), and recorded with
//     its sum, state STORED, with each aggregate's first sequence, event
//     count and the stored times of its first and last events (which an
//     export of a time range finds it by).
//  3. purged: each subject is purged up to its recorded last sequence,
//     never further, so an event appended after the read stays in the
//     stream; then state PURGED. A purge is idempotent.
//  4. done: the aggregates' view rows and events-table rows are removed in
//     the transaction that sets DONE.
//
// Every pass first finishes the segments an earlier pass left unfinished,
// from their recorded state, before it starts another; an aggregate whose
// history is recorded is never taken again, so no history goes into two
// segments, and no subject is purged before its segment is durably stored,
// verified and recorded.
//
// What has ended, and when it may go, the views say (postgres.EndedBefore):
// a terminated game server once no running game session names it, an
// ended game session once its server is no longer allocated to it, a
// deleted fleet once none of its game servers and game sessions is left in
// the views; never one with a dead letter. The end is the view row's
// update time; an aggregate goes once its row is at its subject's last
// event in the stream.
//
// Every pass that runs records its end, its retention and its error in the
// catalog (archive_last_pass), for `tetherctl archive status`.
//
// A pass holds the archive lock (postgres.LockArchiving) for its whole
// length: a rebuild or a check of the views waits for it, and no pass
// starts while one runs. The leading controller runs the passes
// (controller.Options.WhileLeading, `tether controller --archive-dir`).
package archiver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
)

// Defaults of Options.
const (
	// DefaultRetention is how long an aggregate stays in the stream and the
	// views after it ended: a week of history is where operators look.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultMaxAggregates bounds the aggregates of one segment.
	DefaultMaxAggregates = 1000
	// DefaultMaxEvents bounds the events of one segment, as the events
	// table counts them (an aggregate alone larger than it still gets a
	// segment).
	DefaultMaxEvents = 100_000
	// DefaultMaxSegments bounds the segments one pass writes.
	DefaultMaxSegments = 10
	// DefaultInterval is the time between passes of Run.
	DefaultInterval = time.Minute
)

// Stream is what the archiver needs of the events stream; *natsjs.Store
// is one.
type Stream interface {
	// Stored returns a subject's messages, as stored, from from to to.
	Stored(ctx context.Context, subject string, from, to uint64) ([]natsjs.StoredMessage, error)
	// LeaderLastSequence returns the sequence of a subject's last message.
	LeaderLastSequence(ctx context.Context, subject string) (uint64, error)
	// PurgeSubject removes a subject's messages up to a sequence.
	PurgeSubject(ctx context.Context, subject string, upTo uint64) (uint64, error)
	// PurgesAllowed reports whether the stream allows purges.
	PurgesAllowed(ctx context.Context) error
}

var _ Stream = (*natsjs.Store)(nil)

// Options configure an Archiver.
type Options struct {
	// Stream is the events stream (required).
	Stream Stream
	// Pool is the PostgreSQL pool of the views and the archive catalog
	// (required).
	Pool *pgxpool.Pool
	// Segments is where segments are stored (required): archive.Dir.
	Segments archive.SegmentStore
	// Retention is how long after its end an aggregate is archived;
	// default DefaultRetention.
	Retention time.Duration
	// MaxAggregates bounds the aggregates of a segment; default
	// DefaultMaxAggregates.
	MaxAggregates int
	// MaxEvents bounds the events of a segment; default DefaultMaxEvents.
	MaxEvents int
	// MaxSegments bounds the new segments of a pass; default
	// DefaultMaxSegments. Unfinished segments are finished besides.
	MaxSegments int
	// Now is the clock retention is judged on; default time.Now.
	Now func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
	// MeterProvider; default no-op.
	MeterProvider metric.MeterProvider
}

func (o *Options) setDefaults() {
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.MaxAggregates == 0 {
		o.MaxAggregates = DefaultMaxAggregates
	}
	if o.MaxEvents == 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.MaxSegments == 0 {
		o.MaxSegments = DefaultMaxSegments
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MeterProvider == nil {
		o.MeterProvider = metricnoop.NewMeterProvider()
	}
}

// Validate reports a missing or bad option.
func (o *Options) Validate() error {
	switch {
	case o.Stream == nil:
		return errors.New("archiver: Stream is required")
	case o.Pool == nil:
		return errors.New("archiver: Pool is required")
	case o.Segments == nil:
		return errors.New("archiver: Segments is required")
	case o.Retention < 0:
		return fmt.Errorf("archiver: negative retention %s", o.Retention)
	case o.MaxAggregates < 0 || o.MaxEvents < 0 || o.MaxSegments < 0:
		return fmt.Errorf("archiver: negative limits: %d aggregates, %d events, %d segments", o.MaxAggregates, o.MaxEvents, o.MaxSegments)
	}
	return nil
}

// Result says what a pass did.
type Result struct {
	// Busy is set when the pass did nothing because a rebuild, a check or
	// another pass held the archive lock.
	Busy bool
	// Segments counts the segments the pass finished (done), new or
	// resumed.
	Segments int
	// Resumed counts those an earlier pass had begun.
	Resumed int
	// Aggregates counts the aggregates archived (their segments done).
	Aggregates int
	// Events counts the events of those aggregates.
	Events int64
	// Bytes counts the bytes of those segments.
	Bytes int64
	// Purged counts the events purged from the stream.
	Purged uint64
	// Rows counts the view and events-table rows removed.
	Rows int64
	// Deferred counts ended aggregates left for a later pass because the
	// stream holds events their view rows do not reflect yet.
	Deferred int
	// LateEvents counts events appended to aggregates after the pass read
	// them (illegal on an ended aggregate): they stay in the stream.
	LateEvents int
	// Duration is the pass's.
	Duration time.Duration
}

// step names a point in a pass, after the work it names (afterStep).
type step string

// The steps of a segment, in order.
const (
	stepSelected  step = "selected"   // aggregates chosen, nothing recorded
	stepIntent    step = "intent"     // INTENT committed
	stepPut       step = "put"        // segment in the store, not recorded
	stepStored    step = "stored"     // STORED committed
	stepPurgedOne step = "purged-one" // the first subject purged
	stepPurgedAll step = "purged-all" // every subject purged, not recorded
	stepPurged    step = "purged"     // PURGED committed
	stepDone      step = "done"       // rows removed and DONE committed
)

// Archiver archives ended aggregates. It is safe for concurrent use; its
// passes run one at a time.
type Archiver struct {
	opts    Options
	log     *slog.Logger
	views   *postgres.Views
	catalog catalog
	metrics *metrics

	mu sync.Mutex // one pass at a time
	// afterStep, when set, is called after each step of a segment (tests
	// stop the process there).
	afterStep func(step)
}

// New returns an archiver; RunOnce or Run starts passes.
func New(opts Options) (*Archiver, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.MeterProvider)
	if err != nil {
		return nil, err
	}
	return &Archiver{opts: opts, log: opts.Logger, views: postgres.NewViews(opts.Pool), catalog: catalog{pool: opts.Pool}, metrics: m}, nil
}

// Run runs a pass at once and then every interval (DefaultInterval if not
// positive) until ctx ends. A failed pass is logged and counted, and the
// next pass resumes its work.
func (a *Archiver) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := a.RunOnce(ctx); err != nil && ctx.Err() == nil {
			a.log.ErrorContext(ctx, "archive pass failed; the next pass resumes its work", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce runs one pass: it finishes the segments earlier passes left
// unfinished, then archives the aggregates that ended more than the
// retention window ago, up to MaxSegments segments. A pass that finds the
// archive lock held does nothing (Result.Busy).
func (a *Archiver) RunOnce(ctx context.Context) (Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := time.Now()
	var res Result
	err := a.pass(ctx, start, &res)
	res.Duration = time.Since(start)
	a.metrics.pass(ctx, res, err)
	if !res.Busy && ctx.Err() == nil {
		// For `tetherctl archive status`; the pass's outcome does not
		// depend on it.
		if rerr := a.catalog.lastPass(ctx, a.opts.Now(), a.opts.Retention, err); rerr != nil {
			a.log.WarnContext(ctx, "archiver could not record its pass in the catalog", "err", rerr)
		}
	}
	attrs := []any{"segments", res.Segments, "resumed", res.Resumed, "aggregates", res.Aggregates, "events", res.Events,
		"bytes", res.Bytes, "purged", res.Purged, "rows", res.Rows, "deferred", res.Deferred, "late_events", res.LateEvents,
		"duration", res.Duration}
	switch {
	case err != nil:
		return res, err
	case res.Busy:
		a.log.InfoContext(ctx, "archive pass skipped: a rebuild, a check or another pass holds the archive lock")
	case res.Segments > 0:
		a.log.InfoContext(ctx, "archive pass done", attrs...)
	default:
		a.log.DebugContext(ctx, "archive pass done", attrs...)
	}
	return res, nil
}

// tempRemover is a store that leaves temporary files behind a crash
// (archive.Dir).
type tempRemover interface {
	RemoveTemp(before time.Time) (int, error)
}

// pass is RunOnce's work.
func (a *Archiver) pass(ctx context.Context, start time.Time, res *Result) error {
	release, err := postgres.LockArchiving(ctx, a.opts.Pool)
	if errors.Is(err, postgres.ErrArchiveBusy) {
		res.Busy = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("archiver: %w", err)
	}
	defer release()
	if err := a.opts.Stream.PurgesAllowed(ctx); err != nil {
		return fmt.Errorf("archiver: %w", err)
	}
	// Only a pass writes segments, and passes do not overlap: a temporary
	// file from before this one is a crashed pass's.
	if tr, ok := a.opts.Segments.(tempRemover); ok {
		if n, err := tr.RemoveTemp(start); err != nil {
			a.log.WarnContext(ctx, "archiver could not remove a crashed pass's temporary files", "err", err)
		} else if n > 0 {
			a.log.InfoContext(ctx, "archiver removed a crashed pass's temporary files", "files", n)
		}
	}

	unfinished, err := a.catalog.unfinished(ctx)
	if err != nil {
		return err
	}
	for _, seg := range unfinished {
		a.log.InfoContext(ctx, "archiver resumes a segment an earlier pass left unfinished", "segment", seg.name, "state", seg.state)
		if err := a.finish(ctx, seg, res); err != nil {
			return err
		}
		res.Resumed++
	}
	// Until nothing is due: a segment done may free others (a deleted
	// fleet goes once its servers have).
	deferred := map[string]bool{}
	defer func() { res.Deferred = len(deferred) }()
	for range a.opts.MaxSegments {
		seg, err := a.begin(ctx, deferred)
		if err != nil || seg == nil {
			return err
		}
		if err := a.finish(ctx, seg, res); err != nil {
			return err
		}
	}
	return nil
}

// begin chooses the next segment's aggregates and records its intent; nil
// when none is due. It adds the aggregates it leaves for a later pass to
// deferred.
func (a *Archiver) begin(ctx context.Context, deferred map[string]bool) (*segment, error) {
	cutoff := a.opts.Now().Add(-a.opts.Retention)
	ended, err := a.views.EndedBefore(ctx, cutoff, a.opts.MaxAggregates)
	if err != nil {
		return nil, fmt.Errorf("archiver: %w", err)
	}
	var aggs []aggregate
	var events int64
	for _, e := range ended {
		if len(aggs) > 0 && events+e.Events > int64(a.opts.MaxEvents) {
			break
		}
		// The view row must reflect the subject's whole history: the
		// stream's last event on it is the row's. Otherwise the projector
		// is behind, or an event came after the end (which the projector
		// dead-letters, and then EndedBefore leaves the aggregate out).
		last, err := a.opts.Stream.LeaderLastSequence(ctx, e.Subject)
		if err != nil {
			return nil, fmt.Errorf("archiver: %w", err)
		}
		if last != e.LastSequence {
			if deferred[e.Name] {
				continue
			}
			deferred[e.Name] = true
			a.log.DebugContext(ctx, "archiver leaves an ended aggregate for a later pass: its view row is not at its last event",
				"aggregate", e.Name, "row_sequence", e.LastSequence, "stream_sequence", last)
			continue
		}
		delete(deferred, e.Name) // caught up since
		events += e.Events
		aggs = append(aggs, aggregate{name: e.Name, subject: e.Subject, kind: e.Kind, last: e.LastSequence, endTime: e.EndTime})
	}
	if len(aggs) == 0 {
		return nil, nil
	}
	slices.SortFunc(aggs, func(x, y aggregate) int { return strings.Compare(x.subject, y.subject) })
	seg := &segment{name: segmentName(aggs), state: stateIntent, aggs: aggs}
	a.after(stepSelected)
	if err := a.catalog.intent(ctx, seg, a.opts.Now()); err != nil {
		return nil, err
	}
	a.after(stepIntent)
	return seg, nil
}

// segmentName names a segment after its aggregates: the same aggregates,
// the same name. The largest last sequence comes first, so names sort
// roughly by when their aggregates ended.
func segmentName(aggs []aggregate) string {
	h := sha256.New()
	var top uint64
	for _, ag := range aggs {
		fmt.Fprintf(h, "%s\x00%d\n", ag.subject, ag.last)
		top = max(top, ag.last)
	}
	return fmt.Sprintf("events-%020d-%s.seg", top, hex.EncodeToString(h.Sum(nil))[:16])
}

// finish carries a segment from its recorded state to DONE.
func (a *Archiver) finish(ctx context.Context, seg *segment, res *Result) error {
	if seg.state == stateIntent {
		if err := a.store(ctx, seg); err != nil {
			return err
		}
	}
	if seg.state == stateStored {
		if err := a.purge(ctx, seg, res); err != nil {
			return err
		}
	}
	if seg.state == statePurged {
		rows, err := a.catalog.done(ctx, seg, a.opts.Now())
		if err != nil {
			return err
		}
		res.Rows += rows
		a.after(stepDone)
	}
	res.Segments++
	res.Aggregates += len(seg.aggs)
	res.Bytes += seg.bytes
	for _, ag := range seg.aggs {
		res.Events += ag.events
	}
	a.metrics.segment(ctx, seg)
	a.log.InfoContext(ctx, "archive segment done", "segment", seg.name, "aggregates", len(seg.aggs), "events", seg.events, "bytes", seg.bytes)
	return nil
}

// errHistoryChanged marks a recorded aggregate whose history in the stream
// no longer ends where its intent says: someone else purged it.
var errHistoryChanged = errors.New("archiver: an aggregate's history in the stream is not what its intent recorded")

// store writes the segment from the stream, verifies it and records it
// STORED.
func (a *Archiver) store(ctx context.Context, seg *segment) error {
	counts := make([]int, len(seg.aggs))
	times := make([][2]time.Time, len(seg.aggs)) // stored times of each one's first and last events
	sum, _, err := archive.PutSegment(ctx, a.opts.Segments, seg.name, archive.WriterOptions{}, func(w *archive.Writer) error {
		for i, ag := range seg.aggs {
			msgs, err := a.opts.Stream.Stored(ctx, ag.subject, 1, ag.last)
			if err != nil {
				return err
			}
			if len(msgs) == 0 || msgs[len(msgs)-1].Sequence != ag.last {
				return fmt.Errorf("%w: %s should end at %d, read %d events", errHistoryChanged, ag.subject, ag.last, len(msgs))
			}
			recs := make([]archive.Record, len(msgs))
			for j, m := range msgs {
				recs[j] = archive.Record{Sequence: m.Sequence, Subject: m.Subject, Time: m.Time, Header: m.Header, Data: m.Data}
			}
			counts[i] = len(recs)
			times[i] = [2]time.Time{recs[0].Time, recs[len(recs)-1].Time}
			if err := w.Add(ag.subject, recs); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archiver: write segment %s: %w", seg.name, err)
	}
	a.after(stepPut)
	if err := a.verify(ctx, seg, sum, counts); err != nil {
		return err
	}
	for i := range seg.aggs {
		seg.aggs[i].firstTime, seg.aggs[i].lastTime = times[i][0], times[i][1]
	}
	seg.sum, seg.bytes, seg.events = sum.SHA256, sum.Size, int64(sum.Events)
	if err := a.catalog.stored(ctx, seg, a.opts.Now()); err != nil {
		return err
	}
	seg.state = stateStored
	a.after(stepStored)
	return nil
}

// verify reads the stored segment back: every block and the file's
// SHA-256 must check, the sum must be the one written, and its index must
// hold exactly the segment's aggregates, each ending at its recorded last
// sequence with the events written. It fills in their first sequences and
// event counts.
func (a *Archiver) verify(ctx context.Context, seg *segment, sum archive.Summary, counts []int) error {
	r, err := archive.OpenSegment(ctx, a.opts.Segments, seg.name)
	if err != nil {
		return fmt.Errorf("archiver: verify segment %s: %w", seg.name, err)
	}
	defer func() { _ = r.Close() }() // read only
	if err := r.Verify(); err != nil {
		return fmt.Errorf("archiver: verify segment %s: %w", seg.name, err)
	}
	if r.Sum() != sum.SHA256 || r.Size() != sum.Size {
		return fmt.Errorf("archiver: verify segment %s: the store holds %d bytes with sum %x, the writer wrote %d with %x",
			seg.name, r.Size(), r.Sum(), sum.Size, sum.SHA256)
	}
	index := r.Aggregates()
	if len(index) != len(seg.aggs) {
		return fmt.Errorf("archiver: verify segment %s: %d aggregates, want %d", seg.name, len(index), len(seg.aggs))
	}
	for i, in := range index {
		ag := &seg.aggs[i]
		if in.Subject != ag.subject || in.LastSequence != ag.last || in.Events != counts[i] {
			return fmt.Errorf("archiver: verify segment %s: aggregate %d is %s ending at %d with %d events, want %s ending at %d with %d",
				seg.name, i, in.Subject, in.LastSequence, in.Events, ag.subject, ag.last, counts[i])
		}
		ag.first, ag.events = in.FirstSequence, int64(in.Events)
	}
	return nil
}

// purge removes each aggregate's events from the stream up to its last
// archived sequence, then records the segment PURGED.
func (a *Archiver) purge(ctx context.Context, seg *segment, res *Result) error {
	for i, ag := range seg.aggs {
		last, err := a.opts.Stream.LeaderLastSequence(ctx, ag.subject)
		if err != nil {
			return fmt.Errorf("archiver: %w", err)
		}
		if last > ag.last {
			res.LateEvents++
			a.metrics.countLate(ctx)
			a.log.WarnContext(ctx, "an event was appended to an ended aggregate after the archiver read it; it stays in the stream",
				"aggregate", ag.name, "archived_up_to", ag.last, "last_sequence", last, "segment", seg.name)
		}
		n, err := a.opts.Stream.PurgeSubject(ctx, ag.subject, ag.last)
		if err != nil {
			return fmt.Errorf("archiver: %w", err)
		}
		res.Purged += n
		a.metrics.countPurged(ctx, n)
		if i == 0 {
			a.after(stepPurgedOne)
		}
	}
	a.after(stepPurgedAll)
	if err := a.catalog.advance(ctx, seg.name, stateStored, statePurged, a.opts.Now()); err != nil {
		return err
	}
	seg.state = statePurged
	a.after(stepPurged)
	return nil
}

// after calls the step hook, if any.
func (a *Archiver) after(s step) {
	if a.afterStep != nil {
		a.afterStep(s)
	}
}
