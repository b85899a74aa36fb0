// Package lease elects one active instance of a component (the controller,
// the projector) among several, with a lease on a key of the TETHER_LEADER
// key-value bucket: the key names its holder, the holder renews it by
// compare-and-set, and the bucket's TTL expires it if the holder goes
// silent. A standby watches the key and tries to take it the moment it is
// deleted (a holder that stops releases it) or expires.
//
// Each tenure has an epoch: the key's revision when it was taken. Epochs
// only grow, so a writer can fence its writes with the epoch (the
// projector's checkpoint does) and a holder that lost the lease without
// knowing it cannot overwrite a newer holder's work.
//
// Timing is judged by the local monotonic clock, never by an injected test
// clock: the key expires by the NATS server's clock, in real time. A write
// sent at t cannot expire before t+TTL, so the lease is valid until t+TTL
// after the last acknowledged write sent at t, and a renewal still
// unanswered then counts as failed: the holder stops before anyone else can
// create the key.
//
// `tether migrate` creates the bucket (Setup); the TTL is the bucket's, so
// every instance of every component agrees on it.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
)

// Bucket is the key-value bucket holding the leases, one key per role.
const Bucket = "TETHER_LEADER"

// DefaultTTL is the bucket's TTL unless `tether migrate --lease-ttl` says
// otherwise: how long a silent holder keeps its lease. 4 s has a standby
// take over within about 4 s of a holder's crash. The price: a holder whose
// renewals cannot land for 4 s (a NATS election of the bucket's leader
// takes 4-9 s) gives the lease up and takes it again after the election;
// epochs make that safe, and a longer TTL only trades it for slower
// takeovers.
const DefaultTTL = 4 * time.Second

// Setup creates the bucket, or updates it where its TTL or replicas differ
// (a bucket already as wanted is not written to: see jsclient.EnsureStream).
func Setup(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) error {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return jsclient.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "Leadership leases: one key per role, naming the active instance",
		TTL: ttl, History: 1, Replicas: replicas,
	})
}

// Lease is one instance's lease on one role's key. Run drives it; the other
// methods are safe to call from any goroutine.
type Lease struct {
	kv   jetstream.KeyValue
	nc   *nats.Conn // reads the bucket's leader (jsclient.LeaderGet)
	role string
	id   string
	ttl  time.Duration
	log  *slog.Logger

	revision   uint64    // of our last acknowledged write, 0 before any; Run's goroutines only
	validUntil time.Time // no other instance can hold the key before this

	mu     sync.Mutex
	held   bool
	epoch  uint64
	holder string // the key's value when last seen
	err    error  // the last failure to reach the bucket, nil once it answers
}

// Open opens the bucket for role's key, as instance id. It does not create
// the bucket: a missing one is an error that says to run `tether migrate`.
func Open(ctx context.Context, js jetstream.JetStream, role, id string, log *slog.Logger) (*Lease, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, jsclient.NotSetUp("key-value bucket " + Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("lease: bucket %s: %w", Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease: bucket %s: %w", Bucket, err)
	}
	if st.TTL() <= 0 {
		return nil, fmt.Errorf("lease: bucket %s has no TTL, so a dead holder would keep its lease for ever: run `tether migrate`", Bucket)
	}
	return &Lease{kv: kv, nc: js.Conn(), role: role, id: id, ttl: st.TTL(), log: log.With("lease", role)}, nil
}

// TTL is how long a silent holder keeps the lease (the bucket's).
func (l *Lease) TTL() time.Duration { return l.ttl }

// Held reports whether this instance holds the lease now, and its epoch.
func (l *Lease) Held() (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held, l.epoch
}

// Status says what this instance is doing about the lease, in words, for
// readiness and logs; the error is non-nil while the bucket cannot be
// reached (the instance can neither lead nor take over).
func (l *Lease) Status() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.err != nil:
		return "lease " + l.role + " unavailable", l.err
	case l.held:
		return fmt.Sprintf("holds the %s lease (epoch %d)", l.role, l.epoch), nil
	case l.holder != "":
		return fmt.Sprintf("standby: the %s lease is held by %s", l.role, l.holder), nil
	default:
		return "standby: waiting for the " + l.role + " lease", nil
	}
}

