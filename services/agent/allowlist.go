package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// allowedCommands are the directories game server executables must be in
// (Options.AllowedCommands), each absolute with its symbolic links
// resolved; empty allows any command.
type allowedCommands []string

// newAllowedCommands resolves the directories; each must exist.
func newAllowedCommands(dirs []string) (allowedCommands, error) {
	var out allowedCommands
	for _, d := range dirs {
		if d == "" {
			continue
		}
		real, err := realPath(d)
		if err != nil {
			return nil, fmt.Errorf("agent: allowed commands: %w", err)
		}
		info, err := os.Stat(real)
		if err != nil {
			return nil, fmt.Errorf("agent: allowed commands: %w", err)
		}
		if !info.IsDir() {
			return nil, fmt.Errorf("agent: allowed commands: %s is not a directory", d)
		}
		out = append(out, real)
	}
	return out, nil
}

// realPath is path absolute, with every symbolic link resolved.
func realPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// resolve finds the executable command names, as exec.Command finds it
// (a name without a slash in the agent's PATH, a relative path from the
// agent's working directory), and refuses it unless it lies in one of the
// directories once its symbolic links are resolved: a link in an allowed
// directory to a program elsewhere is refused. It returns the resolved
// path, which is what runs, so that nothing can be swapped in between; ""
// when any command is allowed, leaving the resolution to exec as before.
func (dirs allowedCommands) resolve(command string) (string, error) {
	if len(dirs) == 0 {
		return "", nil
	}
	path := command
	if !strings.Contains(command, "/") {
		var err error
		if path, err = exec.LookPath(command); err != nil {
			return "", err
		}
	}
	real, err := realPath(path)
	if err != nil {
		return "", fmt.Errorf("command %q: %w", command, err)
	}
	for _, d := range dirs {
		if rel, err := filepath.Rel(d, real); err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") {
			return real, nil
		}
	}
	return "", fmt.Errorf("command %q (%s) refused: not in a directory the agent allows commands from (%s)",
		command, real, strings.Join(dirs, ", "))
}
