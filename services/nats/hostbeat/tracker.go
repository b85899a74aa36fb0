package hostbeat

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
)

// ErrStopped is the error of a tracker stopped by its owner: Stop was
// called or the context given to Track ended.
var ErrStopped = errors.New("hostbeat: tracker stopped")

// ErrWatchEnded is the error of a tracker whose bucket watcher ended on its
// own (its connection closed, or its consumer could not be recreated):
// it no longer follows the bucket, and a new tracker is needed.
var ErrWatchEnded = errors.New("hostbeat: bucket watcher ended")

// ErrStalled is the error of a tracker whose watcher delivered nothing for
// stallAfter while the bucket held values it had yet to deliver: its
// consumer is gone or stuck (the NATS server that held it restarted, say),
// and the client library would take up to two heartbeats (10 s) to make it
// anew. The tracker has ended: Err returns it, and a new tracker is needed.
var ErrStalled = fmt.Errorf("%w: stalled", ErrWatchEnded)

// ErrBehind is the error of a Beats call whose context ended before the
// tracker caught up with the bucket (its watcher is slow, stalled for less
// than stallAfter, or served by a NATS server behind the bucket's leader).
// It wraps the context's error too.
var ErrBehind = errors.New("hostbeat: tracker behind the bucket")

// probeEvery is how often Beats, while it waits for the tracker to reach
// the bucket's last revision, checks which revisions are left to deliver (a
// value removed before the watcher delivered it never is).
const probeEvery = 200 * time.Millisecond

// stallAfter is how long a watcher may deliver nothing while the bucket
// holds a value past what it delivered before the tracker takes it for
// stalled (ErrStalled). A watcher that is slow, not stalled, delivers
// something: at 10,000 hosts the bucket takes 5,000 beats a second.
const stallAfter = 2 * time.Second

// stopDrain bounds how long a stopping tracker drains its watcher for the
// subscription to close.
const stopDrain = 5 * time.Second

// A Tracker keeps each host's last beat in memory, fed by a single watcher
// of the bucket, which delivers every current value and then each change:
// reading every beat costs one round trip (Beats) instead of one per host.
// It runs until Stop is called or the context given to Track ends.
//
// A Tracker never serves a map it cannot vouch for: Beats waits until the
// tracker has applied every value the bucket held when it was called, and
// once the watcher has ended, every call returns an error (Err), so the owner
// starts a new tracker.
type Tracker struct {
	stream jetstream.Stream // the bucket's stream
	nc     *nats.Conn       // reads the stream's leader
	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{} // closed when run returns
	loaded chan struct{} // closed once the initial values are applied

	mu       sync.Mutex
	beats    map[string]Beat // host id → last beat
	rev      uint64          // highest bucket revision applied
	skipped  uint64          // highest revision the watcher passed without delivering (removed first)
	ttl      time.Duration   // the bucket's TTL: older beats have expired
	err      error           // why the tracker ended; nil while it runs
	stopErr  error           // the watcher's Stop error, for Stop
	changed  chan struct{}   // closed (and replaced) when rev or err changes, if waiting
	awaiting bool            // someone waits on changed

	leaderSince  time.Time     // when the bucket's leader was elected, as Beats last asked; zero if unknown
	stallAfter   time.Duration // see stallAfter
	pendingRev   uint64        // rev when a probe first found a later value in the bucket
	pendingSince time.Time     // when; zero if none was found since rev last moved
}

// Track opens the bucket and starts tracking it until ctx ends or Stop is
// called. It returns once the watch is being set up; Wait or Beats wait for
// the initial values.
func Track(ctx context.Context, js jetstream.JetStream) (*Tracker, error) {
	kv, err := Open(ctx, js)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, streamName)
	if err != nil {
		return nil, fmt.Errorf("hostbeat: bucket stream: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	t := &Tracker{
		stream: st, nc: js.Conn(), ctx: rctx, cancel: cancel, done: make(chan struct{}), loaded: make(chan struct{}),
		beats: map[string]Beat{}, ttl: st.CachedInfo().Config.MaxAge, changed: make(chan struct{}),
		stallAfter: stallAfter,
	}
	go t.run(rctx, kv)
	return t, nil
}

