package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
)

// Reader reads one segment. Open checks its frame and index; each read
// checks the blocks it decompresses. It is safe for concurrent use.
type Reader struct {
	ra     io.ReaderAt
	size   int64
	closer io.Closer // nil when opened over a plain io.ReaderAt
	sum    [sha256.Size]byte
	events uint64
	blocks []blockEntry
	aggs   []aggEntry // sorted by subject
}

// corrupt returns an error wrapping ErrCorrupt.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// Open reads the header, the trailer and the index of the segment of size
// bytes in ra, and checks them. It reads no block. Closing the Reader does
// not close ra.
func Open(ra io.ReaderAt, size int64) (*Reader, error) {
	if size < headerSize+footerSize {
		return nil, corrupt("%d bytes, shorter than a segment's frame (%d)", size, headerSize+footerSize)
	}
	var h [headerSize]byte
	if err := readAt(ra, h[:], 0); err != nil {
		return nil, err
	}
	if string(h[:8]) != Magic {
		return nil, corrupt("no segment magic at the start")
	}
	if v := binary.LittleEndian.Uint16(h[8:]); v != FormatVersion {
		return nil, fmt.Errorf("%w: version %d in the header, this build reads %d", ErrVersion, v, FormatVersion)
	}
	if !allZero(h[10:]) {
		return nil, corrupt("reserved header bytes are not zero")
	}

	var f [footerSize]byte
	if err := readAt(ra, f[:], size-footerSize); err != nil {
		return nil, err
	}
	t := f[:trailerSize]
	if string(t[44:]) != Magic {
		return nil, corrupt("no segment magic at the end of the trailer: truncated?")
	}
	if got, want := crc(t[:40]), binary.LittleEndian.Uint32(t[40:]); got != want {
		return nil, corrupt("trailer CRC-32C %08x, recorded %08x", got, want)
	}
	if v := binary.LittleEndian.Uint16(t[36:]); v != FormatVersion {
		return nil, fmt.Errorf("%w: version %d in the trailer, this build reads %d", ErrVersion, v, FormatVersion)
	}
	if !allZero(t[38:40]) {
		return nil, corrupt("reserved trailer bytes are not zero")
	}
	indexOffset := binary.LittleEndian.Uint64(t[0:])
	indexLen := binary.LittleEndian.Uint64(t[8:])
	events := binary.LittleEndian.Uint64(t[16:])
	nBlocks := binary.LittleEndian.Uint32(t[24:])
	nAggs := binary.LittleEndian.Uint32(t[28:])
	indexEnd := uint64(size - footerSize)
	if indexOffset < headerSize || indexOffset > indexEnd || indexLen != indexEnd-indexOffset {
		return nil, corrupt("index at %d, %d bytes, does not end at the trailer (%d)", indexOffset, indexLen, indexEnd)
	}
	if nBlocks == 0 || nAggs == 0 {
		return nil, corrupt("%d blocks and %d aggregates", nBlocks, nAggs)
	}
	if uint64(nBlocks)*blockEntrySize+uint64(nAggs)*(aggEntryFixed+1) > indexLen {
		return nil, corrupt("index of %d bytes cannot hold %d blocks and %d aggregates", indexLen, nBlocks, nAggs)
	}
	index := make([]byte, indexLen)
	if err := readAt(ra, index, int64(indexOffset)); err != nil {
		return nil, err
	}
	if got, want := crc(index), binary.LittleEndian.Uint32(t[32:]); got != want {
		return nil, corrupt("index CRC-32C %08x, recorded %08x", got, want)
	}

	r := &Reader{ra: ra, size: size, events: events}
	copy(r.sum[:], f[trailerSize:])
	if err := r.parseIndex(index, indexOffset, nBlocks, nAggs); err != nil {
		return nil, err
	}
	return r, nil
}

