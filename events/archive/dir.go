package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// tempPrefix starts the names of Dir's files being written. Segment names
// cannot start with '.', so List never sees them.
const tempPrefix = ".tmp-"

// Dir is a SegmentStore in a local directory, one file per segment, named
// as the segment. Put writes a temporary file in the same directory,
// fsyncs it, links it under its name (which fails if the name exists, so
// two writers cannot replace each other's segment) and fsyncs the
// directory.
type Dir struct {
	path string
}

var _ SegmentStore = (*Dir)(nil)

// NewDir returns the store in directory path, creating it if needed.
func NewDir(path string) (*Dir, error) {
	if path == "" {
		return nil, errors.New("archive: no archive directory")
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("archive: create archive directory: %w", err)
	}
	return &Dir{path: path}, nil
}

// Path returns the directory.
func (d *Dir) Path() string { return d.path }

// file returns the path of segment name, after checking the name.
func (d *Dir) file(name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return filepath.Join(d.path, name), nil
}

// Put implements SegmentStore.
func (d *Dir) Put(ctx context.Context, name string, r io.Reader) (Info, error) {
	final, err := d.file(name)
	if err != nil {
		return Info{}, err
	}
	tmp, err := os.CreateTemp(d.path, tempPrefix+name+"-*")
	if err != nil {
		return Info{}, fmt.Errorf("archive: put %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // after the link, or on failure
	sum, err := writeSynced(ctx, tmp, r)
	if err != nil {
		return Info{}, fmt.Errorf("archive: put %s: %w", name, err)
	}

	err = os.Link(tmp.Name(), final)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		// A file system without hard links: rename instead, unless the
		// name exists. Only the link is safe against a concurrent Put of
		// the same name with other content.
		if _, serr := os.Lstat(final); errors.Is(serr, fs.ErrNotExist) {
			err = os.Rename(tmp.Name(), final)
		} else {
			err = fs.ErrExist
		}
	}
	if errors.Is(err, fs.ErrExist) {
		// Stored before: a retry when the content is the same.
		same, cerr := sameContent(final, sum)
		switch {
		case cerr != nil:
			return Info{}, fmt.Errorf("archive: put %s: compare with the stored segment: %w", name, cerr)
		case !same:
			return Info{}, fmt.Errorf("%w: %s", ErrExists, name)
		}
		// The first Put may have stopped before the directory's fsync.
		if err := syncDir(d.path); err != nil {
			return Info{}, fmt.Errorf("archive: put %s: %w", name, err)
		}
		return d.Stat(ctx, name)
	}
	if err != nil {
		return Info{}, fmt.Errorf("archive: put %s: %w", name, err)
	}
	if err := syncDir(d.path); err != nil {
		return Info{}, fmt.Errorf("archive: put %s: %w", name, err)
	}
	return d.Stat(ctx, name)
}

// writeSynced copies r into f, fsyncs and closes f, and returns the
// SHA-256 of what it wrote.
func writeSynced(ctx context.Context, f *os.File, r io.Reader) ([sha256.Size]byte, error) {
	h := sha256.New()
	_, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, err
}

// ctxReader stops reading when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

// Read implements io.Reader.
func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// sameContent reports whether the file at path has SHA-256 sum.
func sameContent(path string, sum [sha256.Size]byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return bytes.Equal(h.Sum(nil), sum[:]), nil
}

// syncDir fsyncs a directory, so the names in it are durable.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", path, err)
	}
	return nil
}

// fileObject is an opened segment file.
type fileObject struct {
	*os.File
	size int64
}

// Size implements Object.
func (f fileObject) Size() int64 { return f.size }

// Open implements SegmentStore.
func (d *Dir) Open(_ context.Context, name string) (Object, error) {
	path, err := d.file(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: segment %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: open %s: %w", name, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("archive: open %s: %w", name, err)
	}
	return fileObject{File: f, size: st.Size()}, nil
}

// Stat implements SegmentStore.
func (d *Dir) Stat(_ context.Context, name string) (Info, error) {
	path, err := d.file(name)
	if err != nil {
		return Info{}, err
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("%w: segment %s", ErrNotFound, name)
	}
	if err != nil {
		return Info{}, fmt.Errorf("archive: stat %s: %w", name, err)
	}
	return Info{Name: name, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// List implements SegmentStore. It skips files that are not segments:
// temporary files, directories, names that are not segment names.
func (d *Dir) List(ctx context.Context, prefix string) ([]Info, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("archive: list %s: %w", d.path, err)
	}
	var infos []Info
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, prefix) || CheckName(name) != nil {
			continue
		}
		st, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since ReadDir
		}
		if err != nil {
			return nil, fmt.Errorf("archive: list %s: %w", d.path, err)
		}
		infos = append(infos, Info{Name: name, Size: st.Size(), ModTime: st.ModTime()})
	}
	return infos, nil
}

// Delete implements SegmentStore.
func (d *Dir) Delete(_ context.Context, name string) error {
	path, err := d.file(name)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("archive: delete %s: %w", name, err)
	}
	if err := syncDir(d.path); err != nil {
		return fmt.Errorf("archive: delete %s: %w", name, err)
	}
	return nil
}

// RemoveTemp removes the temporary files of Puts that a crash interrupted,
// those last written before before, and returns how many it removed. Pass
// a time well before any Put still running could have started.
func (d *Dir) RemoveTemp(before time.Time) (int, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return 0, fmt.Errorf("archive: list %s: %w", d.path, err)
	}
	n := 0
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		st, err := e.Info()
		if err != nil || !st.ModTime().Before(before) {
			continue
		}
		if err := os.Remove(filepath.Join(d.path, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("archive: remove %s: %w", e.Name(), err)
		}
		n++
	}
	return n, nil
}
