package jsclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
)

// Reconnector moves a connection to another server of the NATS cluster
// when JetStream has not answered through it for a while although the
// connection itself is up. That is a server cut off from the others (a
// minority partition): it keeps its clients, but no stream has a leader
// it can reach, and the client is never told. Calls observed as failing
// for longer than After, on a connection that knows other servers, make it
// reconnect elsewhere (at most once per After); a leader seen cut off from
// its peers (ErrCutOff) makes it reconnect at once. A failing stretch
// starts when its first failed call began, not when it gave up: a call
// that waits out a 5 s timeout has been failing for those 5 s.
type Reconnector struct {
	nc    *nats.Conn
	after time.Duration
	log   *slog.Logger

	mu       sync.Mutex
	failing  time.Time // when the first failed call since the last success began; zero when none
	answered time.Time // last success
	forced   time.Time // last forced reconnect
}

// NewReconnector watches nc; after is how long JetStream may fail before
// the connection moves.
func NewReconnector(nc *nats.Conn, after time.Duration, log *slog.Logger) *Reconnector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reconnector{nc: nc, after: after, log: log}
}

// Observe records the outcome of a JetStream call made through the
// connection, begun at began, and reconnects when calls have failed for
// longer than After; it reports whether it did, so the caller can try
// again at once on the new server. Errors that are refusals (not found,
// conflicts) count as answers.
func (r *Reconnector) Observe(began time.Time, err error) (moved bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := err != nil && (unavailable(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, events.ErrUnavailable) || errors.Is(err, ErrCutOff))
	if !failed {
		r.failing, r.answered = time.Time{}, now
		return false
	}
	// A call begun before the last answer or move failed on what came
	// before it: the stretch starts after them.
	for _, after := range []time.Time{r.answered, r.forced} {
		if began.Before(after) {
			began = after
		}
	}
	if r.failing.IsZero() || began.Before(r.failing) {
		r.failing = began
	}
	cutOff := errors.Is(err, ErrCutOff) // seen, not inferred from silence: move at once
	if (!cutOff && now.Sub(r.failing) < r.after) || now.Sub(r.forced) < r.after || !r.nc.IsConnected() || len(r.nc.Servers()) < 2 {
		return false
	}
	r.log.Warn("JetStream has not answered through this NATS server; reconnecting to another",
		"server", r.nc.ConnectedUrlRedacted(), "failing_for", now.Sub(r.failing).Round(time.Millisecond), "err", err)
	r.forced, r.failing = now, time.Time{} // tried: the next try waits After, whatever came of this one
	if ferr := r.nc.ForceReconnect(); ferr != nil {
		r.log.Warn("force reconnect", "err", ferr)
		return false
	}
	return true
}

// Watch probes JetStream through the connection every interval until ctx
// ends, for a process that makes no regular JetStream call of its own to
// observe. The probe is the events stream's info, which its leader
// answers, judged by Quorate: a leader cut off from its replicas goes on
// answering until it steps down (10 s), while every write through it
// fails.
func (r *Reconnector) Watch(ctx context.Context, js jetstream.JetStream, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		pctx, cancel := context.WithTimeout(ctx, interval)
		s, err := js.Stream(pctx, events.StreamName)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = Quorate(s.CachedInfo(), ReplicaSeenWithin)
		}
		r.Observe(began, err)
	}
}

// ReplicaSeenWithin is how recently a stream's leader must have heard from
// a replica to count it: nats-server's raft leader hears from each
// follower at least every second (heartbeats).
const ReplicaSeenWithin = 3 * time.Second

// ErrCutOff is a stream leader that has not heard from a majority of its
// peers (Quorate). Observed, it moves the connection at once: it is seen,
// not inferred from calls that went unanswered.
var ErrCutOff = errors.New("jsclient: the stream's leader is cut off from the others")

// Quorate reports, from a stream's info, whether the leader that answered
// has heard from a majority of the stream's peers (itself included) within
// seen; if not, an error wrapping events.ErrUnavailable. A stream of one
// replica is always quorate.
func Quorate(info *jetstream.StreamInfo, seen time.Duration) error {
	c := info.Cluster
	if c == nil || len(c.Replicas) == 0 {
		return nil
	}
	if c.Leader == "" {
		return fmt.Errorf("%w: stream %s has no leader", events.ErrUnavailable, info.Config.Name)
	}
	heard := 1 // the leader
	for _, p := range c.Replicas {
		if !p.Offline && p.Active <= seen {
			heard++
		}
	}
	if peers := 1 + len(c.Replicas); 2*heard <= peers {
		return fmt.Errorf("%w: %w: stream %s's leader %s has heard from %d of its %d peers within %s (itself included)",
			events.ErrUnavailable, ErrCutOff, info.Config.Name, c.Leader, heard, peers, seen)
	}
	return nil
}