// streamName is the bucket's stream, by the key-value naming convention.
const streamName = "KV_" + Bucket

// allKeys is the subject filter of every key of the bucket.
const allKeys = "$KV." + Bucket + ".>"

// run applies the watcher's entries until ctx ends or the watcher does.
func (t *Tracker) run(ctx context.Context, kv jetstream.KeyValue) {
	defer close(t.done)
	// The watcher's subscription ends with ctx as well.
	w, err := kv.WatchAll(ctx)
	if err != nil {
		if ctx.Err() != nil {
			t.end(ErrStopped)
		} else {
			t.end(fmt.Errorf("%w: watch: %w", ErrWatchEnded, err))
		}
		return
	}
	updates := w.Updates()
	for {
		select {
		case <-ctx.Done():
			t.end(ErrStopped)
			err := w.Stop()
			switch {
			case errors.Is(err, nats.ErrBadSubscription), errors.Is(err, nats.ErrConsumerNotFound):
				err = nil // already unsubscribed, as ctx ended
			case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
				err = nil // ending with its connection
			}
			t.mu.Lock()
			t.stopErr = err
			t.mu.Unlock()
			// The subscription delivers no more once its pending callback
			// returns; it closes updates then.
			drain := time.NewTimer(stopDrain)
			defer drain.Stop()
			for {
				select {
				case _, ok := <-updates:
					if !ok {
						return
					}
				case <-drain.C:
					return
				}
			}
		case e, ok := <-updates:
			if !ok {
				if ctx.Err() != nil {
					t.end(ErrStopped) // unsubscribed as ctx ended
				} else {
					t.end(ErrWatchEnded)
				}
				return
			}
			if e == nil {
				close(t.loaded)
				t.mu.Lock()
				t.signalLocked()
				t.mu.Unlock()
				continue
			}
			t.apply(e)
		}
	}
}

// apply records one entry of the watcher.
func (t *Tracker) apply(e jetstream.KeyValueEntry) {
	var b Beat
	put := e.Operation() == jetstream.KeyValuePut
	if put {
		b = read(e.Value(), e.Created()) // decoded when used, if ever
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if put {
		t.beats[e.Key()] = b
	} else { // KeyValueDelete, KeyValuePurge
		delete(t.beats, e.Key())
	}
	if r := e.Revision(); r > t.rev+1 {
		// Revisions between were removed before the watcher got to them:
		// superseded by a later value of their key, which comes later.
		t.skipped = r - 1
	}
	t.rev = max(t.rev, e.Revision())
	t.signalLocked()
}

// end records why the tracker ended, unless it already has.
func (t *Tracker) end(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
	t.signalLocked()
}

// signalLocked wakes the waiters on changed; t.mu is held.
func (t *Tracker) signalLocked() {
	if t.awaiting {
		close(t.changed)
		t.changed, t.awaiting = make(chan struct{}), false
	}
}

// errLocked returns why the tracker ended, or ErrStopped if its context
// ended and run has not noticed yet; t.mu is held.
func (t *Tracker) errLocked() error {
	if t.err != nil {
		return t.err
	}
	if t.ctx.Err() != nil {
		return ErrStopped
	}
	return nil
}

// Err returns nil while the tracker follows the bucket, and why it stopped
// afterwards: ErrStopped, or an error wrapping ErrWatchEnded.
func (t *Tracker) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.errLocked()
}

// Wait blocks until the tracker holds every value the bucket had when the
// watch began, and returns nil; or returns the tracker's error (Err), or
// ctx's if it ends first.
func (t *Tracker) Wait(ctx context.Context) error {
	select {
	case <-t.loaded:
		return t.Err()
	default:
	}
	t.mu.Lock()
	ch := t.waitLocked()
	t.mu.Unlock()
	for {
		select {
		case <-t.loaded:
			return t.Err()
		case <-ctx.Done():
			return fmt.Errorf("hostbeat: wait for the initial beats: %w", ctx.Err())
		case <-ch:
		}
		t.mu.Lock()
		if err := t.errLocked(); err != nil {
			t.mu.Unlock()
			return err
		}
		ch = t.waitLocked()
		t.mu.Unlock()
	}
}

