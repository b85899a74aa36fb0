// Package archive is the format and the storage of archive segments: files
// holding the complete, ended histories of aggregates (terminated game
// servers, ended game sessions with their player sessions, deleted
// fleets) once they have left the events stream. The archiver
// (services/archiver) writes them and purges the archived subjects; the
// API server reads them back for history reads and exports
// (services/apiserver, archive.go; docs/architecture.md, "The archive").
//
// A segment keeps, for every event, what the stream stored: its stream
// sequence, its subject, the time the stream stored it, every header (the
// event type, Nats-Msg-Id, the writer's signature, the trace context) and
// the message data, byte for byte, so that signatures still verify. An
// aggregate is one stream subject; a segment holds its whole history.
//
// Writer builds a segment, Open reads one, and SegmentStore keeps them:
// Dir in a local directory, S3 in a bucket of Amazon S3 or an
// S3-compatible object store (MinIO and others), through minio-go.
// OpenStore opens either from a location, a directory or
// s3://bucket/prefix. PutSegment and OpenSegment join the two. Open reads
// through an io.ReaderAt: S3 serves each read with a ranged GET, so
// reading one aggregate fetches the footer, the index and one block,
// never the whole segment.
//
// # File layout, format version 1
//
// Integers of fixed width are little-endian. "uvarint" is the unsigned
// LEB128 varint of encoding/binary (Uvarint), at most 10 bytes. CRC-32C is
// CRC-32 with the Castagnoli polynomial (hash/crc32.Castagnoli). A file of
// N bytes is, in order:
//
//	offset        size  field
//	0             8     magic "TETHRSEG"
//	8             2     format version, 1
//	10            6     zero
//	16            ...   blocks, back to back: block i is bytes
//	                    [offset_i, offset_i+compressed_i), one zstd frame
//	                    (RFC 8878) each; block 0 starts at 16
//	index_offset  ...   the index (below), index_length bytes, uncompressed
//	N-84          52    the trailer (below)
//	N-32          32    SHA-256 of bytes [0, N-32): the segment's sum
//
// The trailer, at N-84:
//
//	0   8  index_offset: the first byte after the last block
//	8   8  index_length; index_offset + index_length = N-84
//	16  8  event count, over all aggregates
//	24  4  block count, at least 1
//	28  4  aggregate count, at least 1
//	32  4  CRC-32C of the index's bytes
//	36  2  format version, 1
//	38  2  zero
//	40  4  CRC-32C of trailer bytes [0, 40)
//	44  8  magic "TETHRSEG"
//
// The index is the block table followed by the aggregate table. The block
// table has one 28-byte entry per block, in file order:
//
//	0   8  offset of the block in the file
//	8   8  compressed length: the zstd frame's length in the file
//	16  8  raw length: the decompressed length, 1 to MaxBlockSize
//	24  4  CRC-32C of the compressed bytes
//
// The aggregate table has one entry per aggregate, in strictly increasing
// bytewise order of subject (offsets from +0 count from the end of the
// subject, 2+S):
//
//	0   2  subject length S, 1 to 65535
//	2   S  subject
//	+0  4  block number (0-based) holding the aggregate
//	+4  8  raw offset of the aggregate's part in the decompressed block
//	+12 8  raw length of that part
//	+20 8  first stream sequence
//	+28 8  last stream sequence
//	+36 8  event count, at least 1
//
// Aggregates are stored in the order of the aggregate table: the parts of
// a block are back to back from raw offset 0 and fill it exactly, and
// every block holds at least one part. A block holds the parts of
// aggregates added while it was under the writer's block size, so one
// aggregate is never split across blocks and reading it decompresses one
// block only.
//
// An aggregate's part in a decompressed block is:
//
//	uvarint  subject length, then the subject (the same as in the index)
//	uvarint  event count (the same as in the index)
//	then per event, in strictly increasing order of sequence:
//	  uvarint  stream sequence
//	  8        time the stream stored it: signed nanoseconds since
//	           1970-01-01T00:00:00Z
//	  uvarint  header field count H; then H times:
//	           uvarint key length, key, uvarint value length, value
//	           (keys in increasing bytewise order; a key with several
//	           values repeats, its values in their order)
//	  uvarint  data length, then the message data
//
// The message data is the stored envelope protobuf (events.Envelope), as
// the stream held it; this package does not decode it.
//
// # Checks
//
// Open reads the first 16 bytes, the last 84 and the index, and checks the
// magics, the versions, the zero fields, both CRCs of the trailer and the
// index, and that the index describes the file exactly. Reading an
// aggregate checks its block's CRC-32C, the zstd frame (its own content
// checksum included), the decompressed length, and the part against the
// index. Verify does this for every block and recomputes the SHA-256 of
// the file. Any difference is an error wrapping ErrCorrupt, never a panic.
package archive
