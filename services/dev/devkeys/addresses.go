package devkeys

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Addresses are where a running dev stack listens, as it writes them to
// its data dir once everything serves, so that tetherctl finds the stack
// when its default ports were taken and it moved to others.
type Addresses struct {
	// GRPC is the API's gRPC address (host:port).
	GRPC string `json:"grpc"`
	// REST is the API's REST base URL.
	REST string `json:"rest"`
	// PID is the stack's process: the file counts only while it runs.
	PID int `json:"pid"`
}

// AddressesFile is where the dev stack whose data dir is dataDir writes
// its Addresses.
func AddressesFile(dataDir string) string { return filepath.Join(dataDir, "addresses.json") }

// ErrNotRunning is why ReadAddresses has none: no file, or the process
// that wrote it has ended (a stack killed before it could remove it).
var ErrNotRunning = errors.New("devkeys: no dev stack runs with this data dir")

// WriteAddresses writes a (with this process's pid) for tetherctl.
func WriteAddresses(dataDir string, a Addresses) error {
	a.PID = os.Getpid()
	raw, err := json.Marshal(a)
	if err != nil {
		return err
	}
	tmp := AddressesFile(dataDir) + ".tmp"
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("devkeys: write the addresses: %w", err)
	}
	if err := os.Rename(tmp, AddressesFile(dataDir)); err != nil {
		return fmt.Errorf("devkeys: write the addresses: %w", err)
	}
	return nil
}

// RemoveAddresses removes the addresses a stopping stack wrote, if this
// process wrote them (a second stack on the same data dir may have since).
func RemoveAddresses(dataDir string) error {
	a, err := readFile(dataDir)
	if err != nil || a.PID != os.Getpid() {
		return nil // not ours, or gone: nothing to remove
	}
	if err := os.Remove(AddressesFile(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("devkeys: remove the addresses: %w", err)
	}
	return nil
}

// ReadAddresses returns the addresses of the dev stack running with this
// data dir, or ErrNotRunning.
func ReadAddresses(dataDir string) (Addresses, error) {
	a, err := readFile(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return Addresses{}, ErrNotRunning
	}
	if err != nil {
		return Addresses{}, err
	}
	if a.PID <= 0 {
		return Addresses{}, ErrNotRunning
	}
	// Signal 0 checks that the process exists (EPERM: it does, another
	// user's).
	if err := syscall.Kill(a.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return Addresses{}, ErrNotRunning
	}
	return a, nil
}

func readFile(dataDir string) (Addresses, error) {
	raw, err := os.ReadFile(AddressesFile(dataDir))
	if err != nil {
		return Addresses{}, err
	}
	var a Addresses
	if err := json.Unmarshal(raw, &a); err != nil {
		return Addresses{}, fmt.Errorf("devkeys: %s: %w", AddressesFile(dataDir), err)
	}
	return a, nil
}