// waitLocked returns a channel closed at the next change; t.mu is held.
func (t *Tracker) waitLocked() <-chan struct{} {
	t.awaiting = true
	return t.changed
}

// Beats returns each host's last beat, as Read does, from memory: a beat
// whose key was deleted or purged is absent, as is one older than the
// bucket's TTL (expired; the watcher reports no expiry). Each host's beat
// is at least as recent as its last beat stored before the call.
//
// It asks the bucket's leader for its last revision (one round trip) and
// waits until the tracker has applied it (or, if that revision was removed
// before the tracker got it, the next one still in the bucket). A value
// the watcher passed over on the way had been removed, superseded by a
// later value of its key that may lie beyond that revision: the key would
// show its value before. So if the watcher passed over any revision since
// the call began, Beats asks for the last revision again and waits for it
// too, until a stretch passes with nothing passed over (a key would have
// to be written twice within the watcher's lag to need another).
//
// It returns an error if the tracker has ended (Err), if the leader that
// answered is cut off from its replicas (jsclient.Quorate: it would answer
// from its past), if the watcher stalls (ErrStalled, which ends the
// tracker: nothing delivered for stallAfter while the bucket holds a
// value past it), or if ctx ends before it has caught up (ErrBehind).
// The map is the caller's; the inventories in it (Inv) are shared and
// must not be modified.
func (t *Tracker) Beats(ctx context.Context) (map[string]Beat, error) {
	t.mu.Lock()
	from := t.rev // skips after this may hide a value stored before the call
	err := t.errLocked()
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	for {
		target, ttl, err := t.lastRevision(ctx)
		if err != nil {
			return nil, err
		}
		if err := t.reach(ctx, target); err != nil {
			return nil, err
		}
		t.mu.Lock()
		if err := t.errLocked(); err != nil {
			t.mu.Unlock()
			return nil, err
		}
		if t.skipped <= from {
			out := t.snapshotLocked(ttl)
			t.mu.Unlock()
			return out, nil
		}
		// What replaced a value passed over after from was stored before
		// the watcher passed it over: by now, so the bucket's last
		// revision now covers it.
		from = t.rev
		t.mu.Unlock()
	}
}

// lastRevision asks the bucket's leader for its last revision (0 when it
// holds no value) and TTL. It asks again after an attempt that got no
// answer or found no leader (jsclient.StreamInfo), within ctx: a request
// sent as a NATS node restarted may never be answered, and a controller
// pass that waited out its whole deadline on it would judge no host.
func (t *Tracker) lastRevision(ctx context.Context) (uint64, time.Duration, error) {
	info, err := jsclient.StreamInfo(ctx, t.stream, jsclient.DefaultUnavailableWait)
	if err != nil {
		return 0, 0, fmt.Errorf("hostbeat: bucket state: %w", err)
	}
	if err := jsclient.Quorate(info, jsclient.ReplicaSeenWithin); err != nil {
		return 0, 0, fmt.Errorf("hostbeat: bucket state: %w", err)
	}
	if info.Cluster != nil && info.Cluster.LeaderSince != nil {
		t.mu.Lock()
		t.leaderSince = *info.Cluster.LeaderSince
		t.mu.Unlock()
	}
	if info.State.Msgs == 0 {
		return 0, info.Config.MaxAge, nil // every value expired or purged: nothing to wait for
	}
	return info.State.LastSeq, info.Config.MaxAge, nil
}

