package archive

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
)

// Magic starts a segment file and ends its trailer.
const Magic = "TETHRSEG"

// FormatVersion is the segment format version this build writes and reads.
const FormatVersion uint16 = 1

// Sizes of the fixed parts of a segment (see the package documentation).
const (
	headerSize     = 16
	trailerSize    = 52
	sumSize        = 32
	footerSize     = trailerSize + sumSize
	blockEntrySize = 28
	// aggEntryFixed is an aggregate entry's size besides its subject.
	aggEntryFixed = 2 + 44
)

// DefaultBlockSize is the default of WriterOptions.BlockSize: the raw size
// a block grows to before the writer starts the next one.
const DefaultBlockSize = 256 << 10

// MaxBlockSize bounds a decompressed block, so one aggregate's history,
// with its encoding, is at most this large.
const MaxBlockSize = 256 << 20

// maxSubjectLen is the longest subject the index can hold.
const maxSubjectLen = math.MaxUint16

// Errors of the package. Corruption errors wrap ErrCorrupt and say where.
var (
	// ErrCorrupt marks a segment whose bytes are not what its writer wrote:
	// truncated, altered, or not a segment.
	ErrCorrupt = errors.New("archive: corrupt segment")
	// ErrVersion marks a segment of a format version this build cannot read.
	ErrVersion = errors.New("archive: unsupported segment format version")
	// ErrNotFound marks a missing aggregate in a segment, or a missing
	// segment in a store.
	ErrNotFound = errors.New("archive: not found")
	// ErrExists marks a Put of a segment name the store holds with other
	// content: a stored segment is never replaced.
	ErrExists = errors.New("archive: segment exists with other content")
)

// Record is one stored event as the stream held it.
type Record struct {
	// Sequence is the event's stream sequence.
	Sequence uint64
	// Subject is the aggregate's stream subject.
	Subject string
	// Time is when the stream stored the event (UTC when read back).
	Time time.Time
	// Header holds every header of the message: the event type,
	// Nats-Msg-Id, the signature headers, the trace context. Keys without
	// values are not kept; an empty header reads back as nil.
	Header nats.Header
	// Data is the message data, the encoded envelope, byte for byte.
	Data []byte
}

// AggregateInfo describes one aggregate of a segment, from its index.
type AggregateInfo struct {
	// Subject is the aggregate's stream subject.
	Subject string
	// FirstSequence and LastSequence are the stream sequences of its first
	// and last event.
	FirstSequence uint64
	// LastSequence is the stream sequence of its last event.
	LastSequence uint64
	// Events is how many events it has.
	Events int
}

// Aggregate is one aggregate's complete history.
type Aggregate struct {
	AggregateInfo
	// Records are its events in sequence order.
	Records []Record
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc returns the CRC-32C of b.
func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Encoder and decoder, shared: EncodeAll and DecodeAll are safe for
// concurrent use. The encoder's output depends only on its input, so the
// same aggregates make the same segment, byte for byte.
var (
	encoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(true))
		if err != nil {
			panic(err) // fixed, valid options
		}
		return e
	})
	decoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxBlockSize))
		if err != nil {
			panic(err) // fixed, valid options
		}
		return d
	})
)

// Times a record can carry: the range of int64 nanoseconds since 1970.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// appendString appends a uvarint length and s.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder of a byte slice that records its first failure.
type cursor struct {
	b   []byte
	err error
}

// fail records a failure, keeping the first.
func (c *cursor) fail(what string) {
	if c.err == nil {
		c.err = errors.New(what)
	}
	c.b = nil
}

// uvarint reads a uvarint.
func (c *cursor) uvarint(what string) uint64 {
	if c.err != nil {
		return 0
	}
	v, n := binary.Uvarint(c.b)
	if n <= 0 {
		c.fail("bad " + what)
		return 0
	}
	c.b = c.b[n:]
	return v
}

// bytes reads n bytes, sharing the underlying array.
func (c *cursor) bytes(n uint64, what string) []byte {
	if c.err != nil {
		return nil
	}
	if n > uint64(len(c.b)) {
		c.fail(what + " runs past the end")
		return nil
	}
	v := c.b[:n:n]
	c.b = c.b[n:]
	return v
}

// lenBytes reads a uvarint length and that many bytes.
func (c *cursor) lenBytes(what string) []byte {
	return c.bytes(c.uvarint(what+" length"), what)
}

// u16, u32 and u64 read fixed-width little-endian integers.
func (c *cursor) u16(what string) uint16 {
	if b := c.bytes(2, what); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (c *cursor) u32(what string) uint32 {
	if b := c.bytes(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (c *cursor) u64(what string) uint64 {
	if b := c.bytes(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}
