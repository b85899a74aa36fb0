package dev

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetherhq/tether/services/dev/devkeys"
	"github.com/tetherhq/tether/services/platform/apikeys"
)

// KeysDir is where a dev stack keeps its API keys, under its data dir
// (devkeys.Dir).
func KeysDir(dataDir string) string { return devkeys.Dir(dataDir) }

// AdminKeyFile is the admin key's file of the dev stack whose data dir
// is dataDir; tetherctl reads it when it talks to a dev stack on this
// machine without --token.
func AdminKeyFile(dataDir string) string { return devkeys.File(dataDir, string(apikeys.Admin)) }

// writeKeys makes one API key per role for this run (the keys of an
// earlier run stop working) and writes them to KeysDir, the directory
// and files readable by their owner only. It returns the loaded keys
// and the admin key.
func writeKeys(dataDir string) (*apikeys.Keys, string, error) {
	dir := KeysDir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("dev: keys: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("dev: keys: %w", err)
	}
	var lines []string
	var admin string
	for _, role := range apikeys.Roles {
		secret, line, err := apikeys.New("dev-"+string(role), role, time.Time{})
		if err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(devkeys.File(dataDir, string(role)), []byte(secret+"\n"), 0o600); err != nil {
			return nil, "", fmt.Errorf("dev: keys: %w", err)
		}
		if role == apikeys.Admin {
			admin = secret
		}
		lines = append(lines, line)
	}
	file := filepath.Join(dir, "api-keys")
	content := "# tether dev's API keys, one per role (made at each start; the keys are in <role>.key)\n" + strings.Join(lines, "\n") + "\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		return nil, "", fmt.Errorf("dev: keys: %w", err)
	}
	keys, err := apikeys.Load(file, nil)
	return keys, admin, err
}
