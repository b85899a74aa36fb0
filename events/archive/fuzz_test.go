package archive_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/events/archive"
)

var update = flag.Bool("update", false, "rewrite testdata/v1.tseg")

// goldenPath is a segment of format version 1 written by this package
// when the format was made: later builds must keep reading it.
var goldenPath = filepath.Join("testdata", "v1.tseg")

// TestGoldenV1 reads the committed version 1 segment. go test -run
// TestGoldenV1 -update rewrites it (only for a deliberate format change,
// which also bumps FormatVersion).
func TestGoldenV1(t *testing.T) {
	aggs := smallAggregates()
	if *update {
		b, _ := writeSegment(t, aggs, archive.WriterOptions{BlockSize: 150})
		if err := os.WriteFile(goldenPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	r, err := archive.Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	for _, a := range aggs {
		recs, err := r.Read(a.subject)
		if err != nil {
			t.Fatal(err)
		}
		checkRecords(t, a.subject, recs, a.records)
	}
}

// FuzzOpenSegment opens arbitrary bytes as a segment and reads all of it:
// no panic, only errors wrapping ErrCorrupt or ErrVersion, and a segment
// that verifies reads without error. The seeds are real segments.
func FuzzOpenSegment(f *testing.F) {
	small, _ := writeSegment(f, smallAggregates(), archive.WriterOptions{BlockSize: 150})
	f.Add(small)
	one, _ := writeSegment(f, smallAggregates()[:1], archive.WriterOptions{})
	f.Add(one)
	more, _ := writeSegment(f, smallAggregates(), archive.WriterOptions{BlockSize: 1})
	f.Add(more)
	if golden, err := os.ReadFile(goldenPath); err == nil {
		f.Add(golden)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := archive.Open(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if !errors.Is(err, archive.ErrCorrupt) && !errors.Is(err, archive.ErrVersion) {
				t.Fatalf("Open: %v", err)
			}
			return
		}
		verr := r.Verify()
		if verr != nil && !errors.Is(verr, archive.ErrCorrupt) {
			t.Fatalf("Verify: %v", verr)
		}
		for _, a := range r.Aggregates() {
			recs, err := r.Read(a.Subject)
			if err != nil {
				if !errors.Is(err, archive.ErrCorrupt) {
					t.Fatalf("Read(%s): %v", a.Subject, err)
				}
				if verr == nil {
					t.Fatalf("Verify succeeded but Read(%s): %v", a.Subject, err)
				}
				continue
			}
			if len(recs) != a.Events || recs[0].Sequence != a.FirstSequence || recs[len(recs)-1].Sequence != a.LastSequence {
				t.Fatalf("Read(%s) disagrees with the index", a.Subject)
			}
		}
		for _, err := range r.All() {
			if err != nil && verr == nil {
				t.Fatalf("Verify succeeded but All: %v", err)
			}
		}
	})
}
