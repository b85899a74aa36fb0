package archive_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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
