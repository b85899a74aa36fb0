package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections"
)

// ErrStillPoison is returned by RetryDeadLetter when the event still cannot
// be applied with the current code.
var ErrStillPoison = errors.New("projections: the event still cannot be applied")

// DeadLetter is an event the projector could not apply.
type DeadLetter struct {
	// Sequence is the event's stream sequence.
	Sequence uint64
	// Subject is its stream subject.
	Subject string
	// Type is its type as the message header said (empty if none).
	Type string
	// Error is why it could not be applied.
	Error string
	// CreateTime is when it was dead-lettered.
	CreateTime time.Time
}

// DeadLetters returns up to limit dead letters with sequences above after,
// oldest first.
func (v *Views) DeadLetters(ctx context.Context, after uint64, limit int) ([]DeadLetter, error) {
	rows, err := v.pool.Query(ctx, `SELECT sequence, subject, type, error, create_time FROM dead_letters
WHERE sequence > $1 ORDER BY sequence LIMIT $2`, int64(after), limit)
	if err != nil {
		return nil, fmt.Errorf("views: dead letters: %w", err)
	}
	defer rows.Close()
	var out []DeadLetter
	for rows.Next() {
		var d DeadLetter
		var seq int64
		if err := rows.Scan(&seq, &d.Subject, &d.Type, &d.Error, &d.CreateTime); err != nil {
			return nil, fmt.Errorf("views: scan dead letter: %w", err)
		}
		d.Sequence = uint64(seq)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("views: dead letters: %w", err)
	}
	return out, nil
}

// DeadLetterCount counts the dead letters.
func (v *Views) DeadLetterCount(ctx context.Context) (int64, error) {
	var n int64
	if err := v.pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&n); err != nil {
		return 0, fmt.Errorf("views: count dead letters: %w", err)
	}
	return n, nil
}

// RetryResult is what RetryDeadLetter did.
type RetryResult struct {
	// Aggregate is the resource the event belongs to.
	Aggregate string
	// Resolved lists the dead letters of that aggregate that now apply and
	// were removed (the retried one first).
	Resolved []uint64
	// Sequence is the last sequence folded into the aggregate's row.
	Sequence uint64
}

