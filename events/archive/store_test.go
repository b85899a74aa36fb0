package archive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/tetherhq/tether/events/archive"
)

// testStore is a SegmentStore under test, with a view of what it holds
// that does not go through it.
type testStore struct {
	archive.SegmentStore
	// files lists what the store holds, sorted: the directory's files,
	// temporary ones included; or the bucket's keys under the store's
	// prefix (without it) and Put's temporary files ("spool:" and name).
	files func(t *testing.T) []string
	// read returns the stored bytes of segment name.
	read func(t *testing.T, name string) []byte
	// atomicCreate says whether two Puts of one name with different bytes
	// cannot both succeed (false: an S3 server ignoring If-None-Match).
	atomicCreate bool
}

// storeKinds are the SegmentStores every test of this file runs against.
var storeKinds = []struct {
	name string
	open func(t *testing.T) testStore
}{
	{"dir", func(t *testing.T) testStore {
		d := newDir(t)
		return testStore{
			SegmentStore: d,
			files:        func(t *testing.T) []string { return dirNames(t, d) },
			read: func(t *testing.T, name string) []byte {
				t.Helper()
				b, err := os.ReadFile(filepath.Join(d.Path(), name))
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			atomicCreate: true,
		}
	}},
	{"s3", func(t *testing.T) testStore { return newS3Store(t, newFakeS3(t), "tether/archive") }},
	{"s3-no-prefix", func(t *testing.T) testStore { return newS3Store(t, newFakeS3(t), "") }},
	{"s3-ignoring-if-none-match", func(t *testing.T) testStore {
		f := newFakeS3(t)
		f.ignoreIfNoneMatch = true
		s := newS3Store(t, f, "tether/archive")
		s.atomicCreate = false
		return s
	}},
}

// forEachStore runs test against each kind of store, a new one each.
func forEachStore(t *testing.T, test func(t *testing.T, s testStore)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) { test(t, k.open(t)) })
	}
}

func TestStorePutOpenStatListDelete(t *testing.T) {
	ctx := context.Background()
	aggs := makeAggregates(10, 40)
	b, sum := writeSegment(t, aggs, archive.WriterOptions{})
	forEachStore(t, func(t *testing.T, s testStore) {
		info, err := s.Put(ctx, "seg-0001", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if info.Name != "seg-0001" || info.Size != int64(len(b)) || info.ModTime.IsZero() {
			t.Errorf("Put: %+v", info)
		}
		if st, err := s.Stat(ctx, "seg-0001"); err != nil || st != info {
			t.Errorf("Stat: %+v, %v; Put said %+v", st, err, info)
		}
		if _, err := s.Put(ctx, "seg-0002", bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "other", bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}

		r, err := archive.OpenSegment(ctx, s, "seg-0001")
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

		list, err := s.List(ctx, "seg-")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0] != info || list[1].Name != "seg-0002" {
			t.Errorf("List(seg-): %+v", list)
		}
		if all, err := s.List(ctx, ""); err != nil || len(all) != 3 || all[0].Name != "other" {
			t.Errorf("List(): %+v, %v", all, err)
		}
		if none, err := s.List(ctx, "nothing"); err != nil || len(none) != 0 {
			t.Errorf("List(nothing): %+v, %v", none, err)
		}

		if err := s.Delete(ctx, "seg-0001"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "seg-0001"); err != nil {
			t.Errorf("deleting a deleted segment: %v", err)
		}
		if _, err := s.Stat(ctx, "seg-0001"); !errors.Is(err, archive.ErrNotFound) {
			t.Errorf("Stat after Delete: %v, want ErrNotFound", err)
		}
		if _, err := s.Open(ctx, "seg-0001"); !errors.Is(err, archive.ErrNotFound) {
			t.Errorf("Open after Delete: %v, want ErrNotFound", err)
		}
		if _, err := archive.OpenSegment(ctx, s, "seg-0001"); !errors.Is(err, archive.ErrNotFound) {
			t.Errorf("OpenSegment after Delete: %v, want ErrNotFound", err)
		}
		if names := s.files(t); !slices.Equal(names, []string{"other", "seg-0002"}) {
			t.Errorf("files left: %v", names)
		}
	})
}

