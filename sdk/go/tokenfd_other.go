//go:build !unix

package sdk

import (
	"errors"
	"os"
)

// openTokenPipe is not supported here: agents run on Linux.
func openTokenPipe(int) (*os.File, error) {
	return nil, errors.New("a token descriptor is not supported on this system")
}