// reach waits until the tracker has loaded its initial values and applied
// revision target, or the first revision after it still in the bucket (if
// target was removed before the watcher delivered it, it never will).
func (t *Tracker) reach(ctx context.Context, target uint64) error {
	probe := time.NewTimer(probeEvery)
	defer probe.Stop()
	for {
		t.mu.Lock()
		if err := t.errLocked(); err != nil {
			t.mu.Unlock()
			return err
		}
		if isLoaded(t.loaded) && t.rev >= target {
			t.mu.Unlock()
			return nil
		}
		rev, ch := t.rev, t.waitLocked()
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (revision %d of %d): %w", ErrBehind, rev, target, ctx.Err())
		case <-ch:
		case <-probe.C:
			// The target revision may have been removed before the watcher
			// delivered it (superseded by a newer beat of its host, or a
			// purged delete marker): it never will. Wait for what exists.
			// The leader says what exists: a replica behind it (catching
			// up, or cut off) would answer that nothing does, and the map
			// would be its past.
			m, found, err := jsclient.LeaderGet(ctx, t.nc, streamName, jsclient.MsgRequest{Seq: rev + 1, NextFor: allKeys})
			switch {
			case err != nil && ctx.Err() != nil:
				// The deadline came during the read: reported above.
			case err != nil:
				return fmt.Errorf("hostbeat: bucket state after revision %d: %w", rev, err)
			case !found:
				target = rev // the tracker has every value in the bucket
			default:
				if err := t.pending(rev, time.Now()); err != nil {
					return err
				}
				if m.Sequence > target {
					// Nothing up to the target is left to deliver; what
					// replaced it comes next. A stalled watcher never
					// gets there.
					target = m.Sequence
				}
			}
			probe.Reset(probeEvery)
		}
	}
}

// pending records that the bucket holds a value past rev, the revision the
// tracker had applied when it asked, at now. If the tracker has applied
// nothing since it first found one, stallAfter or more ago, its watcher
// has stalled: the tracker ends with ErrStalled, which it returns.
func (t *Tracker) pending(rev uint64, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.rev != rev:
		return nil // it applied more since it asked
	case t.pendingSince.IsZero() || t.pendingRev != rev:
		t.pendingRev, t.pendingSince = rev, now
		return nil
	case t.stallAfter <= 0 || now.Sub(t.pendingSince) < t.stallAfter:
		return nil
	}
	if t.err == nil {
		t.err = fmt.Errorf("%w: the bucket held values past revision %d for %s, and none came", ErrStalled, rev, now.Sub(t.pendingSince).Round(time.Millisecond))
		t.signalLocked()
	}
	t.cancel() // stops the watcher: Done closes once run has returned
	return t.err
}

// LeaderSince is when the bucket's leader was elected, as its last
// answer to Beats said (the NATS server's clock), or zero if it did not
// say (a server outside a cluster). While the bucket had no leader no
// host could beat: a host's silence before then is the bucket's, not the
// host's.
func (t *Tracker) LeaderSince() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leaderSince
}

// Latest returns the beat of host (its id) the tracker has applied so far,
// without waiting for it to catch up with the bucket (Beats does): for
// showing when a host last beat, where a beat a moment old does, not for
// liveness verdicts. Its inventory (Inv) is shared and must not be
// modified.
func (t *Tracker) Latest(host string) (Beat, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.beats[host]
	return b, ok
}

// snapshotLocked copies the beats, forgetting those older than ttl; t.mu
// is held.
func (t *Tracker) snapshotLocked(ttl time.Duration) map[string]Beat {
	if ttl > 0 {
		t.ttl = ttl
	}
	out := make(map[string]Beat, len(t.beats))
	if t.ttl <= 0 {
		maps.Copy(out, t.beats)
		return out
	}
	expired := time.Now().Add(-t.ttl)
	for k, b := range t.beats {
		if b.Stored.Before(expired) {
			delete(t.beats, k)
			continue
		}
		out[k] = b
	}
	return out
}

// isLoaded reports whether the initial values are applied (ch is loaded).
func isLoaded(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Stop stops the tracker and waits for it to end. It returns an error only
// if the watcher could not be stopped cleanly; Err then returns ErrStopped
// (unless the watcher had ended before).
func (t *Tracker) Stop() error {
	t.cancel()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopErr != nil {
		return fmt.Errorf("hostbeat: stop the watcher: %w", t.stopErr)
	}
	return nil
}

// Done returns a channel closed once the tracker has ended (its watcher
// stopped or failed).
func (t *Tracker) Done() <-chan struct{} { return t.done }
