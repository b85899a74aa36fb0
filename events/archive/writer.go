package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
)

// WriterOptions configure a Writer.
type WriterOptions struct {
	// BlockSize is the raw size a block grows to before the next aggregate
	// starts a new block; default DefaultBlockSize. An aggregate larger
	// than it gets a block of its own.
	BlockSize int
}

// Summary describes a written segment.
type Summary struct {
	// SHA256 is the segment's sum, as its last 32 bytes record it: the
	// SHA-256 of every byte before them.
	SHA256 [sha256.Size]byte
	// Size is the segment's length in bytes.
	Size int64
	// Aggregates, Events and Blocks count what it holds.
	Aggregates int
	// Events is the number of events over all aggregates.
	Events int
	// Blocks is the number of compressed blocks.
	Blocks int
}

// Writer writes one segment to an io.Writer, streaming: it holds one
// block's raw bytes and the index in memory. Add the aggregates in
// strictly increasing order of subject, then Close. The same aggregates
// make the same bytes, so a retried write is identical to the first. A
// Writer is not safe for concurrent use; after an error, every later call
// returns it.
type Writer struct {
	dst       io.Writer
	sum       hash.Hash
	off       int64
	blockSize int
	raw       []byte // the current block's raw bytes
	blocks    []blockEntry
	aggs      []aggEntry
	events    uint64
	err       error
	closed    bool
}

// blockEntry is a block table entry.
type blockEntry struct {
	offset, compressed, raw uint64
	crc                     uint32
}

// aggEntry is an aggregate table entry.
type aggEntry struct {
	AggregateInfo
	block             uint32
	rawOffset, rawLen uint64
}

// NewWriter returns a writer of a segment to dst. It writes nothing until
// the first block is full or Close.
func NewWriter(dst io.Writer, opts WriterOptions) *Writer {
	if opts.BlockSize <= 0 {
		opts.BlockSize = DefaultBlockSize
	}
	w := &Writer{dst: dst, sum: sha256.New(), blockSize: min(opts.BlockSize, MaxBlockSize)}
	var h [headerSize]byte
	copy(h[:], Magic)
	binary.LittleEndian.PutUint16(h[8:], FormatVersion)
	w.write(h[:])
	return w
}

// Add appends one aggregate's complete history: records in strictly
// increasing order of sequence, each with the subject given, a time, and
// the data. Its subject must sort after every subject added before.
func (w *Writer) Add(subject string, records []Record) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("archive: add to a closed writer")
	}
	if err := w.check(subject, records); err != nil {
		return err // the writer stays usable
	}
	part := encodePart(subject, records)
	if len(part) > MaxBlockSize {
		return fmt.Errorf("archive: aggregate %s is %d bytes encoded, more than %d", subject, len(part), MaxBlockSize)
	}
	if len(w.raw) > 0 && len(w.raw)+len(part) > w.blockSize {
		w.flush()
	}
	w.aggs = append(w.aggs, aggEntry{
		AggregateInfo: AggregateInfo{
			Subject:       subject,
			FirstSequence: records[0].Sequence,
			LastSequence:  records[len(records)-1].Sequence,
			Events:        len(records),
		},
		block:     uint32(len(w.blocks)),
		rawOffset: uint64(len(w.raw)),
		rawLen:    uint64(len(part)),
	})
	w.events += uint64(len(records))
	w.raw = append(w.raw, part...)
	return w.err
}

// check validates an aggregate before Add takes it.
func (w *Writer) check(subject string, records []Record) error {
	switch {
	case subject == "":
		return errors.New("archive: aggregate with no subject")
	case len(subject) > maxSubjectLen:
		return fmt.Errorf("archive: subject of %d bytes, at most %d", len(subject), maxSubjectLen)
	case len(records) == 0:
		return fmt.Errorf("archive: aggregate %s has no events", subject)
	case len(w.aggs) > 0 && subject <= w.aggs[len(w.aggs)-1].Subject:
		return fmt.Errorf("archive: aggregate %s added after %s: add them in increasing order of subject, each once", subject, w.aggs[len(w.aggs)-1].Subject)
	}
	for i, r := range records {
		switch {
		case r.Subject != subject:
			return fmt.Errorf("archive: aggregate %s: event %d has subject %q", subject, r.Sequence, r.Subject)
		case r.Sequence == 0:
			return fmt.Errorf("archive: aggregate %s: event with sequence 0", subject)
		case i > 0 && r.Sequence <= records[i-1].Sequence:
			return fmt.Errorf("archive: aggregate %s: sequence %d after %d: events must be in increasing order of sequence", subject, r.Sequence, records[i-1].Sequence)
		case r.Time.Before(minTime) || r.Time.After(maxTime):
			return fmt.Errorf("archive: aggregate %s: event %d has time %s, out of range", subject, r.Sequence, r.Time)
		}
	}
	return nil
}