// parseIndex decodes and checks the index.
func (r *Reader) parseIndex(index []byte, indexOffset uint64, nBlocks, nAggs uint32) error {
	c := &cursor{b: index}
	r.blocks = make([]blockEntry, nBlocks)
	next := uint64(headerSize)
	for i := range r.blocks {
		b := blockEntry{offset: c.u64("block offset"), compressed: c.u64("block length"), raw: c.u64("block raw length"), crc: c.u32("block CRC")}
		if c.err != nil {
			return corrupt("index: %v", c.err)
		}
		if b.offset != next || b.compressed == 0 || b.compressed > indexOffset-b.offset {
			return corrupt("index: block %d at %d, %d bytes, does not follow the previous one (%d) within the blocks", i, b.offset, b.compressed, next)
		}
		if b.raw == 0 || b.raw > MaxBlockSize {
			return corrupt("index: block %d decompresses to %d bytes, want 1 to %d", i, b.raw, MaxBlockSize)
		}
		next = b.offset + b.compressed
		r.blocks[i] = b
	}
	if next != indexOffset {
		return corrupt("index: blocks end at %d, the index starts at %d", next, indexOffset)
	}

	r.aggs = make([]aggEntry, nAggs)
	var total, block, rawNext uint64
	for i := range r.aggs {
		subject := c.bytes(uint64(c.u16("subject length")), "subject")
		a := aggEntry{block: c.u32("aggregate block"), rawOffset: c.u64("aggregate offset"), rawLen: c.u64("aggregate length")}
		a.Subject = string(subject)
		a.FirstSequence, a.LastSequence = c.u64("first sequence"), c.u64("last sequence")
		n := c.u64("event count")
		if c.err != nil {
			return corrupt("index: %v", c.err)
		}
		switch {
		case a.Subject == "":
			return corrupt("index: aggregate %d has no subject", i)
		case i > 0 && a.Subject <= r.aggs[i-1].Subject:
			return corrupt("index: aggregate %q after %q", a.Subject, r.aggs[i-1].Subject)
		case n == 0 || a.FirstSequence == 0 || a.FirstSequence > a.LastSequence || n-1 > a.LastSequence-a.FirstSequence:
			return corrupt("index: aggregate %s: %d events from sequence %d to %d", a.Subject, n, a.FirstSequence, a.LastSequence)
		}
		// The parts fill the blocks in order, back to back.
		if uint64(a.block) != block {
			if uint64(a.block) != block+1 || rawNext != r.blocks[block].raw {
				return corrupt("index: aggregate %s in block %d at %d, after block %d filled to %d", a.Subject, a.block, a.rawOffset, block, rawNext)
			}
			block, rawNext = uint64(a.block), 0
		}
		if a.rawOffset != rawNext || a.rawLen == 0 || a.rawLen > r.blocks[block].raw-rawNext {
			return corrupt("index: aggregate %s at %d, %d bytes, in block %d of %d bytes filled to %d", a.Subject, a.rawOffset, a.rawLen, block, r.blocks[block].raw, rawNext)
		}
		// Each event takes at least 11 bytes of its part.
		if n > a.rawLen/11 {
			return corrupt("index: aggregate %s: %d events in %d bytes", a.Subject, n, a.rawLen)
		}
		rawNext += a.rawLen
		a.Events = int(n)
		total += n
		r.aggs[i] = a
	}
	if block != uint64(len(r.blocks))-1 || rawNext != r.blocks[block].raw {
		return corrupt("index: the aggregates end in block %d at %d, the blocks in block %d at %d", block, rawNext, len(r.blocks)-1, r.blocks[len(r.blocks)-1].raw)
	}
	if len(c.b) != 0 {
		return corrupt("index: %d bytes after the aggregate table", len(c.b))
	}
	if total != r.events {
		return corrupt("index: %d events, the trailer says %d", total, r.events)
	}
	return nil
}

// allZero reports whether b holds only zeros.
func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// readAt fills b from ra at off; a short read is corruption (truncation).
func readAt(ra io.ReaderAt, b []byte, off int64) error {
	n, err := ra.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("%d bytes at %d: read %d: truncated?", len(b), off, n)
	}
	return fmt.Errorf("archive: read %d bytes at %d: %w", len(b), off, err)
}

// Close closes the segment when OpenSegment opened it; otherwise it does
// nothing.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

// Sum returns the segment's sum as its last 32 bytes record it. Open does
// not recompute it; Verify does.
func (r *Reader) Sum() [sha256.Size]byte { return r.sum }

// Size returns the segment's length in bytes.
func (r *Reader) Size() int64 { return r.size }

// Events returns the number of events over all aggregates.
func (r *Reader) Events() int { return int(r.events) }

// Aggregates returns the aggregates of the segment, in increasing order of
// subject.
func (r *Reader) Aggregates() []AggregateInfo {
	infos := make([]AggregateInfo, len(r.aggs))
	for i, a := range r.aggs {
		infos[i] = a.AggregateInfo
	}
	return infos
}

// find returns the index entry of subject.
func (r *Reader) find(subject string) (aggEntry, bool) {
	i := sort.Search(len(r.aggs), func(i int) bool { return r.aggs[i].Subject >= subject })
	if i < len(r.aggs) && r.aggs[i].Subject == subject {
		return r.aggs[i], true
	}
	return aggEntry{}, false
}

// Lookup returns what the index says of an aggregate, ok=false when the
// segment does not hold it. It reads nothing.
func (r *Reader) Lookup(subject string) (info AggregateInfo, ok bool) {
	a, ok := r.find(subject)
	return a.AggregateInfo, ok
}

// Read returns the events of one aggregate in sequence order, reading and
// decompressing only its block. A subject the segment does not hold is an
// error wrapping ErrNotFound.
func (r *Reader) Read(subject string) ([]Record, error) {
	a, ok := r.find(subject)
	if !ok {
		return nil, fmt.Errorf("%w: aggregate %s in this segment", ErrNotFound, subject)
	}
	raw, err := r.block(a.block)
	if err != nil {
		return nil, err
	}
	return decodePart(raw, a)
}