// TestStorePutIdempotent puts the same segment again, as a retrying
// archiver would: it succeeds, and the store holds one copy.
func TestStorePutIdempotent(t *testing.T) {
	ctx := context.Background()
	b, _ := writeSegment(t, makeAggregates(11, 30), archive.WriterOptions{})
	forEachStore(t, func(t *testing.T, s testStore) {
		first, err := s.Put(ctx, "seg", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			again, err := s.Put(ctx, "seg", bytes.NewReader(b))
			if err != nil {
				t.Fatalf("Put of the same segment again: %v", err)
			}
			if again != first {
				t.Errorf("Put again: %+v, first %+v", again, first)
			}
		}
		if names := s.files(t); len(names) != 1 || names[0] != "seg" {
			t.Errorf("files: %v, want [seg]", names)
		}
		if !bytes.Equal(s.read(t, "seg"), b) {
			t.Fatal("stored bytes differ")
		}
	})
}

// TestStorePutConflict puts other content under a stored name: refused,
// and the stored segment is untouched.
func TestStorePutConflict(t *testing.T) {
	ctx := context.Background()
	a, _ := writeSegment(t, makeAggregates(12, 10), archive.WriterOptions{})
	b, _ := writeSegment(t, makeAggregates(13, 10), archive.WriterOptions{})
	same := append(bytes.Clone(a[:len(a)-1]), a[len(a)-1]^1) // same size
	forEachStore(t, func(t *testing.T, s testStore) {
		if _, err := s.Put(ctx, "seg", bytes.NewReader(a)); err != nil {
			t.Fatal(err)
		}
		for i, other := range [][]byte{b, same, nil} {
			if _, err := s.Put(ctx, "seg", bytes.NewReader(other)); !errors.Is(err, archive.ErrExists) {
				t.Fatalf("Put of other content %d: %v, want ErrExists", i, err)
			}
		}
		if !bytes.Equal(s.read(t, "seg"), a) {
			t.Fatal("the stored segment changed")
		}
		if names := s.files(t); len(names) != 1 {
			t.Errorf("files: %v", names)
		}
	})
}

// TestStoreConcurrentPuts puts one segment from many goroutines: all
// succeed, one copy.
func TestStoreConcurrentPuts(t *testing.T) {
	ctx := context.Background()
	b, _ := writeSegment(t, makeAggregates(14, 20), archive.WriterOptions{})
	forEachStore(t, func(t *testing.T, s testStore) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				if _, err := s.Put(ctx, "seg", bytes.NewReader(b)); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if names := s.files(t); len(names) != 1 {
			t.Errorf("files: %v", names)
		}
		if !bytes.Equal(s.read(t, "seg"), b) {
			t.Fatal("stored bytes differ")
		}
	})
}

