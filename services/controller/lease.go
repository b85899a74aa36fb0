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
type lease struct {
	kv       jetstream.KeyValue
	id       string
	revision uint64
}

func openLease(ctx context.Context, js jetstream.JetStream, id string, ttl time.Duration) (*lease, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: LeaseBucket, Description: "Controller leadership lease", TTL: ttl, History: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: lease bucket: %w", err)
	}
	return &lease{kv: kv, id: id}, nil
}

// acquire takes the lease if nobody holds it; false if someone does.
func (l *lease) acquire(ctx context.Context) (bool, error) {
	rev, err := l.kv.Create(ctx, leaseKey, []byte(l.id))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("controller: acquire lease: %w", err)
	}
	l.revision = rev
	return true, nil
}

// renew extends the lease; an error means it is lost.
func (l *lease) renew(ctx context.Context) error {
	rev, err := l.kv.Update(ctx, leaseKey, []byte(l.id), l.revision)
	if err != nil {
		return fmt.Errorf("controller: renew lease: %w", err)
	}
	l.revision = rev
	return nil
}

// release gives the lease up so a standby takes over at once.
func (l *lease) release(ctx context.Context) error {
	if err := l.kv.Delete(ctx, leaseKey, jetstream.LastRevision(l.revision)); err != nil {
		return fmt.Errorf("controller: release lease: %w", err)
	}
	return nil
}
