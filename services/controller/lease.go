package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LeaseBucket is the KV bucket holding the controller lease.
const LeaseBucket = "TETHER_LEADER"

// leaseKey is the key whose holder is the active controller.
const leaseKey = "controller"

// lease is a leadership lease on a NATS KV key: created when absent (or
// expired by the bucket's TTL), renewed by compare-and-set on its revision.
//
// Timing is judged by the local monotonic clock, never by Options.Clock: the
// key expires by the NATS server's clock, in real time. A write sent at t
// cannot expire before t+TTL, so the lease is valid until t+TTL after the
// last acknowledged write sent at t, and a renewal still unanswered then
// counts as failed: the holder stops before anyone else can create the key.
type lease struct {
	kv         jetstream.KeyValue
	id         string
	ttl        time.Duration
	revision   uint64    // of our last acknowledged write, 0 before any
	validUntil time.Time // no other instance can hold the key before this
}

// openLease opens the lease bucket, creating it, or updating it if its TTL
// is not ttl; a bucket already as wanted is not written to (see
// natsjs.EnsureStream for why).
func openLease(ctx context.Context, js jetstream.JetStream, id string, ttl time.Duration) (*lease, error) {
	kv, err := js.KeyValue(ctx, LeaseBucket)
	switch {
	case err == nil:
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("controller: lease bucket: %w", err)
		}
		if st.TTL() == ttl && st.History() == 1 {
			return &lease{kv: kv, id: id, ttl: ttl}, nil
		}
	case !errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, fmt.Errorf("controller: lease bucket: %w", err)
	}
	kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: LeaseBucket, Description: "Controller leadership lease", TTL: ttl, History: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: lease bucket: %w", err)
	}
	return &lease{kv: kv, id: id, ttl: ttl}, nil
}

// acquire takes the lease if nobody holds it; false if someone does. A key
// still at the revision of our own last write is ours (a renewal that
// failed without reaching the server): it is taken back by compare-and-set,
// so a transient error does not leave the fleet without a leader for a TTL.
func (l *lease) acquire(ctx context.Context) (bool, error) {
	sent := time.Now()
	rev, err := l.kv.Create(ctx, leaseKey, []byte(l.id))
	if errors.Is(err, jetstream.ErrKeyExists) && l.revision != 0 {
		sent = time.Now()
		rev, err = l.kv.Update(ctx, leaseKey, []byte(l.id), l.revision)
		if err != nil && ctx.Err() == nil {
			return false, nil // someone else's now, or expired: Create will tell
		}
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("controller: acquire lease: %w", err)
	}
	l.revision, l.validUntil = rev, sent.Add(l.ttl)
	return true, nil
}

// renew extends the lease; an error means it is lost: the key was changed
// by someone else (its revision is not ours), or no answer came while the
// lease was still valid.
func (l *lease) renew(ctx context.Context) error {
	ctx, cancel := context.WithDeadline(ctx, l.validUntil)
	defer cancel()
	sent := time.Now()
	rev, err := l.kv.Update(ctx, leaseKey, []byte(l.id), l.revision)
	if err != nil {
		return fmt.Errorf("controller: renew lease: %w", err)
	}
	l.revision, l.validUntil = rev, sent.Add(l.ttl)
	return nil
}

// release gives the lease up so a standby takes over at once; it deletes
// the key only if it still holds our last write.
func (l *lease) release(ctx context.Context) error {
	if err := l.kv.Delete(ctx, leaseKey, jetstream.LastRevision(l.revision)); err != nil {
		return fmt.Errorf("controller: release lease: %w", err)
	}
	l.revision = 0
	return nil
}
