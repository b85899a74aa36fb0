package agent

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// logRemovalsPerRun bounds the files one retention run removes, so that a
// host that comes back to a long backlog (a lowered limit, a clock that
// jumped) spreads the work; the next run comes at once while there is more.
const logRemovalsPerRun = 1000

// retainedFile is a log file retention weighs.
type retainedFile struct {
	path string
	dir  string
	num  uint64
	size int64
	// age is the file's last write, or a server's older file's if that
	// is later (a clock set back): a server's files go oldest first, by
	// number, whatever their times say.
	age time.Time
}

// retentionResult is what a retention run did.
type retentionResult struct {
	removed      int
	removedBytes int64
	keptBytes    int64
	more         bool // it stopped at logRemovalsPerRun with more to remove
}

// runRetention applies retention every RetentionEvery until ctx ends,
// and again at once after a run that had more to remove.
func (s *logStore) runRetention(ctx context.Context) error {
	for {
		res, err := s.retain()
		switch {
		case err != nil:
			s.log.Warn("game server log retention failed; trying again later", "err", err)
		case res.removed > 0:
			s.log.Info("game server logs removed by retention", "files", res.removed, "bytes", res.removedBytes,
				"kept_bytes", res.keptBytes, "more", res.more)
		}
		every := s.opts.RetentionEvery
		if res.more {
			every = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// retain runs retention once: it removes the log files last written
// before now - Retention, and the oldest while all of them together take
// more than MaxBytes, leaving alone the files servers write now; then the
// directories it emptied. Oldest is by last write across servers, and by
// number within one: only a server's oldest files go, never one after a
// newer one. Files an equal time old go by directory and number.
func (s *logStore) retain() (retentionResult, error) {
	var res retentionResult
	type serverFiles struct {
		dir   string
		files []retainedFile
	}
	var servers []serverFiles
	var total int64
	fleets, err := os.ReadDir(s.root)
	if err != nil {
		return res, err
	}
	for _, fleet := range fleets {
		if !fleet.IsDir() {
			continue
		}
		fleetDir := filepath.Join(s.root, fleet.Name())
		entries, err := os.ReadDir(fleetDir)
		if err != nil {
			continue // removed meanwhile
		}
		for _, server := range entries {
			if !server.IsDir() {
				continue
			}
			dir := filepath.Join(fleetDir, server.Name())
			list, err := listLogFiles(dir)
			if err != nil {
				continue
			}
			sf := serverFiles{dir: dir}
			for _, lf := range list {
				info, err := os.Stat(lf.path)
				if err != nil {
					continue
				}
				total += info.Size()
				sf.files = append(sf.files, retainedFile{path: lf.path, dir: dir, num: lf.num, size: info.Size(), age: info.ModTime()})
			}
			servers = append(servers, sf)
		}
	}
	// The files servers write now, looked at after the listing: a file
	// listed is then either still written, and left alone, or closed for
	// good (a server writes a file from its creation until it starts the
	// next, never after); a file started since is not listed. Looked at
	// before, a file closed meanwhile would be left alone and the newer
	// ones, the one written now among them, removed in its place.
	open, openDirs := s.openFiles()
	var files []retainedFile
	for _, sf := range servers {
		var age time.Time
		for _, f := range sf.files {
			if open[f.path] {
				break // it and any newer: a server's files go in order
			}
			if f.age.Before(age) {
				f.age = age
			}
			age = f.age
			files = append(files, f)
		}
	}
	slices.SortFunc(files, func(a, b retainedFile) int {
		return cmp.Or(a.age.Compare(b.age), cmp.Compare(a.dir, b.dir), cmp.Compare(a.num, b.num))
	})
	cutoff := s.now().Add(-s.opts.Retention)
	emptied := map[string]bool{}
	stuck := map[string]bool{} // servers with a file that could not be removed
	for _, f := range files {
		if !f.age.Before(cutoff) && total <= s.opts.MaxBytes {
			break // newer ones follow
		}
		if stuck[f.dir] {
			continue // its older file is there still: not this one before it
		}
		if res.removed == logRemovalsPerRun {
			res.more = true
			break
		}
		if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("remove a game server log file", "file", f.path, "err", err)
			stuck[f.dir] = true
			continue
		}
		total -= f.size
		res.removed++
		res.removedBytes += f.size
		emptied[f.dir] = true
	}
	res.keptBytes = total
	s.removeEmptyDirs(emptied, openDirs)
	return res, nil
}

// removeEmptyDirs removes the servers' directories retention emptied, but
// not those of servers whose output may still come, then their fleets'
// directories that are left empty.
func (s *logStore) removeEmptyDirs(dirs, keep map[string]bool) {
	s.dirMu.Lock()
	defer s.dirMu.Unlock()
	fleets := map[string]bool{}
	for dir := range dirs {
		if keep[dir] {
			continue
		}
		if os.Remove(dir) == nil { // fails unless empty
			fleets[filepath.Dir(dir)] = true
		}
	}
	for dir := range fleets {
		_ = os.Remove(dir) // fails unless empty: another server's logs are there
	}
}
