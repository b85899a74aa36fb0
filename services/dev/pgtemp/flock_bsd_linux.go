//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package pgtemp

import (
	"errors"
	"os"
	"syscall"
)

// canLock says tryLock proves ownership: a lock held by a live process.
const canLock = true

// tryLock takes an exclusive lock on f without waiting; false if another
// open file holds it.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
