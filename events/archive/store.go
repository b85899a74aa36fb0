package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// SegmentStore keeps segments by name. A stored segment is immutable: Put
// of a name the store holds succeeds when the content is the same (a
// retried write) and fails with ErrExists otherwise. Implementations are
// safe for concurrent use. Dir keeps them in a local directory, S3 in a
// bucket of an S3-compatible object store; OpenStore opens either from a
// location.
type SegmentStore interface {
	// Put stores the bytes of r under name, atomically: a reader of the
	// store sees the whole segment or nothing, also after a crash. It
	// returns once the segment is durable.
	Put(ctx context.Context, name string, r io.Reader) (Info, error)
	// Open opens a stored segment for random access. A missing name is an
	// error wrapping ErrNotFound.
	Open(ctx context.Context, name string) (Object, error)
	// Stat describes a stored segment. A missing name is an error wrapping
	// ErrNotFound.
	Stat(ctx context.Context, name string) (Info, error)
	// List describes the stored segments whose names start with prefix,
	// in increasing order of name.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes a segment. Deleting a missing name is not an error.
	Delete(ctx context.Context, name string) error
}

// Object is an opened stored segment.
type Object interface {
	io.ReaderAt
	io.Closer
	// Size is the segment's length in bytes.
	Size() int64
}

// Info describes a stored segment.
type Info struct {
	// Name is the segment's name in its store.
	Name string
	// Size is its length in bytes.
	Size int64
	// ModTime is when the store last wrote it.
	ModTime time.Time
}

// MaxNameLen bounds a segment name.
const MaxNameLen = 200

// CheckName reports whether name is a valid segment name: 1 to MaxNameLen
// ASCII letters, digits, '.', '_' and '-', starting with a letter or a
// digit. Names are flat (no '/'), so they are safe as file names and as
// object keys.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("archive: segment name %q: want 1 to %d characters", name, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("archive: segment name %q: want letters, digits, '.', '_' and '-', starting with a letter or digit", name)
		}
	}
	return nil
}

// errPutEnded ends a segment's writer when its Put has returned.
var errPutEnded = errors.New("archive: the store stopped reading the segment")

// PutSegment writes a segment straight into a store under name: build adds
// the aggregates to the Writer (it must not Close it), and the segment
// streams to the store as it is written. If build or the store fails,
// nothing is stored under name. A retry with the same aggregates writes
// the same bytes, which the store takes as already stored.
func PutSegment(ctx context.Context, s SegmentStore, name string, opts WriterOptions, build func(*Writer) error) (Summary, Info, error) {
	if err := CheckName(name); err != nil {
		return Summary{}, Info{}, err
	}
	pr, pw := io.Pipe()
	var sum Summary
	built := make(chan error, 1)
	go func() {
		w := NewWriter(pw, opts)
		err := build(w)
		if err == nil {
			sum, err = w.Close()
		}
		pw.CloseWithError(err) // nil: the reader sees io.EOF
		built <- err
	}()
	info, err := s.Put(ctx, name, pr)
	pr.CloseWithError(errPutEnded) // unblocks the writer if Put returned early
	berr := <-built
	switch {
	case berr != nil && !errors.Is(berr, errPutEnded):
		return Summary{}, Info{}, fmt.Errorf("archive: build segment %s: %w", name, berr)
	case err != nil:
		return Summary{}, Info{}, err
	case berr != nil:
		return Summary{}, Info{}, fmt.Errorf("archive: put segment %s: %w", name, berr)
	}
	return sum, info, nil
}

// OpenSegment opens a stored segment for reading; closing the Reader
// closes it.
func OpenSegment(ctx context.Context, s SegmentStore, name string) (*Reader, error) {
	obj, err := s.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	r, err := Open(obj, obj.Size())
	if err != nil {
		obj.Close()
		return nil, fmt.Errorf("segment %s: %w", name, err)
	}
	r.closer = obj
	return r, nil
}
