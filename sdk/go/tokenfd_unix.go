//go:build unix

package sdk

import (
	"errors"
	"os"
	"syscall"
)

// openTokenPipe returns the descriptor fd as a file, once it is known to be
// a pipe: a descriptor the process was not given (its number taken by
// something else) must be neither read nor closed.
func openTokenPipe(fd int) (*os.File, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, errors.New("not a pipe")
	}
	return os.NewFile(uintptr(fd), "tether-token"), nil
}
