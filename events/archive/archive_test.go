package archive_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/tetherhq/tether/events/archive"
)

// testAggregate is one aggregate's history to write.
type testAggregate struct {
	subject string
	records []archive.Record
}

// makeAggregates returns n aggregates of game servers, game sessions and
// player sessions, in increasing order of subject, with interleaved
// sequences as the stream would give them. Every tenth aggregate has an
// event with a large payload, every event carries the headers the store
// writes, and some carry many more.
func makeAggregates(seed uint64, n int) []testAggregate {
	rng := rand.New(rand.NewPCG(seed, 1))
	aggs := make([]testAggregate, n)
	for i := range aggs {
		var subject string
		switch i % 3 {
		case 0:
			subject = fmt.Sprintf("tether.ev.gs.arena.gs-%05d", i)
		case 1:
			subject = fmt.Sprintf("tether.ev.gsess.s-%05d", i)
		default:
			subject = fmt.Sprintf("tether.ev.ps.s-%05d.p-%d", i, i%7)
		}
		aggs[i].subject = subject
	}
	// Subjects sort as their numbers within a kind; sort them all.
	sortAggregates(aggs)
	seq := uint64(1)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range aggs {
		events := 1 + rng.IntN(12)
		for e := range events {
			seq += 1 + uint64(rng.IntN(50))
			size := 50 + rng.IntN(400)
			if i%10 == 0 && e == 0 {
				size = 300<<10 + rng.IntN(1000) // larger than a block
			}
			data := make([]byte, size)
			for j := range data {
				data[j] = byte(rng.IntN(16)) // compressible, not trivially
			}
			h := nats.Header{}
			h.Set("Nats-Msg-Id", fmt.Sprintf("%032x", rng.Uint64()))
			h.Set("Tether-Type", "GameServerReady")
			h.Set("Tether-Signer", "UABC")
			h.Set("Tether-Signature", fmt.Sprintf("sig-%d", rng.Uint64()))
			h.Set("traceparent", fmt.Sprintf("00-%032x-%016x-01", rng.Uint64(), rng.Uint64()))
			if e%3 == 0 {
				h.Set("tracestate", "vendor=1")
				for k := range 20 {
					h.Add("X-Many", fmt.Sprintf("value-%d", k))
					h.Set(fmt.Sprintf("X-Extra-%02d", k), "")
				}
			}
			aggs[i].records = append(aggs[i].records, archive.Record{
				Sequence: seq,
				Subject:  aggs[i].subject,
				Time:     base.Add(time.Duration(seq) * time.Millisecond).Add(time.Duration(rng.IntN(1000))),
				Header:   h,
				Data:     data,
			})
		}
	}
	return aggs
}

// sortAggregates sorts by subject.
func sortAggregates(aggs []testAggregate) {
	for i := 1; i < len(aggs); i++ {
		for j := i; j > 0 && aggs[j].subject < aggs[j-1].subject; j-- {
			aggs[j], aggs[j-1] = aggs[j-1], aggs[j]
		}
	}
}

// writeSegment writes aggs to a segment in memory.
func writeSegment(t testing.TB, aggs []testAggregate, opts archive.WriterOptions) ([]byte, archive.Summary) {
	t.Helper()
	var buf bytes.Buffer
	w := archive.NewWriter(&buf, opts)
	for _, a := range aggs {
		if err := w.Add(a.subject, a.records); err != nil {
			t.Fatalf("Add(%s): %v", a.subject, err)
		}
	}
	sum, err := w.Close()
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	return buf.Bytes(), sum
}

// writeFile writes b to a file in a temporary directory and opens it.
func writeFile(t *testing.T, b []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "segment")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// checkRecords fails unless got holds exactly want.
func checkRecords(t testing.TB, subject string, got, want []archive.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", subject, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Sequence != w.Sequence || g.Subject != w.Subject || !g.Time.Equal(w.Time) || g.Time.Location() != time.UTC ||
			!bytes.Equal(g.Data, w.Data) || !sameHeader(g.Header, w.Header) {
			t.Fatalf("%s: record %d differs:\n got seq %d subject %q time %s header %v data %d bytes\nwant seq %d subject %q time %s header %v data %d bytes",
				subject, i, g.Sequence, g.Subject, g.Time, g.Header, len(g.Data), w.Sequence, w.Subject, w.Time, w.Header, len(w.Data))
		}
	}
}