// RetryDeadLetter re-applies a dead letter with the current code, after a
// fix (a fold corrected, or an Upcaster for bytes the decoder could not
// read). Events are never changed, so the event is read again from the
// stream at its sequence.
//
// Applying it on top of the aggregate's current row would put it after
// events that came later in the stream, and the views would no longer be
// what a replay produces. Instead the aggregate is folded again from its
// whole history up to the checkpoint, the event in its place; the row is
// replaced, the event recorded in the events table, and every dead letter of
// that aggregate that now applies is removed. The live projector is paused
// at a batch boundary meanwhile (the checkpoint row is locked), so nothing
// interleaves. If the event still fails, the error wraps ErrStillPoison and
// nothing changes; if an event that applied before fails now, nothing
// changes either and the error says to run a check.
//
// It uses Pool, JetStream, Stream, Partition, Upcast and Logger of opts.
func RetryDeadLetter(ctx context.Context, opts ReplayOptions, seq uint64) (RetryResult, error) {
	opts.setDefaults("")
	if opts.Pool == nil || opts.JetStream == nil {
		return RetryResult{}, errors.New("projections: retry: Pool and JetStream are required")
	}
	tx, err := opts.Pool.Begin(ctx)
	if err != nil {
		return RetryResult{}, fmt.Errorf("projections: retry: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // No-op after commit.
	var cp int64
	if err := tx.QueryRow(ctx, `SELECT sequence FROM projector_checkpoints WHERE partition = $1 FOR UPDATE`,
		opts.Partition).Scan(&cp); err != nil {
		return RetryResult{}, fmt.Errorf("projections: retry: lock checkpoint: %w", err)
	}
	var subject string
	err = tx.QueryRow(ctx, `SELECT subject FROM dead_letters WHERE sequence = $1`, int64(seq)).Scan(&subject)
	if errors.Is(err, pgx.ErrNoRows) {
		return RetryResult{}, fmt.Errorf("dead letter %d: %w", seq, projections.ErrNotFound)
	}
	if err != nil {
		return RetryResult{}, fmt.Errorf("projections: retry: read dead letter %d: %w", seq, err)
	}
	name, err := events.NameFromSubject(subject)
	if err != nil {
		return RetryResult{}, fmt.Errorf("%w: sequence %d: %w", ErrStillPoison, seq, err)
	}
	rows, err := tx.Query(ctx, `SELECT sequence FROM dead_letters WHERE subject = $1`, subject)
	if err != nil {
		return RetryResult{}, fmt.Errorf("projections: retry: dead letters of %s: %w", subject, err)
	}
	deadSeqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return RetryResult{}, fmt.Errorf("projections: retry: dead letters of %s: %w", subject, err)
	}
	dead := map[uint64]bool{}
	for _, s := range deadSeqs {
		dead[uint64(s)] = true
	}
	history, err := subjectHistory(ctx, opts.JetStream, opts.Stream, subject, uint64(cp))
	if err != nil {
		return RetryResult{}, err
	}
	r := refolder{tx: tx, subject: subject, history: history, dead: dead, retry: seq, upcast: opts.Upcast, verifier: opts.Verifier}
	res := RetryResult{Aggregate: name}
	if v, ok := views[events.KindOf(subject)]; ok {
		res.Sequence, err = v.refold(ctx, &r)
	} else {
		err = fmt.Errorf("%w: sequence %d: no view for subject %s", ErrStillPoison, seq, subject)
	}
	if err != nil {
		return RetryResult{}, err
	}
	if err := copyEvents(ctx, tx, r.envs, r.raw); err != nil {
		return RetryResult{}, err
	}
	res.Resolved = r.resolved
	resolved := make([]int64, len(r.resolved))
	for i, s := range r.resolved {
		resolved[i] = int64(s)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM dead_letters WHERE sequence = ANY($1)`, resolved); err != nil {
		return RetryResult{}, fmt.Errorf("projections: retry: remove dead letters: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return RetryResult{}, fmt.Errorf("projections: retry: commit: %w", err)
	}
	opts.Logger.Info("dead letter re-applied", "sequence", seq, "aggregate", name, "resolved", r.resolved)
	return res, nil
}

// rawEvent is one stored message of an aggregate.
type rawEvent struct {
	seq    uint64
	data   []byte
	header nats.Header
}

// subjectHistory reads an aggregate's messages up to sequence upTo.
func subjectHistory(ctx context.Context, js jetstream.JetStream, stream, subject string, upTo uint64) ([]rawEvent, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("projections: stream %s: %w", stream, err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, fmt.Errorf("projections: read %s: %w", subject, err)
	}
	var out []rawEvent
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("projections: read %s: %w", subject, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("projections: read %s: %w", subject, err)
		}
		if meta.Sequence.Stream > upTo {
			return out, nil
		}
		out = append(out, rawEvent{seq: meta.Sequence.Stream, data: m.Data(), header: m.Headers()})
		// The consumer's replica may be behind the leader, and count none
		// pending of events up to upTo it has yet to receive: a history
		// short of them would refold the aggregate wrong.
		done, err := natsjs.ReadThrough(ctx, js.Conn(), stream, meta.Sequence.Stream, meta.NumPending, upTo, []string{subject})
		if err != nil {
			return nil, fmt.Errorf("projections: read %s: %w", subject, err)
		}
		if done {
			return out, nil
		}
	}
}

// refolder folds one aggregate's history again for RetryDeadLetter.
type refolder struct {
	tx       pgx.Tx
	subject  string
	history  []rawEvent
	dead     map[uint64]bool
	retry    uint64
	upcast   Upcaster
	verifier *natsjs.Verifier
	resolved []uint64
	envs     []events.Envelope
	raw      [][]byte
}

// refold folds r's history into a state of table t and replaces its row;
// it returns the row's last sequence.
func refold[S proto.Message](ctx context.Context, r *refolder, t aggregateTable[S]) (uint64, error) {
	var state S
	var last uint64
	for _, m := range r.history {
		data := m.data
		if r.upcast != nil {
			data = r.upcast(r.subject, data)
		}
		env, err := decode(r.subject, data)
		decoded := err == nil
		if decoded {
			env.Sequence = m.seq
			env.Writer = r.verifier.Writer(r.subject, m.seq, m.data, m.header)
			var next S
			if next, err = t.apply(state, env); err == nil {
				state, last = next, m.seq
			}
		}
		if events.Skipped(err) && state.ProtoReflect().IsValid() {
			last = m.seq // it keeps its place, as the projector keeps it (foldSet.apply)
		}
		if err != nil {
			switch {
			case m.seq == r.retry:
				return 0, fmt.Errorf("%w: sequence %d: %w", ErrStillPoison, m.seq, err)
			case r.dead[m.seq]:
				// Another dead letter that still fails: it stays.
			default:
				return 0, fmt.Errorf("projections: retry: event %d of %s applied before but fails now (%w): run a check", m.seq, r.subject, err)
			}
		} else if r.dead[m.seq] {
			if m.seq == r.retry {
				r.resolved = append([]uint64{m.seq}, r.resolved...)
			} else {
				r.resolved = append(r.resolved, m.seq)
			}
		}
		if decoded {
			r.envs = append(r.envs, env)
			r.raw = append(r.raw, data)
		}
	}
	if last == 0 || !r.dead[r.retry] || !slices.Contains(r.resolved, r.retry) {
		return 0, fmt.Errorf("%w: sequence %d is not in the history of %s", ErrStillPoison, r.retry, r.subject)
	}
	row, err := t.row(state, last)
	if err != nil {
		return 0, fmt.Errorf("projections: retry: %w", err)
	}
	params := make([]string, len(t.columns))
	var set []string
	for i, c := range t.columns {
		params[i] = fmt.Sprintf("$%d", i+1)
		if i > 0 {
			set = append(set, c+" = EXCLUDED."+c)
		}
	}
	sql := "INSERT INTO " + t.table + " (" + strings.Join(t.columns, ", ") + ") VALUES (" + strings.Join(params, ", ") +
		") ON CONFLICT (name) DO UPDATE SET " + strings.Join(set, ", ")
	if _, err := r.tx.Exec(ctx, sql, row...); err != nil {
		return 0, fmt.Errorf("projections: retry: write %s: %w", t.table, err)
	}
	// Events already in the events table stay; the newly decodable ones go in.
	seqs := make([]int64, len(r.envs))
	for i, e := range r.envs {
		seqs[i] = int64(e.Sequence)
	}
	rows, err := r.tx.Query(ctx, `SELECT sequence FROM events WHERE sequence = ANY($1)`, seqs)
	if err != nil {
		return 0, fmt.Errorf("projections: retry: events: %w", err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("projections: retry: events: %w", err)
	}
	envs, raw := r.envs[:0:0], r.raw[:0:0]
	for i, e := range r.envs {
		if !slices.Contains(stored, int64(e.Sequence)) {
			envs, raw = append(envs, e), append(raw, r.raw[i])
		}
	}
	r.envs, r.raw = envs, raw
	return last, nil
}
