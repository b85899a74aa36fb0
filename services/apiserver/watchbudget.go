package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// errWatchEvicted is the cause of a watch ended because the watches of the
// API server held their whole budget and it held the most of it.
var errWatchEvicted = errors.New("apiserver: the watches held their total budget of bytes, this one the most")

// watchBudget bounds the bytes of the encoded events that the API server's
// watches hold for their clients: each watch's (perWatch,
// Options.WatchBufferBytes) and all of theirs together (total,
// Options.WatchTotalBytes). A watch reserves an event's bytes before it
// queues the event, and releases them once the transport has taken it. A
// watch over its own bound waits for its client; one that would take the
// total over its bound ends the watch that holds the most (the client that
// reads least), which then fails WATCH_FELL_BEHIND, and waits for its
// bytes.
type watchBudget struct {
	perWatch, total int64

	mu      sync.Mutex
	held    int64 // every watch's bytes
	watches map[*watchHold]struct{}
	starved bool          // a watch waits for the total: the next release closes freed
	freed   chan struct{} // closed, then replaced, by a release after starved
}

// newWatchBudget returns a budget of perWatch bytes a watch (at most the
// total: a watch alone waits for its client, and ends no other) and total
// for every watch.
func newWatchBudget(perWatch, total int) *watchBudget {
	return &watchBudget{perWatch: int64(min(perWatch, total)), total: int64(total), watches: map[*watchHold]struct{}{}, freed: make(chan struct{})}
}

// watchHold is one watch's share of a watchBudget.
type watchHold struct {
	b   *watchBudget
	end context.CancelCauseFunc // ends the watch, with errWatchEvicted
	// own receives when the watch's own bytes were released.
	own chan struct{}

	// Guarded by b.mu.
	held    int64
	evicted bool // ended by the budget; its bytes go when it closes
	closed  bool
}

// open returns a new watch's share; end ends the watch when the budget
// takes it back. The watch closes it when it ends.
func (b *watchBudget) open(end context.CancelCauseFunc) *watchHold {
	w := &watchHold{b: b, end: end, own: make(chan struct{}, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watches[w] = struct{}{}
	return w
}

// heldTotal returns the bytes every watch holds.
func (b *watchBudget) heldTotal() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// reservation is what reserve decided.
type reservation struct {
	// ok: the bytes are the watch's.
	ok bool
	// freed, when not ok and set, is closed once another watch releases
	// bytes: the total was over (own says when the watch's own were).
	freed <-chan struct{}
	// evicted, when set, is the watch reserve ended to make room (maybe
	// the one that asked): end it.
	evicted *watchHold
}

// reserve takes size bytes for w if both bounds allow it. A watch that
// holds nothing may always take one event, so that events larger than a
// bound still go, one at a time.
func (w *watchHold) reserve(size int64) reservation {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case w.closed || w.evicted:
		return reservation{}
	case w.held == 0:
	case w.held+size > b.perWatch:
		return reservation{}
	case b.held+size > b.total:
		b.starved = true
		return reservation{freed: b.freed, evicted: b.evictFattest()}
	}
	w.held += size
	b.held += size
	return reservation{ok: true}
}

// evictFattest marks the watch that holds the most bytes as evicted and
// returns it; nil while a watch evicted before still holds bytes (they go
// as it closes: no other is ended meanwhile). b.mu is held.
func (b *watchBudget) evictFattest() *watchHold {
	var fattest *watchHold
	for w := range b.watches {
		switch {
		case w.held == 0:
		case w.evicted:
			return nil
		case fattest == nil || w.held > fattest.held:
			fattest = w
		}
	}
	if fattest != nil {
		fattest.evicted = true
	}
	return fattest
}

// release gives back size bytes the transport has taken.
func (w *watchHold) release(size int64) {
	b := w.b
	b.mu.Lock()
	if !w.closed {
		w.held -= size
		b.held -= size
		b.wake()
	}
	b.mu.Unlock()
	select {
	case w.own <- struct{}{}:
	default:
	}
}

// close gives back every byte the watch still holds: it has ended.
func (w *watchHold) close() {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	b.held -= w.held
	w.held = 0
	delete(b.watches, w)
	b.wake()
}

// wake tells the watches that wait for the total that bytes were
// released. b.mu is held.
func (b *watchBudget) wake() {
	if b.starved {
		close(b.freed)
		b.freed = make(chan struct{})
		b.starved = false
	}
}

// heldBytes returns the bytes w holds.
func (w *watchHold) heldBytes() int64 {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.held
}

// transportBuffers is the pool of the buffers the gRPC server marshals
// its messages into (pooledCodec): a size class for every power of two
// from 256 bytes to 4 MiB (gRPC's largest message by default), so that a
// message the transport holds takes at most twice its bytes. gRPC's
// default pool has none between 32 KiB and 1 MiB: each event of 33 KiB to
// 1 MiB that a watch's transport held (two or three while its client does
// not read) took 1 MiB.
var transportBuffers = func() mem.BufferPool {
	exponents := make([]uint8, 0, 15)
	for e := uint8(8); e <= 22; e++ {
		exponents = append(exponents, e)
	}
	pool, err := mem.NewBinaryTieredBufferPool(exponents...)
	if err != nil {
		panic(fmt.Sprintf("apiserver: transport buffer pool: %v", err)) // the exponents are constants
	}
	return pool
}()

// pooledCodec is a codec whose messages are marshalled into
// transportBuffers rather than gRPC's default pool.
type pooledCodec struct{ encoding.CodecV2 }

// Marshal encodes v, a protobuf message, into one buffer of
// transportBuffers (a small one is allocated, as gRPC's codec does).
func (c pooledCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		return c.CodecV2.Marshal(v)
	}
	buf := transportBuffers.Get(size)
	// UseCachedSize: the size was just computed, of a message no one
	// changes while it is sent.
	if _, err := (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend((*buf)[:0], m); err != nil {
		transportBuffers.Put(buf)
		return nil, fmt.Errorf("apiserver: marshal %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, transportBuffers)}, nil
}