// encodePart encodes an aggregate's part of a block.
func encodePart(subject string, records []Record) []byte {
	n := 16 + len(subject)
	for _, r := range records {
		n += 32 + len(r.Data)
		for k, vs := range r.Header {
			for _, v := range vs {
				n += 20 + len(k) + len(v)
			}
		}
	}
	b := make([]byte, 0, n)
	b = appendString(b, subject)
	b = binary.AppendUvarint(b, uint64(len(records)))
	for _, r := range records {
		b = binary.AppendUvarint(b, r.Sequence)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Time.UnixNano()))
		keys := make([]string, 0, len(r.Header))
		fields := 0
		for k, vs := range r.Header {
			if len(vs) > 0 {
				keys = append(keys, k)
				fields += len(vs)
			}
		}
		slices.Sort(keys)
		b = binary.AppendUvarint(b, uint64(fields))
		for _, k := range keys {
			for _, v := range r.Header[k] {
				b = appendString(b, k)
				b = appendString(b, v)
			}
		}
		b = binary.AppendUvarint(b, uint64(len(r.Data)))
		b = append(b, r.Data...)
	}
	return b
}

// flush compresses and writes the current block.
func (w *Writer) flush() {
	if len(w.raw) == 0 || w.err != nil {
		return
	}
	z := encoder().EncodeAll(w.raw, nil)
	w.blocks = append(w.blocks, blockEntry{offset: uint64(w.off), compressed: uint64(len(z)), raw: uint64(len(w.raw)), crc: crc(z)})
	w.write(z)
	w.raw = w.raw[:0]
}

// write writes b to the destination and the sum.
func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	n, err := w.dst.Write(b)
	w.off += int64(n)
	w.sum.Write(b[:n])
	if err != nil {
		w.err = fmt.Errorf("archive: write segment: %w", err)
	}
}

// Close writes the last block, the index, the trailer and the sum, and
// returns the segment's summary. It does not close the destination. A
// segment holds at least one aggregate.
func (w *Writer) Close() (Summary, error) {
	if w.err != nil {
		return Summary{}, w.err
	}
	if w.closed {
		return Summary{}, errors.New("archive: writer closed twice")
	}
	if len(w.aggs) == 0 {
		return Summary{}, errors.New("archive: a segment holds at least one aggregate")
	}
	w.closed = true
	w.flush()
	indexOffset := w.off
	var index bytes.Buffer
	for _, b := range w.blocks {
		var e [blockEntrySize]byte
		binary.LittleEndian.PutUint64(e[0:], b.offset)
		binary.LittleEndian.PutUint64(e[8:], b.compressed)
		binary.LittleEndian.PutUint64(e[16:], b.raw)
		binary.LittleEndian.PutUint32(e[24:], b.crc)
		index.Write(e[:])
	}
	for _, a := range w.aggs {
		var e [aggEntryFixed - 2]byte
		binary.LittleEndian.PutUint32(e[0:], a.block)
		binary.LittleEndian.PutUint64(e[4:], a.rawOffset)
		binary.LittleEndian.PutUint64(e[12:], a.rawLen)
		binary.LittleEndian.PutUint64(e[20:], a.FirstSequence)
		binary.LittleEndian.PutUint64(e[28:], a.LastSequence)
		binary.LittleEndian.PutUint64(e[36:], uint64(a.Events))
		index.Write(binary.LittleEndian.AppendUint16(nil, uint16(len(a.Subject))))
		index.WriteString(a.Subject)
		index.Write(e[:])
	}
	w.write(index.Bytes())

	var t [trailerSize]byte
	binary.LittleEndian.PutUint64(t[0:], uint64(indexOffset))
	binary.LittleEndian.PutUint64(t[8:], uint64(index.Len()))
	binary.LittleEndian.PutUint64(t[16:], w.events)
	binary.LittleEndian.PutUint32(t[24:], uint32(len(w.blocks)))
	binary.LittleEndian.PutUint32(t[28:], uint32(len(w.aggs)))
	binary.LittleEndian.PutUint32(t[32:], crc(index.Bytes()))
	binary.LittleEndian.PutUint16(t[36:], FormatVersion)
	binary.LittleEndian.PutUint32(t[40:], crc(t[:40]))
	copy(t[44:], Magic)
	w.write(t[:])

	var s Summary
	w.sum.Sum(s.SHA256[:0])
	w.write(s.SHA256[:])
	if w.err != nil {
		return Summary{}, w.err
	}
	s.Size = w.off
	s.Aggregates, s.Events, s.Blocks = len(w.aggs), int(w.events), len(w.blocks)
	return s, nil
}