// sameHeader compares headers as a segment keeps them: keys with values.
func sameHeader(got, want nats.Header) bool {
	norm := func(h nats.Header) nats.Header {
		n := nats.Header{}
		for k, vs := range h {
			if len(vs) > 0 {
				n[k] = vs
			}
		}
		return n
	}
	return reflect.DeepEqual(norm(got), norm(want))
}

func TestRoundTrip(t *testing.T) {
	aggs := makeAggregates(1, 300)
	for _, bs := range []int{0, 1, 4 << 10} {
		t.Run(fmt.Sprintf("block size %d", bs), func(t *testing.T) {
			b, sum := writeSegment(t, aggs, archive.WriterOptions{BlockSize: bs})
			f := writeFile(t, b)
			r, err := archive.Open(f, int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			events := 0
			for _, a := range aggs {
				events += len(a.records)
			}
			if sum.Size != int64(len(b)) || sum.Aggregates != len(aggs) || sum.Events != events || r.Events() != events || r.Size() != sum.Size {
				t.Errorf("summary %+v, reader %d events; wrote %d bytes, %d aggregates, %d events", sum, r.Events(), len(b), len(aggs), events)
			}
			if r.Sum() != sum.SHA256 {
				t.Errorf("reader sum %x, writer %x", r.Sum(), sum.SHA256)
			}
			if len(b) >= len(aggs[0].records[0].Data)*len(aggs)/10 {
				t.Errorf("segment of %d bytes is not compressed", len(b))
			}
			t.Logf("%d aggregates, %d events, %d blocks, %d bytes", sum.Aggregates, sum.Events, sum.Blocks, sum.Size)
			switch bs {
			case 1:
				if sum.Blocks != len(aggs) {
					t.Errorf("%d blocks with block size 1, want one per aggregate (%d)", sum.Blocks, len(aggs))
				}
			case 0:
				if sum.Blocks >= len(aggs)/2 {
					t.Errorf("%d blocks for %d aggregates with the default block size", sum.Blocks, len(aggs))
				}
			}

			infos := r.Aggregates()
			if len(infos) != len(aggs) {
				t.Fatalf("%d aggregates, want %d", len(infos), len(aggs))
			}
			for i, a := range aggs {
				want := archive.AggregateInfo{Subject: a.subject, FirstSequence: a.records[0].Sequence,
					LastSequence: a.records[len(a.records)-1].Sequence, Events: len(a.records)}
				if infos[i] != want {
					t.Fatalf("aggregate %d: %+v, want %+v", i, infos[i], want)
				}
				if got, ok := r.Lookup(a.subject); !ok || got != want {
					t.Fatalf("Lookup(%s) = %+v, %v", a.subject, got, ok)
				}
				recs, err := r.Read(a.subject)
				if err != nil {
					t.Fatalf("Read(%s): %v", a.subject, err)
				}
				checkRecords(t, a.subject, recs, a.records)
			}

			i := 0
			for agg, err := range r.All() {
				if err != nil {
					t.Fatal(err)
				}
				if agg.Subject != aggs[i].subject {
					t.Fatalf("All: aggregate %d is %s, want %s", i, agg.Subject, aggs[i].subject)
				}
				checkRecords(t, agg.Subject, agg.Records, aggs[i].records)
				i++
			}
			if i != len(aggs) {
				t.Fatalf("All yielded %d aggregates, want %d", i, len(aggs))
			}
			if err := r.Verify(); err != nil {
				t.Fatal(err)
			}

			if _, err := r.Read("tether.ev.gs.arena.missing"); !errors.Is(err, archive.ErrNotFound) {
				t.Errorf("Read of a missing aggregate: %v, want ErrNotFound", err)
			}
			if _, ok := r.Lookup("tether.ev.gs.arena.missing"); ok {
				t.Error("Lookup of a missing aggregate found it")
			}
		})
	}
}

func TestAllStopsWhenAsked(t *testing.T) {
	b, _ := writeSegment(t, makeAggregates(2, 20), archive.WriterOptions{})
	r, err := archive.Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range r.All() {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("iterated %d", n)
	}
}

// TestDeterministic pins down that a retried write makes the same bytes,
// which idempotent Puts of the archiver rely on.
func TestDeterministic(t *testing.T) {
	aggs := makeAggregates(3, 50)
	a, sa := writeSegment(t, aggs, archive.WriterOptions{})
	b, sb := writeSegment(t, aggs, archive.WriterOptions{})
	if !bytes.Equal(a, b) || sa != sb {
		t.Fatal("the same aggregates made different segments")
	}
}

func TestSummarySumIsFileSHA256(t *testing.T) {
	b, sum := writeSegment(t, makeAggregates(4, 5), archive.WriterOptions{})
	if !bytes.Equal(b[len(b)-32:], sum.SHA256[:]) {
		t.Fatal("the last 32 bytes are not the summary's sum")
	}
}

// TestSignatureStillVerifies stores a signed message as the store signs
// events (subject, NUL, data) and checks the signature after reading back.
func TestSignatureStillVerifies(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	subject := "tether.ev.gs.arena.gs-1"
	data := []byte("\x0a\x20an envelope, as the store marshals it")
	sig, err := kp.Sign(append(append([]byte(subject), 0), data...))
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set("Tether-Signer", pub)
	h.Set("Tether-Signature", string(sig)) // raw bytes in a header value survive too
	rec := archive.Record{Sequence: 7, Subject: subject, Time: time.Now(), Header: h, Data: data}
	b, _ := writeSegment(t, []testAggregate{{subject, []archive.Record{rec}}}, archive.WriterOptions{})
	r, err := archive.Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := r.Read(subject)
	if err != nil {
		t.Fatal(err)
	}
	got := recs[0]
	vk, err := nkeys.FromPublicKey(got.Header.Get("Tether-Signer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := vk.Verify(append(append([]byte(got.Subject), 0), got.Data...), []byte(got.Header.Get("Tether-Signature"))); err != nil {
		t.Fatalf("signature of the archived event: %v", err)
	}
}

func TestWriterRejects(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(subject string, seq uint64) archive.Record {
		return archive.Record{Sequence: seq, Subject: subject, Time: at, Data: []byte("x")}
	}
	for _, tc := range []struct {
		name    string
		subject string
		records []archive.Record
	}{
		{"no subject", "", []archive.Record{rec("", 1)}},
		{"no events", "a", nil},
		{"other subject", "a", []archive.Record{rec("b", 1)}},
		{"sequence 0", "a", []archive.Record{rec("a", 0)}},
		{"out of order", "a", []archive.Record{rec("a", 2), rec("a", 1)}},
		{"repeated sequence", "a", []archive.Record{rec("a", 2), rec("a", 2)}},
		{"zero time", "a", []archive.Record{{Sequence: 1, Subject: "a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := archive.NewWriter(io.Discard, archive.WriterOptions{})
			if err := w.Add(tc.subject, tc.records); err == nil {
				t.Fatal("Add took it")
			}
		})
	}

	w := archive.NewWriter(io.Discard, archive.WriterOptions{})
	if _, err := w.Close(); err == nil {
		t.Error("Close of an empty segment succeeded")
	}
	w = archive.NewWriter(io.Discard, archive.WriterOptions{})
	if err := w.Add("b", []archive.Record{rec("b", 1)}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if err := w.Add(s, []archive.Record{rec(s, 2)}); err == nil {
			t.Errorf("Add(%s) after b succeeded", s)
		}
	}
	if err := w.Add("c", []archive.Record{rec("c", 3)}); err != nil {
		t.Fatalf("a rejected Add left the writer unusable: %v", err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("d", []archive.Record{rec("d", 4)}); err == nil {
		t.Error("Add after Close succeeded")
	}
}

// failWriter fails after n bytes.
type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		n := f.n
		f.n = 0
		return n, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriterSticksToWriteError(t *testing.T) {
	aggs := makeAggregates(5, 30)
	w := archive.NewWriter(&failWriter{n: 1000}, archive.WriterOptions{BlockSize: 1})
	var err error
	for _, a := range aggs {
		if err = w.Add(a.subject, a.records); err != nil {
			break
		}
	}
	if err == nil {
		_, err = w.Close()
	}
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("disk full")) {
		t.Fatalf("error %v, want the write's", err)
	}
	if _, err := w.Close(); err == nil {
		t.Fatal("Close after a write error succeeded")
	}
}

// countingReaderAt records the byte ranges read.
type countingReaderAt struct {
	ra     io.ReaderAt
	mu     sync.Mutex
	ranges [][2]int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	c.ranges = append(c.ranges, [2]int64{off, off + int64(len(p))})
	c.mu.Unlock()
	return c.ra.ReadAt(p, off)
}

// take returns the ranges read since the last call.
func (c *countingReaderAt) take() [][2]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.ranges
	c.ranges = nil
	return r
}

// TestReadTouchesOnlyItsBlock reads each aggregate through a counting
// ReaderAt: Open reads the header, the footer and the index, and a read
// reads one contiguous range of the blocks, far less than the file.
func TestReadTouchesOnlyItsBlock(t *testing.T) {
	aggs := makeAggregates(6, 200)
	b, sum := writeSegment(t, aggs, archive.WriterOptions{})
	f := writeFile(t, b)
	c := &countingReaderAt{ra: f}
	r, err := archive.Open(c, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	opened := c.take()
	var openBytes, indexOffset int64
	for _, rg := range opened {
		openBytes += rg[1] - rg[0]
		switch {
		case rg == [2]int64{0, 16}, rg == [2]int64{int64(len(b)) - 84, int64(len(b))}:
		case rg[1] == int64(len(b))-84:
			indexOffset = rg[0]
		default:
			t.Errorf("Open read [%d, %d), not the header, the index or the footer", rg[0], rg[1])
		}
	}
	if len(opened) != 3 || indexOffset == 0 {
		t.Fatalf("Open made reads %v, want 3 (header, footer, index)", opened)
	}
	t.Logf("segment of %d bytes in %d blocks; Open read %d bytes", len(b), sum.Blocks, openBytes)

	// The blocks' ranges, as the reads of single aggregates show them.
	blocks := map[[2]int64]bool{}
	var maxRead int64
	for _, a := range aggs {
		if _, err := r.Read(a.subject); err != nil {
			t.Fatal(err)
		}
		reads := c.take()
		if len(reads) != 1 {
			t.Fatalf("Read(%s) made %d reads, want 1", a.subject, len(reads))
		}
		rg := reads[0]
		if rg[0] < 16 || rg[1] > indexOffset {
			t.Fatalf("Read(%s) read [%d, %d), outside the blocks", a.subject, rg[0], rg[1])
		}
		blocks[rg] = true
		maxRead = max(maxRead, rg[1]-rg[0])
	}
	if len(blocks) != sum.Blocks {
		t.Errorf("reads touched %d distinct ranges, the segment has %d blocks", len(blocks), sum.Blocks)
	}
	// Distinct blocks do not overlap.
	for x := range blocks {
		for y := range blocks {
			if x != y && x[0] < y[1] && y[0] < x[1] {
				t.Errorf("block ranges %v and %v overlap", x, y)
			}
		}
	}
	if maxRead*4 > int64(len(b)) {
		t.Errorf("the largest read is %d bytes of a %d-byte segment", maxRead, len(b))
	}
}

// TestConcurrentReaders reads, iterates and verifies one segment from
// many goroutines at once; run with -race.
func TestConcurrentReaders(t *testing.T) {
	aggs := makeAggregates(7, 120)
	b, _ := writeSegment(t, aggs, archive.WriterOptions{BlockSize: 16 << 10})
	f := writeFile(t, b)
	r, err := archive.Open(f, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			switch g % 4 {
			case 0:
				if err := r.Verify(); err != nil {
					errs <- err
				}
			case 1:
				for _, err := range r.All() {
					if err != nil {
						errs <- err
						return
					}
				}
			default:
				for i := g; i < len(aggs); i += 3 {
					recs, err := r.Read(aggs[i].subject)
					if err != nil {
						errs <- err
						return
					}
					if len(recs) != len(aggs[i].records) || !bytes.Equal(recs[0].Data, aggs[i].records[0].Data) {
						errs <- fmt.Errorf("%s read back wrong", aggs[i].subject)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestEmptyHeaderAndData(t *testing.T) {
	at := time.Unix(0, -5) // before 1970 is fine
	recs := []archive.Record{
		{Sequence: 1, Subject: "s", Time: at},
		{Sequence: 1 << 62, Subject: "s", Time: time.Unix(0, 1<<62), Header: nats.Header{"k": {}}, Data: []byte{}},
	}
	b, _ := writeSegment(t, []testAggregate{{"s", recs}}, archive.WriterOptions{})
	r, err := archive.Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read("s")
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g.Header != nil || g.Data != nil || g.Sequence != recs[i].Sequence || !g.Time.Equal(recs[i].Time) {
			t.Errorf("record %d: %+v", i, g)
		}
	}
}