// TestStoreConcurrentConflictingPuts puts different segments under one
// name from many goroutines: one succeeds, the others fail with
// ErrExists, and the store holds the winner's bytes.
func TestStoreConcurrentConflictingPuts(t *testing.T) {
	ctx := context.Background()
	segs := make([][]byte, 8)
	for i := range segs {
		segs[i], _ = writeSegment(t, makeAggregates(uint64(30+i), 5), archive.WriterOptions{})
	}
	forEachStore(t, func(t *testing.T, s testStore) {
		if !s.atomicCreate {
			t.Skip("the server ignores If-None-Match: two writers of different bytes may both succeed")
		}
		var wg sync.WaitGroup
		errs := make([]error, len(segs))
		for i := range segs {
			wg.Go(func() { _, errs[i] = s.Put(ctx, "seg", bytes.NewReader(segs[i])) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("Puts %d and %d both succeeded", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, archive.ErrExists):
				t.Errorf("Put %d: %v, want ErrExists", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no Put succeeded")
		}
		if !bytes.Equal(s.read(t, "seg"), segs[winner]) {
			t.Error("the stored bytes are not the winner's")
		}
	})
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

// TestStorePutFails checks a failed Put leaves nothing: no segment, no
// temporary file.
func TestStorePutFails(t *testing.T) {
	forEachStore(t, func(t *testing.T, s testStore) {
		if _, err := s.Put(context.Background(), "seg", &failingReader{n: 5000}); err == nil {
			t.Fatal("Put of a failing reader succeeded")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Put(ctx, "seg", bytes.NewReader([]byte("abc"))); !errors.Is(err, context.Canceled) {
			t.Fatalf("Put with a canceled context: %v", err)
		}
		if names := s.files(t); len(names) != 0 {
			t.Errorf("files left: %v", names)
		}
	})
}

// TestStoreBadNames checks every operation refuses a name that is not a
// segment name, before it touches the store.
func TestStoreBadNames(t *testing.T) {
	ctx := context.Background()
	forEachStore(t, func(t *testing.T, s testStore) {
		for _, bad := range []string{"", "../escape", "a/b", ".hidden"} {
			if _, err := s.Put(ctx, bad, bytes.NewReader([]byte("x"))); err == nil {
				t.Errorf("Put(%q) succeeded", bad)
			}
			if _, err := s.Open(ctx, bad); err == nil || errors.Is(err, archive.ErrNotFound) {
				t.Errorf("Open(%q): %v, want a name error", bad, err)
			}
			if _, err := s.Stat(ctx, bad); err == nil || errors.Is(err, archive.ErrNotFound) {
				t.Errorf("Stat(%q): %v, want a name error", bad, err)
			}
			if err := s.Delete(ctx, bad); err == nil {
				t.Errorf("Delete(%q) succeeded", bad)
			}
		}
		if names := s.files(t); len(names) != 0 {
			t.Errorf("files: %v", names)
		}
	})
}

func TestPutSegment(t *testing.T) {
	ctx := context.Background()
	aggs := makeAggregates(15, 60)
	build := func(w *archive.Writer) error {
		for _, a := range aggs {
			if err := w.Add(a.subject, a.records); err != nil {
				return err
			}
		}
		return nil
	}
	want, wantSum := writeSegment(t, aggs, archive.WriterOptions{})
	forEachStore(t, func(t *testing.T, s testStore) {
		sum, info, err := archive.PutSegment(ctx, s, "seg", archive.WriterOptions{}, build)
		if err != nil {
			t.Fatal(err)
		}
		if sum != wantSum || info.Size != int64(len(want)) {
			t.Errorf("PutSegment: %+v %+v; writing in memory: %+v", sum, info, wantSum)
		}
		// A retry after a crash: the same aggregates, the same segment.
		if again, _, err := archive.PutSegment(ctx, s, "seg", archive.WriterOptions{}, build); err != nil || again != sum {
			t.Fatalf("PutSegment again: %+v, %v", again, err)
		}
		// And it reads back.
		r, err := archive.OpenSegment(ctx, s, "seg")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for _, i := range []int{0, 17, len(aggs) - 1} {
			recs, err := r.Read(aggs[i].subject)
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, aggs[i].subject, recs, aggs[i].records)
		}

		// A build that fails stores nothing.
		failed := errors.New("the stream went away")
		_, _, err = archive.PutSegment(ctx, s, "broken", archive.WriterOptions{BlockSize: 1}, func(w *archive.Writer) error {
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
		_, _, err = archive.PutSegment(ctx, s, "seg", archive.WriterOptions{}, func(w *archive.Writer) error {
			return w.Add(aggs[0].subject, aggs[0].records[:1])
		})
		if !errors.Is(err, archive.ErrExists) {
			t.Fatalf("PutSegment of other content under a stored name: %v, want ErrExists", err)
		}
		if names := s.files(t); len(names) != 1 || names[0] != "seg" {
			t.Errorf("files: %v, want [seg]", names)
		}
	})
}

// TestStoreListOrder puts names in a scrambled order: List returns them
// in increasing order.
func TestStoreListOrder(t *testing.T) {
	ctx := context.Background()
	names := []string{"b", "a-2", "a.1", "A", "a", "a_3", "0", "z9", "a-10"}
	forEachStore(t, func(t *testing.T, s testStore) {
		for i, name := range names {
			if _, err := s.Put(ctx, name, bytes.NewReader(fmt.Appendf(nil, "segment %d", i))); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, info := range list {
			got = append(got, info.Name)
		}
		want := slices.Sorted(slices.Values(names))
		if !slices.Equal(got, want) {
			t.Errorf("List: %v, want %v", got, want)
		}
	})
}
