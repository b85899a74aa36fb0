package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/heapstat"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// watched is one item a watch yielded.
type watched struct {
	seq uint64
	err error
}

// startWatch ranges over a watch in a goroutine; the channel closes when
// the iteration ends.
func startWatch(ctx context.Context, e env, after, until uint64, subjects ...string) <-chan watched {
	ch := make(chan watched, 100)
	go func() {
		defer close(ch)
		for ev, err := range e.store.Watch(ctx, after, until, subjects) {
			ch <- watched{ev.Sequence, err}
		}
	}()
	return ch
}

// next waits for the watch's next item.
func next(t *testing.T, ch <-chan watched) watched {
	t.Helper()
	select {
	case w, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no event from the watch in 10s")
	}
	return watched{}
}

// drain collects a bounded watch to its end.
func drain(t *testing.T, ch <-chan watched) []uint64 {
	t.Helper()
	var seqs []uint64
	deadline := time.After(10 * time.Second)
	for {
		select {
		case w, ok := <-ch:
			if !ok {
				return seqs
			}
			if w.err != nil {
				t.Fatalf("watch error: %v", w.err)
			}
			seqs = append(seqs, w.seq)
		case <-deadline:
			t.Fatalf("the bounded watch did not end in 10s; got %v", seqs)
		}
	}
}

func TestWatchLive(t *testing.T) {
	e := newEnv(t)
	a1 := e.append(t, fleetSubject("a"), events.AnySequence, fleetCreated("a", 1))
	e.append(t, fleetSubject("b"), events.AnySequence, fleetCreated("b", 1))
	a2 := e.append(t, fleetSubject("a"), events.AnySequence, fleetCreated("a", 2))

	ctx, cancel := context.WithCancel(e.ctx)
	ch := startWatch(ctx, e, a1, 0, fleetSubject("a"), fleetSubject("c"))
	if w := next(t, ch); w.err != nil || w.seq != a2 {
		t.Fatalf("first event %+v, want sequence %d", w, a2)
	}
	// Live: events stored after the watch started arrive, in order, others
	// are left out.
	e.append(t, fleetSubject("b"), events.AnySequence, fleetCreated("b", 2))
	c1 := e.append(t, fleetSubject("c"), events.AnySequence, fleetCreated("c", 1))
	a3 := e.append(t, fleetSubject("a"), events.AnySequence, fleetCreated("a", 3))
	for _, want := range []uint64{c1, a3} {
		if w := next(t, ch); w.err != nil || w.seq != want {
			t.Fatalf("event %+v, want sequence %d", w, want)
		}
	}
	cancel()
	for w := range ch {
		if w.err != nil {
			t.Fatalf("a cancelled watch yielded %v", w.err)
		}
	}
}

