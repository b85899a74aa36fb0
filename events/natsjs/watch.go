package natsjs

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
)

// watchPull bounds the messages a watch's consumer pulls ahead of its
// reader; watchPullBytes bounds their bytes: the memory a watch holds in
// this package.
const watchPull = 256

// watchPullSlack is what a message takes of a pull's bytes besides its
// headers and data (which the server's max_payload bounds): its subject and
// its ack subject, as nats-server counts them.
const watchPullSlack = 8 << 10

// watchPullBytes bounds the bytes a watch's consumer pulls ahead of its
// reader: one pull at a time (a pull's messages are all read before the
// next is asked for), of at most the largest message the server takes, so
// that every message fits a pull (nats-server delivers none larger than the
// pull's bytes, and the watch would stall there). Without it a watch of
// large events held watchPull of them, up to 256 MiB.
func (s *Store) watchPullBytes() int { return int(s.js.Conn().MaxPayload()) + watchPullSlack }

// watchInactive is how long the server keeps a watch's consumer after its
// reader went away without deleting it (a crash, a lost connection).
const watchInactive = 30 * time.Second

// Watch streams the events stored after sequence after on subjects
// (wildcards allowed; none means every event), in stream order, each with
// its Sequence set, without a gap or a duplicate: it reads through an
// ordered consumer, which the nats.go client recreates after the last
// delivered sequence when it detects a gap or loses its consumer.
//
// With until = 0 it waits for new events until ctx ends or the consumer
// fails; with until > 0 it ends after the last event at or below until
// that is already stored, waiting only for its consumer's replica to
// catch up with the stream's leader. until must not exceed the stream's
// last sequence, or Watch may wait for events above it.
//
// An event that cannot be decoded is yielded as an error wrapping
// events.ErrUndecodable, with the envelope that stands for it
// (events.UndecodableAt): the caller may go on iterating past it. Any other error ends
// the iteration. An ended ctx ends it without an error.
func (s *Store) Watch(ctx context.Context, after, until uint64, subjects []string) iter.Seq2[events.Envelope, error] {
	return func(yield func(events.Envelope, error) bool) {
		if len(subjects) == 0 {
			subjects = []string{events.SubjectPrefix + ".>"}
		}
		if until > 0 {
			if until <= after {
				return
			}
			// A consumer with nothing to deliver below until would wait
			// for events above it; look first.
			some, err := anyBetween(ctx, after, until, subjects, s.leaderGet)
			if err != nil || !some {
				if err != nil && ctx.Err() == nil {
					yield(events.Envelope{}, err)
				}
				return
			}
		}
		cons, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects:    subjects,
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       after + 1,
			InactiveThreshold: watchInactive,
		})
		if err != nil {
			if ctx.Err() == nil {
				yield(events.Envelope{}, fmt.Errorf("natsjs: watch %v after %d: %w", subjects, after, err))
			}
			return
		}
		// The count bound with a byte limit, and the next pull only once
		// the last one's messages are all read: otherwise each pull of a
		// few large messages, short of half the count, asks for the next
		// at once, and they pile up.
		msgs, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(watchPull, s.watchPullBytes()), jetstream.PullThresholdMessages(1),
			// As jsclient.FailoverPull: a lost node is noticed within two heartbeats.
			jetstream.PullHeartbeat(2*time.Second), jetstream.PullExpiry(8*time.Second))
		if err != nil {
			if ctx.Err() == nil {
				yield(events.Envelope{}, fmt.Errorf("natsjs: watch %v after %d: %w", subjects, after, err))
			}
			return
		}
		defer msgs.Stop()
		for {
			m, err := msgs.Next(jetstream.NextContext(ctx))
			if err != nil {
				if ctx.Err() == nil {
					yield(events.Envelope{}, fmt.Errorf("natsjs: watch %v: %w", subjects, err))
				}
				return
			}
			meta, err := m.Metadata()
			if err != nil {
				yield(events.Envelope{}, fmt.Errorf("natsjs: watch %v: %w", subjects, err))
				return
			}
			seq := meta.Sequence.Stream
			if until > 0 && seq > until {
				return
			}
			env, err := s.open(m.Data(), m.Subject(), m.Headers(), seq)
			if err != nil {
				env = events.UndecodableAt(m.Subject(), seq, err)
			}
			if !yield(env, err) {
				return
			}
			if until > 0 {
				done, err := readThrough(ctx, seq, meta.NumPending, until, subjects, s.leaderGet)
				if err != nil {
					if ctx.Err() == nil {
						yield(events.Envelope{}, err) // it names the subjects and sequences
					}
					return
				}
				if done {
					return
				}
			}
		}
	}
}

