//go:build unix

package pgtemp

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	// dirPrefix names server directories (os.MkdirTemp pattern).
	dirPrefix = "tether-pg-"
	// sockPrefix names socket directories made outside a server directory.
	sockPrefix = "tether-pgs-"
	// ownerName is the lock file an owning process holds (flock) for as long
	// as its server directory is in use; the kernel drops the lock when that
	// process dies, however it dies.
	ownerName = "owner.lock"
	// sockRecordName, in a server directory, names its socket directory when
	// that lives elsewhere, so that a cleanup removes both.
	sockRecordName = "socket-dir"
)

// ownDir creates the owner lock file in a fresh server directory and locks
// it; the returned file holds the lock until it is closed.
func ownDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, ownerName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: create owner lock: %w", err)
	}
	ok, err := tryLock(f)
	if err == nil && !ok {
		err = errors.New("held by another process")
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("pgtemp: lock %s: %w", f.Name(), err), f.Close())
	}
	if _, err := fmt.Fprintf(f, "%d\n", os.Getpid()); err != nil { // for a reader; the lock is what counts
		return nil, errors.Join(fmt.Errorf("pgtemp: write owner lock: %w", err), f.Close())
	}
	return f, nil
}

// removeStale removes the server directories under parent whose owning
// process is gone (left behind by a process killed before Stop): those whose
// owner lock can be taken and whose postmaster, if it recorded one, is not
// running. A directory without an owner lock file (being created right now,
// or made by an older version) is left alone: it may be a live one. Errors
// are logged, not returned: a leftover never stops a start.
func removeStale(parent string, log *slog.Logger) {
	if !canLock {
		return
	}
	dirs, err := filepath.Glob(filepath.Join(parent, dirPrefix+"*"))
	if err != nil {
		log.Warn("postgres: cannot list leftover directories", "dir", parent, "err", err)
		return
	}
	for _, dir := range dirs {
		removed, err := removeIfStale(dir)
		switch {
		case err != nil:
			log.Warn("postgres: cannot remove a leftover directory", "dir", dir, "err", err)
		case removed:
			log.Info("postgres: removed a directory left by a process that is gone", "dir", dir)
		}
	}
}

// removeIfStale removes dir (and its socket directory) if no live process
// owns it, holding its owner lock meanwhile so no other cleanup races it.
func removeIfStale(dir string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(dir, ownerName), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }() // drops the lock; the file is gone or still owned
	if ok, err := tryLock(f); err != nil || !ok {
		return false, err
	}
	if postmasterAlive(filepath.Join(dir, "data")) {
		return false, nil // its owner died but its server has not yet: next time
	}
	var errs []error
	if sock, err := os.ReadFile(filepath.Join(dir, sockRecordName)); err == nil {
		if s := strings.TrimSpace(string(sock)); strings.HasPrefix(filepath.Base(s), sockPrefix) {
			errs = append(errs, os.RemoveAll(s))
		}
	}
	errs = append(errs, os.RemoveAll(dir))
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	return true, nil
}

// postmasterAlive reports whether the postmaster recorded in data's
// postmaster.pid is running (a pid taken by another process since counts:
// in doubt, a directory is kept).
func postmasterAlive(data string) bool {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return false // never started, or shut down
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(first)))
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
