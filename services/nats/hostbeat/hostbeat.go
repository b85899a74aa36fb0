// Package hostbeat keeps host liveness out of the event stream
// (docs/host-liveness.md): each agent refreshes its host's key in a
// JetStream key-value bucket every few seconds, and the controller reads
// when each key was last written. Only the transitions it concludes (unreachable, lost, online
// again) become events. The controller reads the bucket each pass through
// a Tracker, which follows it with one watcher, instead of Read, which
// costs a round trip per host.
//
// A beat also carries the agent's inventory: the game servers it supervises,
// with their process ids, and how many of its events still wait in its outbox
// for the stream. When an unreachable host comes back, the controller checks
// the servers the views place on it against that inventory.
package hostbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
)

// Bucket is the key-value bucket with one key per host id.
const Bucket = "TETHER_HOSTS"

// keyTTL is how long an unrefreshed key survives; liveness verdicts use the
// time of the last write, so this only bounds the bucket's size.
const keyTTL = 24 * time.Hour

// Beat is one heartbeat of a host. A writer (the agent) sets Time and
// Inventory; a reader uses WrittenAt and Inv, which work on a beat read
// from the bucket too: such a beat keeps its value as stored and decodes
// it on first use. Every reader follows every beat of every host (5,000 a
// second at 10,000 hosts), and almost all of them are only looked at for
// when they were stored: decoding each cost its inventory's allocations
// for nothing (docs/scaling.md).
type Beat struct {
	// Time is when the agent wrote the beat, by the agent's clock; readers
	// use WrittenAt.
	Time time.Time `json:"time"`
	// Inventory is what the agent supervises; nil when the beat has none
	// (an older agent, whose beat is a bare timestamp). Readers use Inv.
	Inventory *Inventory `json:"inventory,omitempty"`
	// Stored is when the bucket stored the beat (the NATS server's clock);
	// liveness is judged by it. Not part of the value.
	Stored time.Time `json:"-"`

	stored *storedValue // the value as read from the bucket; nil on a beat built to be written
}

// storedValue is a beat's value as the bucket stored it, decoded once, on
// first use.
type storedValue struct {
	once sync.Once
	raw  []byte // until decoded
	beat Beat   // Time and Inventory, once decoded
}

// read is a beat read from the bucket: stored at, value v (not decoded).
func read(v []byte, stored time.Time) Beat {
	return Beat{Stored: stored, stored: &storedValue{raw: v}}
}

// decoded is b with Time and Inventory set.
func (b Beat) decoded() Beat {
	sv := b.stored
	if sv == nil {
		return b
	}
	sv.once.Do(func() {
		sv.beat, sv.raw = decode(sv.raw), nil
	})
	b.Time, b.Inventory = sv.beat.Time, sv.beat.Inventory
	return b
}

// WrittenAt is when the agent wrote the beat, by its clock; zero when the
// value had none.
func (b Beat) WrittenAt() time.Time { return b.decoded().Time }

// Inv is the beat's inventory; nil when it has none (an older agent's
// bare timestamp, or a value that could not be decoded). Shared between
// the copies of a beat read from the bucket: not to be modified.
func (b Beat) Inv() *Inventory { return b.decoded().Inventory }

// Inventory is the game servers an agent supervises when it beats.
type Inventory struct {
	// Servers are the game servers the agent supervises, whether or not
	// their process runs at this instant (e.g. between restarts).
	Servers []Server `json:"servers"`
	// Queued counts the agent's events not yet in the stream (its outbox).
	// The inventory accounts for every server that left it only when this
	// is 0: a server's final events are in the stream before it leaves the
	// inventory, or still queued.
	Queued int `json:"queued"`
}

// Server is one game server in an inventory.
type Server struct {
	// Name is the game server's resource name.
	Name string `json:"name"`
	// Pid is its process id, 0 while no process runs.
	Pid int `json:"pid,omitempty"`
	// LastHeartbeatMs is when its process last sent an SDK heartbeat, in
	// Unix milliseconds; 0 before the first (and from an older agent). The
	// events record only connects and missed periods, so this is how
	// readers show it current. A number, not an RFC 3339 string: a beat
	// lists every server of its host every couple of seconds, and 13
	// digits are a third of the bytes and quicker to decode.
	LastHeartbeatMs int64 `json:"hb,omitempty"`
}

// LastHeartbeat is LastHeartbeatMs as a time; zero when unknown.
func (s Server) LastHeartbeat() time.Time {
	if s.LastHeartbeatMs <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(s.LastHeartbeatMs).UTC()
}

// Has reports whether the inventory lists a game server.
func (inv *Inventory) Has(name string) bool {
	for _, s := range inv.Servers {
		if s.Name == name {
			return true
		}
	}
	return false
}

// Setup creates the bucket with the given replicas, or updates it where it
// differs: `tether migrate` runs it.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int) error {
	return jsclient.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "Host heartbeats: one key per host, refreshed by its agent",
		TTL: keyTTL, History: 1, Replicas: replicas,
	})
}

// Open opens the bucket. It does not create it: a missing bucket is an
// error wrapping jsclient.ErrNotSetUp. (Creating or updating a bucket
// rewrites the stream's configuration on the server, which ten thousand
// agents starting at once made the NATS server's bottleneck.)
func Open(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, jsclient.NotSetUp("key-value bucket " + Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("hostbeat: bucket: %w", err)
	}
	return kv, nil
}

// Put writes a host's beat (a JSON object).
func Put(ctx context.Context, kv jetstream.KeyValue, host string, b Beat) error {
	data, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("hostbeat: %s: %w", host, err)
	}
	if _, err := kv.Put(ctx, host, data); err != nil {
		return fmt.Errorf("hostbeat: %s: %w", host, err)
	}
	return nil
}

// Read returns each host's last beat. A value that is a bare timestamp (an
// older agent's) or undecodable still counts as a beat, without inventory.
// It lists the keys, then gets each: one round trip per host; a reader that
// reads often uses a Tracker.
func Read(ctx context.Context, kv jetstream.KeyValue) (map[string]Beat, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("hostbeat: list: %w", err)
	}
	out := map[string]Beat{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or deleted since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("hostbeat: get %s: %w", k, err)
		}
		out[k] = read(e.Value(), e.Created())
	}
	return out, nil
}

// decode reads a beat's value: a JSON object, or a bare RFC 3339 timestamp.
func decode(v []byte) Beat {
	var b Beat
	if strings.HasPrefix(string(v), "{") {
		if err := json.Unmarshal(v, &b); err == nil {
			return b
		}
		return Beat{}
	}
	if t, err := time.Parse(time.RFC3339Nano, string(v)); err == nil {
		b.Time = t
	}
	return b
}

// Last returns when each host's key was last written (server time).
func Last(ctx context.Context, kv jetstream.KeyValue) (map[string]time.Time, error) {
	beats, err := Read(ctx, kv)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(beats))
	for k, b := range beats {
		out[k] = b.Stored
	}
	return out, nil
}
