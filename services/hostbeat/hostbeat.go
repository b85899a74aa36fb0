// Package hostbeat keeps host liveness out of the event stream (DESIGN.md
// §4): each agent refreshes its host's key in a JetStream key-value bucket
// every few seconds, and the controller reads when each key was last
// written. Only the transitions it concludes (unreachable, lost, online
// again) become events.
package hostbeat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the key-value bucket with one key per host id.
const Bucket = "TETHER_HOSTS"

// keyTTL is how long an unrefreshed key survives; liveness verdicts use the
// time of the last write, so this only bounds the bucket's size.
const keyTTL = 24 * time.Hour

// Open creates (or opens) the bucket.
func Open(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "Host heartbeats: one key per host, refreshed by its agent", TTL: keyTTL, History: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("hostbeat: bucket: %w", err)
	}
	return kv, nil
}

// Beat refreshes a host's key.
func Beat(ctx context.Context, kv jetstream.KeyValue, host string, now time.Time) error {
	if _, err := kv.Put(ctx, host, []byte(now.UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("hostbeat: %s: %w", host, err)
	}
	return nil
}

// Last returns when each host's key was last written (server time).
func Last(ctx context.Context, kv jetstream.KeyValue) (map[string]time.Time, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("hostbeat: list: %w", err)
	}
	out := map[string]time.Time{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or deleted since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("hostbeat: get %s: %w", k, err)
		}
		out[k] = e.Created()
	}
	return out, nil
}