// Run waits for the lease and calls lead while it holds it, with a context
// that ends when the lease is lost or ctx ends, and the tenure's epoch;
// then it waits again, until ctx ends. A holder releases the lease when ctx
// ends or lead fails (after lead returns), so a standby takes over at
// once; lead's error ends Run with it.
func (l *Lease) Run(ctx context.Context, lead func(ctx context.Context, epoch uint64) error) error {
	// A standby retries this often anyway (see awaitChance).
	retry := max(l.ttl/10, 100*time.Millisecond)
	for ctx.Err() == nil {
		// A fresh watcher per wait: it starts with the key as it is (its
		// holder, for Status), and none is left unread while this instance
		// leads.
		w, err := l.kv.Watch(ctx, l.role)
		if err != nil {
			// NATS away: neither this instance nor anyone it could hand
			// over to can reach the lease; try again.
			l.setErr(fmt.Errorf("lease: watch %s: %w", l.role, err))
			if ctx.Err() == nil {
				l.log.Warn("lease unavailable", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		err = l.contend(ctx, w, retry, lead)
		_ = w.Stop() // best effort: the connection may be gone, and the watcher with it
		if err != nil {
			return err
		}
	}
	return nil
}

// contend tries to take the lease, and again whenever it may be free
// (awaitChance), until it has held it once, ctx ends, or the watcher
// closes; it returns lead's error.
func (l *Lease) contend(ctx context.Context, w jetstream.KeyWatcher, retry time.Duration, lead func(context.Context, uint64) error) error {
	for {
		ok, err := l.acquire(ctx)
		l.setErr(err)
		if err != nil && ctx.Err() == nil {
			l.log.Warn("lease unavailable", "err", err)
		}
		if ok {
			return l.hold(ctx, lead)
		}
		if !l.awaitChance(ctx, w, retry) {
			return nil
		}
	}
}

// awaitChance waits until the lease may be free: its key was deleted or
// purged (a holder released it), or retry has passed (a key that expires
// by TTL goes without a marker a watcher would see). It records the holder
// from every update, and returns false when ctx ends or the watcher closes.
func (l *Lease) awaitChance(ctx context.Context, w jetstream.KeyWatcher, retry time.Duration) bool {
	timer := time.NewTimer(retry)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case e, open := <-w.Updates():
			if !open {
				return false
			}
			if e == nil {
				continue // the end of the key's current value
			}
			l.seen(e)
			if e.Operation() != jetstream.KeyValuePut {
				return true
			}
		}
	}
}

// seen records who holds the key, from a watch update.
func (l *Lease) seen(e jetstream.KeyValueEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.Operation() == jetstream.KeyValuePut {
		l.holder = string(e.Value())
	} else {
		l.holder = ""
	}
}

func (l *Lease) setErr(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

// hold runs lead while the lease holds, renewing it every TTL/3, and
// releases it if ctx ended or lead failed; it returns lead's error.
func (l *Lease) hold(ctx context.Context, lead func(context.Context, uint64) error) error {
	l.mu.Lock()
	l.held, l.epoch, l.holder, l.err = true, l.revision, l.id, nil
	epoch := l.epoch
	l.mu.Unlock()
	l.log.Info("lease acquired", "id", l.id, "epoch", epoch, "ttl", l.ttl)

	lctx, lost := context.WithCancel(ctx)
	defer lost()
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				if err := l.renew(lctx); err != nil {
					if lctx.Err() == nil {
						l.setHeld(false)
						l.log.Warn("lease lost", "id", l.id, "err", err)
					}
					lost()
					return
				}
			}
		}
	}()
	err := lead(lctx, epoch)
	lost()
	<-renewed // the renewer owns the revision until it stops
	l.setHeld(false)
	if ctx.Err() == nil && err == nil {
		return nil // lost: nothing to release
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if rerr := l.release(rctx); rerr != nil {
		l.log.Warn("release lease", "err", rerr)
	} else {
		l.log.Info("lease released", "id", l.id)
	}
	return err
}

func (l *Lease) setHeld(held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = held
	if !held && l.holder == l.id {
		l.holder = ""
	}
}

// acquire takes the lease if nobody holds it; false if someone does. A key
// still at the revision of our own last write is ours (a renewal that
// failed without reaching the server): it is taken back by compare-and-set,
// so a transient error does not leave the role without a holder for a TTL.
func (l *Lease) acquire(ctx context.Context) (bool, error) {
	sent := time.Now()
	rev, err := l.kv.Create(ctx, l.role, []byte(l.id))
	if errors.Is(err, jetstream.ErrKeyExists) && l.revision != 0 {
		sent = time.Now()
		rev, err = l.kv.Update(ctx, l.role, []byte(l.id), l.revision)
		if err != nil && ctx.Err() == nil {
			return false, nil // someone else's now, or expired: Create will tell
		}
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lease: acquire %s: %w", l.role, err)
	}
	l.revision, l.validUntil = rev, sent.Add(l.ttl)
	return true, nil
}

// renew extends the lease; an error means it is lost: the key was changed
// by someone else (its revision is not ours), or no write went through
// while the lease was still valid. Until then a failed write (a NATS
// election, a reconnect) is retried: a blip shorter than the lease does
// not end the tenure.
func (l *Lease) renew(ctx context.Context) error {
	ctx, cancel := context.WithDeadline(ctx, l.validUntil)
	defer cancel()
	// Whichever attempt is stored was sent no earlier than the first: the
	// key cannot expire before sent+TTL.
	sent := time.Now()
	backoff := 50 * time.Millisecond
	for {
		rev, err := l.kv.Update(ctx, l.role, []byte(l.id), l.revision)
		if err == nil {
			l.revision, l.validUntil = rev, sent.Add(l.ttl)
			return nil
		}
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			// An earlier attempt may have been stored without its answer
			// reaching us: the key then holds our id at a newer revision.
			// Only the bucket's leader is asked: a replica behind it (a
			// KV get is a direct get, which any replica answers) may not
			// hold that write yet, and the tenure would end for nothing.
			m, found, gerr := jsclient.LeaderGet(ctx, l.nc, "KV_"+Bucket, jsclient.MsgRequest{LastFor: "$KV." + Bucket + "." + l.role})
			if gerr == nil && found && string(m.Data) == l.id && m.Sequence > l.revision {
				l.revision, l.validUntil = m.Sequence, sent.Add(l.ttl)
				return nil
			}
			if gerr != nil {
				err = fmt.Errorf("%w (and the key could not be read: %w)", err, gerr)
			}
			return fmt.Errorf("lease: renew %s: taken by another instance: %w", l.role, err)
		}
		l.log.Debug("lease renewal failed; retrying while the lease is valid", "role", l.role, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("lease: renew %s: no write went through while the lease was valid: %w", l.role, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, l.ttl/10)
	}
}

// release gives the lease up so a standby takes over at once; it deletes
// the key only if it still holds our last write.
func (l *Lease) release(ctx context.Context) error {
	if err := l.kv.Delete(ctx, l.role, jetstream.LastRevision(l.revision)); err != nil {
		return fmt.Errorf("lease: release %s: %w", l.role, err)
	}
	l.revision = 0
	return nil
}
