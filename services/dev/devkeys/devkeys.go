// Package devkeys says where `tether dev` keeps the API keys it makes and
// the addresses it listens on, so that tetherctl on the same machine finds
// the admin key and the API without depending on the dev stack itself.
package devkeys

import (
	"os"
	"path/filepath"
)

// DefaultDataDir is `tether dev`'s data dir when none is given:
// $XDG_CACHE_HOME/tether/dev (usually ~/.cache/tether/dev).
func DefaultDataDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "tether", "dev"), nil
}

// Dir is where the dev stack whose data dir is dataDir keeps its keys:
// <role>.key, one key per role, and api-keys, the hashed keys file.
func Dir(dataDir string) string { return filepath.Join(dataDir, "keys") }

// File is the file that holds role's key.
func File(dataDir, role string) string { return filepath.Join(Dir(dataDir), role+".key") }