// All iterates over every aggregate in increasing order of subject,
// decompressing each block once. After an error it yields nothing more.
func (r *Reader) All() iter.Seq2[Aggregate, error] {
	return func(yield func(Aggregate, error) bool) {
		var raw []byte
		cur := -1
		for _, a := range r.aggs {
			if int(a.block) != cur {
				var err error
				if raw, err = r.block(a.block); err != nil {
					yield(Aggregate{}, err)
					return
				}
				cur = int(a.block)
			}
			recs, err := decodePart(raw, a)
			if err != nil {
				yield(Aggregate{}, err)
				return
			}
			if !yield(Aggregate{AggregateInfo: a.AggregateInfo, Records: recs}, nil) {
				return
			}
		}
	}
}

// verifyReadSize is the size of Verify's reads for the SHA-256.
const verifyReadSize = 1 << 20

// Verify recomputes the segment's SHA-256 and checks every block and every
// aggregate against the index, as reads do. It returns the first
// difference, an error wrapping ErrCorrupt.
func (r *Reader) Verify() error {
	h := sha256.New()
	// Reads of 1 MiB: a store reading ranges (S3) makes a request a read.
	buf := make([]byte, verifyReadSize)
	if _, err := io.CopyBuffer(h, io.NewSectionReader(r.ra, 0, r.size-sha256.Size), buf); err != nil {
		return fmt.Errorf("archive: read segment: %w", err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, r.sum[:]) {
		return corrupt("SHA-256 %x, recorded %x", got, r.sum)
	}
	for _, err := range r.All() {
		if err != nil {
			return err
		}
	}
	return nil
}

// block reads, checks and decompresses block i.
func (r *Reader) block(i uint32) ([]byte, error) {
	b := r.blocks[i]
	z := make([]byte, b.compressed)
	if err := readAt(r.ra, z, int64(b.offset)); err != nil {
		return nil, err
	}
	if got := crc(z); got != b.crc {
		return nil, corrupt("block %d (at %d, %d bytes): CRC-32C %08x, recorded %08x", i, b.offset, b.compressed, got, b.crc)
	}
	raw, err := decoder().DecodeAll(z, nil)
	if err != nil {
		return nil, corrupt("block %d (at %d): zstd: %v", i, b.offset, err)
	}
	if uint64(len(raw)) != b.raw {
		return nil, corrupt("block %d (at %d) decompresses to %d bytes, recorded %d", i, b.offset, len(raw), b.raw)
	}
	return raw, nil
}

// decodePart decodes the part of a in its decompressed block and checks
// it against the index.
func decodePart(block []byte, a aggEntry) ([]Record, error) {
	c := &cursor{b: block[a.rawOffset : a.rawOffset+a.rawLen]}
	subject := string(c.lenBytes("subject"))
	n := c.uvarint("event count")
	if c.err != nil {
		return nil, corrupt("aggregate %s: %v", a.Subject, c.err)
	}
	if subject != a.Subject || n != uint64(a.Events) {
		return nil, corrupt("aggregate %s: its block holds %d events of %q", a.Subject, n, subject)
	}
	recs := make([]Record, a.Events)
	for i := range recs {
		rec := &recs[i]
		rec.Subject = a.Subject
		rec.Sequence = c.uvarint("sequence")
		rec.Time = time.Unix(0, int64(c.u64("time"))).UTC()
		fields := c.uvarint("header field count")
		if fields > uint64(len(c.b))/2 {
			c.fail("header field count")
		}
		if fields > 0 && c.err == nil {
			rec.Header = make(nats.Header)
			prev := ""
			for range fields {
				k := string(c.lenBytes("header key"))
				v := string(c.lenBytes("header value"))
				if c.err != nil {
					break
				}
				if k < prev {
					c.fail("header keys out of order")
					break
				}
				prev = k
				rec.Header[k] = append(rec.Header[k], v)
			}
		}
		if data := c.lenBytes("data"); len(data) > 0 {
			rec.Data = bytes.Clone(data)
		}
		if c.err != nil {
			return nil, corrupt("aggregate %s, event %d: %v", a.Subject, i, c.err)
		}
		if i > 0 && rec.Sequence <= recs[i-1].Sequence {
			return nil, corrupt("aggregate %s: sequence %d after %d", a.Subject, rec.Sequence, recs[i-1].Sequence)
		}
	}
	if len(c.b) != 0 {
		return nil, corrupt("aggregate %s: %d bytes after its last event", a.Subject, len(c.b))
	}
	if recs[0].Sequence != a.FirstSequence || recs[len(recs)-1].Sequence != a.LastSequence {
		return nil, corrupt("aggregate %s: sequences %d to %d, the index says %d to %d",
			a.Subject, recs[0].Sequence, recs[len(recs)-1].Sequence, a.FirstSequence, a.LastSequence)
	}
	return recs, nil
}
