// Package replicas keeps the set of live API replicas, so that each one
// can take its own slice of the allocation candidates (services/apiserver)
// instead of racing the others for the same READY servers.
//
// Every replica keeps a key of the TETHER_REPLICAS key-value bucket (its
// replica id) fresh by writing it every TTL/3, and watches the bucket. A
// replica is live while its key was written within the TTL, judged by the
// watcher's own clock when the write arrives: the bucket's TTL removes a
// silent replica's key without telling watchers, so the watcher ages it
// out itself. A replica that stops deletes its key, and the others see it
// leave at once.
//
// The set is advice, never a guarantee: two replicas may disagree for a
// moment (one joined, one died), and then they race for a few servers as
// they did without it. Allocation stays correct either way, since every
// allocation is an append guarded by the server's sequence.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
)

// Bucket is the key-value bucket of the live replicas: one key per replica.
const Bucket = "TETHER_REPLICAS"

// DefaultTTL is how long a replica that stopped writing its key (a crash,
// a partition) still counts as live. A dead replica's slice is served by
// the others only as their second choice until then.
const DefaultTTL = 6 * time.Second

// Setup creates the bucket, or updates it where its TTL or replicas differ.
func Setup(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) error {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return jsclient.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "Live API replicas: one key per replica, written every TTL/3",
		TTL: ttl, History: 1, Replicas: replicas,
	})
}

// Slice is one replica's share of the allocation candidates: the servers
// whose Slot is Index, among Count live replicas.
type Slice struct {
	Index, Count int
}

// Whole is the slice of a replica that knows of no other: everything.
var Whole = Slice{Index: 0, Count: 1}

// Holds reports whether the server named name is in the slice.
func (s Slice) Holds(name string) bool {
	return s.Count <= 1 || Slot(name, s.Count) == s.Index
}

// Slot is the slice, out of count, that the server named name falls in.
func Slot(name string, count int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name)) // a hash.Hash never fails to write
	return int(h.Sum32() % uint32(count))
}

// Member is one replica in the set. Run keeps it there; Slice may be called
// from any goroutine.
type Member struct {
	kv  jetstream.KeyValue
	id  string
	ttl time.Duration
	now func() time.Time
	log *slog.Logger

	mu    sync.Mutex
	seen  map[string]time.Time // replica id → when its key was last written, by our clock
	slice Slice
}

// Join opens the bucket (it must exist: `tether migrate` creates it) for
// replica id and writes its key once.
func Join(ctx context.Context, js jetstream.JetStream, id string, log *slog.Logger) (*Member, error) {
	if id == "" {
		return nil, errors.New("replicas: empty replica id")
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		return nil, fmt.Errorf("replicas: open bucket %s: %w", Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("replicas: bucket %s: %w", Bucket, err)
	}
	ttl := st.TTL()
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Member{kv: kv, id: id, ttl: ttl, now: time.Now, log: log, seen: map[string]time.Time{}, slice: Whole}
	if _, err := kv.PutString(ctx, id, id); err != nil {
		return nil, fmt.Errorf("replicas: write key %s: %w", id, err)
	}
	return m, nil
}

// Slice is this replica's slice of the candidates, as of what it has seen
// of the others; Whole until it has seen the set.
func (m *Member) Slice() Slice {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.slice
}

// Run writes the key every TTL/3 and follows the others until ctx ends
// (watching anew when a write of its own key has not come back through
// the watch by the next write: the watch stalled); then it deletes the
// key (with a short deadline of its own) so that the others take over
// its slice at once. It returns the error that stopped it: a write or a
// watch that failed. The slice falls back to Whole when Run returns.
func (m *Member) Run(ctx context.Context) (err error) {
	defer func() {
		m.mu.Lock()
		m.slice, m.seen = Whole, map[string]time.Time{}
		m.mu.Unlock()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if derr := m.kv.Delete(dctx, m.id); derr != nil {
			m.log.Debug("replicas: could not delete own key on stop; the others age it out", "replica", m.id, "err", derr)
		}
	}()
	w, err := m.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("replicas: watch %s: %w", Bucket, err)
	}
	defer func() { _ = w.Stop() }() // the watch ends with Run; nothing to report
	write := time.NewTicker(m.ttl / 3)
	defer write.Stop()
	unechoed := false // the last write of our key has not come back through the watch
	var wrote uint64  // its revision
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("replicas: the watch of %s ended", Bucket)
			}
			if e != nil {
				if e.Key() == m.id && e.Revision() >= wrote {
					unechoed = false // not an older value, as a new watch starts with
				}
				m.observe(e.Key(), e.Operation() == jetstream.KeyValuePut)
			}
		case <-write.C:
			if unechoed {
				// A whole interval and our own write never came back: the
				// watch has stalled (its consumer was lost with a NATS
				// server, which the client makes anew only after two
				// missed 5 s heartbeats; meanwhile every other replica
				// would age out, and this one take the whole).
				m.log.Warn("api replica set: the watch delivered not even this replica's own write; watching anew", "replica", m.id)
				_ = w.Stop() // replaced: whatever it says no longer matters
				again, err := m.kv.WatchAll(ctx)
				if err != nil { // w stays the stopped watcher: the deferred Stop needs one
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("replicas: watch %s again: %w", Bucket, err)
				}
				w = again
			}
			rev, err := m.kv.PutString(ctx, m.id, m.id)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("replicas: write key %s: %w", m.id, err)
			}
			unechoed, wrote = true, rev
			m.observe("", false) // age out the silent
		}
	}
}

// observe records a write (live) or a delete of key, ages out the
// replicas silent for a TTL, and recomputes this replica's slice.
func (m *Member) observe(key string, live bool) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if key != "" {
		if live {
			m.seen[key] = now
		} else {
			delete(m.seen, key)
		}
	}
	for id, at := range m.seen {
		if id != m.id && now.Sub(at) > m.ttl {
			delete(m.seen, id)
		}
	}
	m.seen[m.id] = now // this replica is live while Run runs
	ids := make([]string, 0, len(m.seen))
	for id := range m.seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	next := Slice{Index: slices.Index(ids, m.id), Count: len(ids)}
	if next != m.slice {
		m.log.Info("api replicas changed; allocation candidates sliced anew", "replica", m.id, "slice", next.Index, "of", next.Count)
	}
	m.slice = next
}
