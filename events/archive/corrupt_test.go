package archive_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/events/archive"
)

// smallAggregates is a few aggregates in a few blocks: a small segment
// whose every byte the corruption tests alter.
func smallAggregates() []testAggregate {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var aggs []testAggregate
	seq := uint64(100)
	for i, subject := range []string{"tether.ev.gs.a.g1", "tether.ev.gs.a.g2", "tether.ev.gsess.s1", "tether.ev.ps.s1.p1"} {
		var recs []archive.Record
		for e := range 1 + i%3 {
			seq += 3
			h := nats.Header{}
			h.Set("Nats-Msg-Id", fmt.Sprintf("id-%d", seq))
			h.Set("Tether-Type", "T")
			recs = append(recs, archive.Record{Sequence: seq, Subject: subject, Time: at.Add(time.Duration(seq)), Header: h,
				Data: bytes.Repeat([]byte{byte(e + 1)}, 10+e)})
		}
		aggs = append(aggs, testAggregate{subject, recs})
	}
	return aggs
}

// smallSegment writes smallAggregates in blocks of about two aggregates.
func smallSegment(t testing.TB) ([]byte, []testAggregate) {
	aggs := smallAggregates()
	b, sum := writeSegment(t, aggs, archive.WriterOptions{BlockSize: 150})
	if sum.Blocks < 2 {
		t.Fatalf("the small segment has %d blocks, want several", sum.Blocks)
	}
	return b, aggs
}

// outcome is what reading a damaged segment gave.
type outcome struct {
	openErr   error
	readErrs  int // aggregates whose Read failed
	verifyErr error
}

// readDamaged opens b and reads everything in it, failing the test if any
// read returns data other than the original's. A panic fails the test.
func readDamaged(t *testing.T, b []byte, aggs []testAggregate, what string) outcome {
	t.Helper()
	var o outcome
	r, err := archive.Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		o.openErr = err
		if !errors.Is(err, archive.ErrCorrupt) && !errors.Is(err, archive.ErrVersion) {
			t.Fatalf("%s: Open: %v, not ErrCorrupt nor ErrVersion", what, err)
		}
		return o
	}
	if got := len(r.Aggregates()); got != len(aggs) {
		t.Fatalf("%s: Open succeeded with %d aggregates, want %d", what, got, len(aggs))
	}
	for _, a := range aggs {
		recs, err := r.Read(a.subject)
		if err != nil {
			if !errors.Is(err, archive.ErrCorrupt) {
				t.Fatalf("%s: Read(%s): %v, not ErrCorrupt", what, a.subject, err)
			}
			o.readErrs++
			continue
		}
		checkRecords(t, what+": "+a.subject, recs, a.records)
	}
	i := 0
	for agg, err := range r.All() {
		if err != nil {
			break
		}
		checkRecords(t, what+": All: "+agg.Subject, agg.Records, aggs[i].records)
		i++
	}
	o.verifyErr = r.Verify()
	if o.verifyErr != nil && !errors.Is(o.verifyErr, archive.ErrCorrupt) {
		t.Fatalf("%s: Verify: %v, not ErrCorrupt", what, o.verifyErr)
	}
	return o
}

// TestTruncation opens every prefix of a small segment: each is an error
// of Open.
func TestTruncation(t *testing.T) {
	b, aggs := smallSegment(t)
	t.Logf("segment of %d bytes", len(b))
	for n := range len(b) {
		o := readDamaged(t, b[:n], aggs, fmt.Sprintf("truncated to %d", n))
		if o.openErr == nil {
			t.Fatalf("truncated to %d bytes: Open succeeded", n)
		}
	}
	// Bytes appended are found too.
	if o := readDamaged(t, append(bytes.Clone(b), 0), aggs, "one byte appended"); o.openErr == nil {
		t.Fatal("a segment with a byte appended opened")
	}
}

// TestFlippedByte alters every byte of a small segment, two ways: in the
// header, the index and the trailer Open fails; in a block, reading its
// aggregates fails and the others read right; in the sum only Verify
// fails. Verify fails every time, and no read returns wrong data.
func TestFlippedByte(t *testing.T) {
	b, aggs := smallSegment(t)
	n := len(b)
	indexOffset := int(binary.LittleEndian.Uint64(b[n-84:]))
	for _, mask := range []byte{0xff, 0x01, 0x80} {
		for off := range n {
			d := bytes.Clone(b)
			d[off] ^= mask
			what := fmt.Sprintf("byte %d ^ %#x", off, mask)
			o := readDamaged(t, d, aggs, what)
			switch {
			case off < 16 || off >= indexOffset && off < n-32:
				if o.openErr == nil {
					t.Fatalf("%s (header, index or trailer): Open succeeded", what)
				}
			case off < indexOffset:
				if o.openErr != nil || o.readErrs == 0 || o.readErrs == len(aggs) {
					t.Fatalf("%s (a block): Open %v, %d of %d reads failed; want one block's aggregates to fail", what, o.openErr, o.readErrs, len(aggs))
				}
			default:
				if o.openErr != nil || o.readErrs != 0 {
					t.Fatalf("%s (the sum): Open %v, %d reads failed; want only Verify to fail", what, o.openErr, o.readErrs)
				}
			}
			if o.openErr == nil && o.verifyErr == nil {
				t.Fatalf("%s: Verify succeeded", what)
			}
		}
	}
}

// TestVersion reads a segment of a later format version.
func TestVersion(t *testing.T) {
	b, _ := smallSegment(t)
	n := len(b)
	d := bytes.Clone(b)
	binary.LittleEndian.PutUint16(d[8:], 2)
	if _, err := archive.Open(bytes.NewReader(d), int64(n)); !errors.Is(err, archive.ErrVersion) {
		t.Errorf("version 2 in the header: %v, want ErrVersion", err)
	}
	d = bytes.Clone(b)
	trailer := d[n-84 : n-32]
	binary.LittleEndian.PutUint16(trailer[36:], 2)
	binary.LittleEndian.PutUint32(trailer[40:], crc32.Checksum(trailer[:40], crc32.MakeTable(crc32.Castagnoli)))
	if _, err := archive.Open(bytes.NewReader(d), int64(n)); !errors.Is(err, archive.ErrVersion) {
		t.Errorf("version 2 in the trailer: %v, want ErrVersion", err)
	}
}

// errReaderAt fails every read.
type errReaderAt struct{}

func (errReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errors.New("i/o error") }

func TestReadError(t *testing.T) {
	_, err := archive.Open(errReaderAt{}, 1000)
	if err == nil || errors.Is(err, archive.ErrCorrupt) {
		t.Fatalf("Open over failing reads: %v, want the read error, not corruption", err)
	}
}