func TestWatchBounded(t *testing.T) {
	e := newEnv(t)
	var a, b []uint64 // sequences of fleets a and b
	for i := range 6 {
		if i%3 == 2 {
			b = append(b, e.append(t, fleetSubject("b"), events.AnySequence, fleetCreated("b", 1)))
		} else {
			a = append(a, e.append(t, fleetSubject("a"), events.AnySequence, fleetCreated("a", 1)))
		}
	}
	last := b[1] // 6
	tests := []struct {
		name         string
		after, until uint64
		subjects     []string
		want         []uint64
	}{
		{"everything", 0, last, nil, []uint64{1, 2, 3, 4, 5, 6}},
		{"a middle range", 1, 4, nil, []uint64{2, 3, 4}},
		{"one subject", 0, last, []string{fleetSubject("a")}, a},
		{"one subject up to one of another", 0, b[0], []string{fleetSubject("a")}, a[:2]},
		{"none of the subject in range", a[3], last, []string{fleetSubject("a")}, nil},
		{"no such subject", 0, last, []string{fleetSubject("z")}, nil},
		{"empty range", 4, 4, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := drain(t, startWatch(e.ctx, e, tc.after, tc.until, tc.subjects...))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A bounded watch is not cut short by a replica behind the stream's leader
// (natstest.BehindReplica: one that holds fleet a's event, not fleet b's).
func TestWatchBoundedWhenAReplicaIsBehind(t *testing.T) {
	e := newEnv(t)
	e.append(t, fleetSubject("a"), events.AnySequence, fleetCreated("a", 1))
	natstest.BehindReplica(t, e.js, events.StreamName, fleetSubject("a"))
	b1 := e.append(t, fleetSubject("b"), events.AnySequence, fleetCreated("b", 1))
	// Were the first read a direct get, ten watches all answered by the
	// stream itself would have odds of 1 in 1,024.
	for i := range 10 {
		if got := drain(t, startWatch(e.ctx, e, 0, b1, fleetSubject("b"))); !slices.Equal(got, []uint64{b1}) {
			t.Fatalf("watch %d of fleet b up to %d: %v", i, b1, got)
		}
	}
}

func TestWatchUndecodable(t *testing.T) {
	e := newEnv(t)
	first := e.append(t, fleetSubject("p"), events.AnySequence, fleetCreated("p", 1))
	ack, err := e.js.Publish(e.ctx, fleetSubject("p"), []byte("not an envelope"))
	if err != nil {
		t.Fatal(err)
	}
	last := e.append(t, fleetSubject("p"), events.AnySequence, fleetCreated("p", 2))
	var got []watched
	for ev, err := range e.store.Watch(e.ctx, 0, last, nil) {
		got = append(got, watched{ev.Sequence, err})
		if err != nil && ev.Aggregate != events.FleetName("p") {
			t.Errorf("the undecodable event names %q, want its aggregate", ev.Aggregate)
		}
	}
	if len(got) != 3 || got[0] != (watched{first, nil}) || got[1].seq != ack.Sequence ||
		!errors.Is(got[1].err, events.ErrUndecodable) || got[2] != (watched{last, nil}) {
		t.Fatalf("got %+v; want the poison as an error between the two good events", got)
	}
}

func TestSequenceAt(t *testing.T) {
	e := newEnv(t)
	if seq, err := e.store.SequenceAt(e.ctx, time.Now()); err != nil || seq != 1 {
		t.Fatalf("empty stream: %d, %v; want 1", seq, err)
	}
	var stored []time.Time
	for i := range 20 {
		seq := e.append(t, fleetSubject("t"), events.AnySequence, fleetCreated("t", int32(i)))
		m, err := e.store.Stream().GetMsg(e.ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, m.Time)
	}
	for i, ts := range stored {
		if seq, err := e.store.SequenceAt(e.ctx, ts); err != nil || seq != uint64(i+1) {
			t.Fatalf("at the time of event %d: %d, %v", i+1, seq, err)
		}
		if i > 0 && !stored[i-1].Before(ts) {
			continue // same timestamp as its predecessor: no time between
		}
		if seq, err := e.store.SequenceAt(e.ctx, ts.Add(-time.Nanosecond)); err != nil || seq != uint64(i+1) {
			t.Fatalf("just before event %d: %d, %v", i+1, seq, err)
		}
	}
	if seq, err := e.store.SequenceAt(e.ctx, stored[19].Add(time.Nanosecond)); err != nil || seq != 21 {
		t.Fatalf("after the last event: %d, %v; want 21", seq, err)
	}
}

// SequenceAt is not answered by a replica behind the stream's leader
// (natstest.BehindReplica: one that holds fleet a's event, not fleet b's
// after it), which would place a time after both before fleet b's.
func TestSequenceAtWhenAReplicaIsBehind(t *testing.T) {
	e := newEnv(t)
	e.append(t, fleetSubject("a"), events.AnySequence, fleetCreated("a", 1))
	natstest.BehindReplica(t, e.js, events.StreamName, fleetSubject("a"))
	b1 := e.append(t, fleetSubject("b"), events.AnySequence, fleetCreated("b", 1))
	m, found, err := jsclient.LeaderGet(e.ctx, e.js.Conn(), events.StreamName, jsclient.MsgRequest{Seq: b1})
	if err != nil || !found {
		t.Fatalf("fleet b's event: found %v, %v", found, err)
	}
	// Were the reads direct gets, ten answers all from the stream itself
	// would have odds of 1 in 1,024.
	for i := range 10 {
		if seq, err := e.store.SequenceAt(e.ctx, m.Time.Add(time.Nanosecond)); err != nil || seq != b1+1 {
			t.Fatalf("search %d: after fleet b's event: %d, %v; want %d", i, seq, err, b1+1)
		}
	}
}

// TestSequenceAtOverPurgedEvents: the archiver's purges leave gaps in the
// stream's sequences; SequenceAt steps over them (a probe at a purged
// sequence used to fail), and answers so that the events left before it
// were stored before the time and those from it on at or after it.
func TestSequenceAtOverPurgedEvents(t *testing.T) {
	e := newEnv(t)
	var stored []time.Time
	for i := range 30 {
		id := "keep"
		if i%3 != 0 || i >= 24 {
			id = "gone" // purged below: most of the stream, and its end
		}
		seq := e.append(t, fleetSubject(id), events.AnySequence, fleetCreated(id, int32(i)))
		m, err := e.store.Stream().GetMsg(e.ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, m.Time)
	}
	if _, err := e.store.PurgeSubject(e.ctx, fleetSubject("gone"), 30); err != nil {
		t.Fatal(err)
	}
	for i, ts := range stored {
		seq, err := e.store.SequenceAt(e.ctx, ts)
		if err != nil {
			t.Fatalf("at the time of event %d: %v", i+1, err)
		}
		// Every event left in the stream is before the answer iff it was
		// stored before ts.
		for j := 0; j < 24; j += 3 {
			if before := uint64(j+1) < seq; before != stored[j].Before(ts) {
				t.Fatalf("at the time of event %d: answer %d, but event %d (kept, stored %s) is on the wrong side",
					i+1, seq, j+1, stored[j].Format(time.RFC3339Nano))
			}
		}
	}
	if seq, err := e.store.SequenceAt(e.ctx, stored[29].Add(time.Nanosecond)); err != nil || seq < 23 || seq > 31 {
		t.Fatalf("after the last event: %d, %v", seq, err)
	}
}

// TestDecodeAsTheStoreReads: Decode of a message as stored gives the
// envelope History gives.
func TestDecodeAsTheStoreReads(t *testing.T) {
	e := newEnv(t)
	seq := e.append(t, fleetSubject("d"), 0, fleetCreated("d", 4))
	msgs, err := e.store.Stored(e.ctx, fleetSubject("d"), 1, seq)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("stored: %d, %v", len(msgs), err)
	}
	got, err := e.store.Decode(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := e.history(t, fleetSubject("d"), 0)[0]
	if got.Sequence != seq || got.ID != want.ID || got.Type != want.Type || !proto.Equal(got.Data, want.Data) {
		t.Fatalf("decoded %+v, History read %+v", got, want)
	}
	if _, err := e.store.Decode(natsjs.StoredMessage{Sequence: 9, Subject: fleetSubject("d"), Data: []byte("not an envelope")}); !errors.Is(err, events.ErrUndecodable) {
		t.Fatalf("decode of garbage: %v, want ErrUndecodable", err)
	}
}

// An event read by its sequence (a retried request's first event, which
// the stream acknowledged) is found even when a replica behind the leader
// that does not hold it answers the direct get. Ten reads.
func TestEventWhenAReplicaIsBehind(t *testing.T) {
	e := newEnv(t)
	e.append(t, fleetSubject("a"), events.AnySequence, fleetCreated("a", 1))
	natstest.BehindReplica(t, e.js, events.StreamName, fleetSubject("a"))
	for i := range 10 {
		seq := e.append(t, fleetSubject(fmt.Sprintf("b%d", i)), events.AnySequence, fleetCreated(fmt.Sprintf("b%d", i), 1))
		got, err := e.store.Event(e.ctx, seq)
		if err != nil || got.Sequence != seq || got.Aggregate != events.FleetName(fmt.Sprintf("b%d", i)) {
			t.Fatalf("event %d: %s at %d, %v", seq, got.Aggregate, got.Sequence, err)
		}
	}
}

// A watch whose reader stops reading holds one pull of events, bounded in
// bytes by the largest message NATS takes (1 MiB), not 256 events of any
// size: twenty watches of 16 KB events that each read one and stop grew
// the heap by 84 MiB (4 MiB each), and by 29 MiB with the byte bound
// (with the server's cache of the stream's blocks, 16 MB here).
func TestAWatchThatIsNotReadHoldsOnePull(t *testing.T) {
	const (
		watches = 20
		onePull = 3 << 19 // 1 MiB and what its messages take besides
		besides = 16 << 20
	)
	e := newEnv(t)
	labels := map[string]string{"padding": strings.Repeat("x", 16000)}
	for i := range 1000 {
		name := events.GameServerName("arena", fmt.Sprintf("gs-%d", i))
		e.append(t, events.MustSubject(name), events.AnySequence,
			events.New(name, time.Now(), &eventsv1.GameServerScheduled{Host: "hosts/h1", Labels: labels}))
	}
	base := heapstat.Live()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for range watches {
		first := make(chan struct{})
		go func() {
			for range e.store.Watch(ctx, 0, 0, nil) {
				close(first)
				<-ctx.Done() // reads no more
				return
			}
		}()
		select {
		case <-first:
		case <-time.After(10 * time.Second):
			t.Fatal("no event from the watch in 10s")
		}
	}
	bound := int64(watches*onePull + besides)
	var grown int64
	wait.Holds(t, 2*time.Second, "the heap's bound, while the watches hold their pulls", func() bool {
		if grown = max(grown, heapstat.Live()-base); grown > bound {
			t.Logf("%d watches not read grew the heap by %.1f MiB, over %.1f MiB", watches, float64(grown)/(1<<20), float64(bound)/(1<<20))
			return false
		}
		return true
	})
	t.Logf("%d watches not read grew the heap by %.1f MiB at most (bound %.1f MiB)", watches, float64(grown)/(1<<20), float64(bound)/(1<<20))
}