// ReadThrough reports whether a bounded read of stream through a consumer
// of its own, having seen the events on subjects up to sequence seen, with
// pending events counted after it by the consumer, has seen every one up
// to until (readThrough).
func ReadThrough(ctx context.Context, nc *nats.Conn, stream string, seen, pending, until uint64, subjects []string) (bool, error) {
	return readThrough(ctx, seen, pending, until, subjects, func(ctx context.Context, r jsclient.MsgRequest) (jsclient.LeaderMessage, bool, error) {
		return jsclient.LeaderGet(ctx, nc, stream, r)
	})
}

// leaderGetter reads one message from a stream's leader (jsclient.LeaderGet).
type leaderGetter func(context.Context, jsclient.MsgRequest) (jsclient.LeaderMessage, bool, error)

// readThrough reports whether a bounded read that has seen the events on
// subjects up to sequence seen, through a consumer that counts pending
// events stored after it, has seen every one up to until. The count is
// the consumer's replica's: an ephemeral consumer is placed on any of the
// stream's replicas, and one behind the leader counts none of the events
// it has yet to receive. A count of none short of until is therefore
// checked with the leader, read with get (anyBetween, one request), or the
// read would end early: a watch of history followed by a live watch from
// until would skip the events between.
func readThrough(ctx context.Context, seen, pending, until uint64, subjects []string, get leaderGetter) (bool, error) {
	switch {
	case seen >= until:
		return true, nil
	case pending > 0:
		return false, nil
	}
	some, err := anyBetween(ctx, seen, until, subjects, get)
	return !some, err
}

// anyBetween reports whether an event on one of subjects has a sequence in
// (after, until]: one read of the stream's leader (with get) per subject. A
// replica behind the leader would answer that there is none, and a read
// bounded by until would end short of it.
func anyBetween(ctx context.Context, after, until uint64, subjects []string, get leaderGetter) (bool, error) {
	for _, subj := range subjects {
		m, found, err := get(ctx, jsclient.MsgRequest{Seq: after + 1, NextFor: subj})
		if err != nil {
			return false, fmt.Errorf("natsjs: look for events on %s after %d: %w", subj, after, err)
		}
		if found && m.Sequence <= until {
			return true, nil
		}
	}
	return false, nil
}

// SequenceAt returns the sequence of the first event stored at or after t
// (by the stream's timestamps, which grow with sequences), or the stream's
// last sequence + 1 when every event was stored before t. It binary-searches
// with reads of the stream's leader, about log2(events) of them: a replica
// behind it would answer that the last events do not exist, and an export
// bounded by the answer would end short. Sequences the archiver
// purged are gaps: each probe reads the first event at or after its
// sequence, so the answer may be a purged sequence, with no event of the
// stream between it and the first one stored at or after t.
func (s *Store) SequenceAt(ctx context.Context, t time.Time) (uint64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("natsjs: stream info: %w", err)
	}
	lo, hi := info.State.FirstSeq, info.State.LastSeq+1 // the answer is in [lo, hi]
	if info.State.Msgs == 0 {
		return hi, nil
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, found, err := s.leaderGet(ctx, jsclient.MsgRequest{Seq: mid, NextFor: events.SubjectPrefix + ".>"})
		switch {
		case err != nil:
			return 0, fmt.Errorf("natsjs: read event %d for its time: %w", mid, err)
		case !found:
			hi = mid // purged from mid to the end
		case m.Time.Before(t):
			lo = m.Sequence + 1
		default:
			hi = mid // events from mid up to m.Sequence were purged
		}
	}
	return lo, nil
}
