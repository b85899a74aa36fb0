package archive_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/events/archive"
)

func newDir(t *testing.T) *archive.Dir {
	t.Helper()
	d, err := archive.NewDir(filepath.Join(t.TempDir(), "archive"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dirNames lists every file in the directory, temporary ones included.
func dirNames(t *testing.T, d *archive.Dir) []string {
	t.Helper()
	entries, err := os.ReadDir(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestDirPutOpenStatListDelete(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	aggs := makeAggregates(10, 40)
	b, sum := writeSegment(t, aggs, archive.WriterOptions{})

	info, err := d.Put(ctx, "seg-0001", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "seg-0001" || info.Size != int64(len(b)) || info.ModTime.IsZero() {
		t.Errorf("Put: %+v", info)
	}
	if st, err := d.Stat(ctx, "seg-0001"); err != nil || st != info {
		t.Errorf("Stat: %+v, %v; Put said %+v", st, err, info)
	}
	if _, err := d.Put(ctx, "seg-0002", bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "other", bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}

	r, err := archive.OpenSegment(ctx, d, "seg-0001")
	if err != nil {
		t.Fatal(err)
	}
	if r.Sum() != sum.SHA256 {
		t.Error("the stored segment's sum differs")
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	recs, err := r.Read(aggs[5].subject)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, aggs[5].subject, recs, aggs[5].records)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	list, err := d.List(ctx, "seg-")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "seg-0001" || list[1].Name != "seg-0002" {
		t.Errorf("List(seg-): %+v", list)
	}
	if all, err := d.List(ctx, ""); err != nil || len(all) != 3 {
		t.Errorf("List(): %+v, %v", all, err)
	}

	if err := d.Delete(ctx, "seg-0001"); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, "seg-0001"); err != nil {
		t.Errorf("deleting a deleted segment: %v", err)
	}
	if _, err := d.Stat(ctx, "seg-0001"); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("Stat after Delete: %v, want ErrNotFound", err)
	}
	if _, err := d.Open(ctx, "seg-0001"); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("Open after Delete: %v, want ErrNotFound", err)
	}
	if _, err := archive.OpenSegment(ctx, d, "seg-0001"); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("OpenSegment after Delete: %v, want ErrNotFound", err)
	}
	if names := dirNames(t, d); len(names) != 2 {
		t.Errorf("files left: %v", names)
	}
}

// TestDirPutIdempotent puts the same segment again, as a retrying
// archiver would: it succeeds, and the directory holds one copy.
func TestDirPutIdempotent(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	b, _ := writeSegment(t, makeAggregates(11, 30), archive.WriterOptions{})
	first, err := d.Put(ctx, "seg", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, err := d.Put(ctx, "seg", bytes.NewReader(b))
		if err != nil {
			t.Fatalf("Put of the same segment again: %v", err)
		}
		if again != first {
			t.Errorf("Put again: %+v, first %+v", again, first)
		}
	}
	if names := dirNames(t, d); len(names) != 1 || names[0] != "seg" {
		t.Errorf("files: %v, want [seg]", names)
	}
	got, err := os.ReadFile(filepath.Join(d.Path(), "seg"))
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("stored bytes differ (%v)", err)
	}
}

// TestDirPutConflict puts other content under a stored name: refused, and
// the stored segment is untouched.
func TestDirPutConflict(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	a, _ := writeSegment(t, makeAggregates(12, 10), archive.WriterOptions{})
	b, _ := writeSegment(t, makeAggregates(13, 10), archive.WriterOptions{})
	if _, err := d.Put(ctx, "seg", bytes.NewReader(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "seg", bytes.NewReader(b)); !errors.Is(err, archive.ErrExists) {
		t.Fatalf("Put of other content: %v, want ErrExists", err)
	}
	got, err := os.ReadFile(filepath.Join(d.Path(), "seg"))
	if err != nil || !bytes.Equal(got, a) {
		t.Fatalf("the stored segment changed (%v)", err)
	}
	if names := dirNames(t, d); len(names) != 1 {
		t.Errorf("files: %v", names)
	}
}

// TestDirConcurrentPuts puts one segment from many goroutines: all
// succeed, one copy.
func TestDirConcurrentPuts(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	b, _ := writeSegment(t, makeAggregates(14, 20), archive.WriterOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if _, err := d.Put(ctx, "seg", bytes.NewReader(b)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if names := dirNames(t, d); len(names) != 1 {
		t.Errorf("files: %v", names)
	}
}

// failingReader returns some bytes, then an error.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("connection reset")
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

// TestDirPutFails checks a failed Put leaves nothing: no segment, no
// temporary file.
func TestDirPutFails(t *testing.T) {
	d := newDir(t)
	if _, err := d.Put(context.Background(), "seg", &failingReader{n: 5000}); err == nil {
		t.Fatal("Put of a failing reader succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Put(ctx, "seg", bytes.NewReader([]byte("abc"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a canceled context: %v", err)
	}
	if names := dirNames(t, d); len(names) != 0 {
		t.Errorf("files left: %v", names)
	}
}

func TestPutSegment(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	aggs := makeAggregates(15, 60)
	build := func(w *archive.Writer) error {
		for _, a := range aggs {
			if err := w.Add(a.subject, a.records); err != nil {
				return err
			}
		}
		return nil
	}
	sum, info, err := archive.PutSegment(ctx, d, "seg", archive.WriterOptions{}, build)
	if err != nil {
		t.Fatal(err)
	}
	want, wantSum := writeSegment(t, aggs, archive.WriterOptions{})
	if sum != wantSum || info.Size != int64(len(want)) {
		t.Errorf("PutSegment: %+v %+v; writing in memory: %+v", sum, info, wantSum)
	}
	// A retry after a crash: the same aggregates, the same segment.
	if again, _, err := archive.PutSegment(ctx, d, "seg", archive.WriterOptions{}, build); err != nil || again != sum {
		t.Fatalf("PutSegment again: %+v, %v", again, err)
	}

	// A build that fails stores nothing.
	failed := errors.New("the stream went away")
	_, _, err = archive.PutSegment(ctx, d, "broken", archive.WriterOptions{BlockSize: 1}, func(w *archive.Writer) error {
		for _, a := range aggs[:20] {
			if err := w.Add(a.subject, a.records); err != nil {
				return err
			}
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("PutSegment with a failing build: %v", err)
	}
	// A store that fails ends the build.
	_, _, err = archive.PutSegment(ctx, d, "seg", archive.WriterOptions{}, func(w *archive.Writer) error {
		return w.Add(aggs[0].subject, aggs[0].records[:1])
	})
	if !errors.Is(err, archive.ErrExists) {
		t.Fatalf("PutSegment of other content under a stored name: %v, want ErrExists", err)
	}
	if names := dirNames(t, d); len(names) != 1 || names[0] != "seg" {
		t.Errorf("files: %v, want [seg]", names)
	}
}

func TestRemoveTemp(t *testing.T) {
	d := newDir(t)
	stale := filepath.Join(d.Path(), ".tmp-seg-123")
	if err := os.WriteFile(stale, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Path(), "seg"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if list, err := d.List(context.Background(), ""); err != nil || len(list) != 1 {
		t.Fatalf("List: %+v, %v; want only seg", list, err)
	}
	if n, err := d.RemoveTemp(time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("RemoveTemp of older than an hour: %d, %v", n, err)
	}
	if n, err := d.RemoveTemp(time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("RemoveTemp: %d, %v", n, err)
	}
	if names := dirNames(t, d); len(names) != 1 || names[0] != "seg" {
		t.Errorf("files: %v", names)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "seg-0001", "2026-03-01T12.00.00Z_ab12.tseg", string(bytes.Repeat([]byte("a"), archive.MaxNameLen))} {
		if err := archive.CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".hidden", "-x", "a/b", "../x", "a b", "é", string(bytes.Repeat([]byte("a"), archive.MaxNameLen+1))} {
		if err := archive.CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) took it", bad)
		}
	}
	d := newDir(t)
	if _, err := d.Put(context.Background(), "../escape", bytes.NewReader(nil)); err == nil {
		t.Error("Put of ../escape succeeded")
	}
}
