package agent

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// allowedCommands are the directories game server executables must be in,
// or the programs allowed alone (Options.AllowedCommands), each absolute
// with its symbolic links resolved; empty allows any command
// (Options.AllowAnyCommand).
type allowedCommands []string

// checkAllowedCommands refuses options that would let game servers run
// any command without saying so: nothing in AllowedCommands (an empty
// name is nothing: an empty TETHER_ALLOWED_COMMANDS= must not open
// everything) and AllowAnyCommand not set.
func checkAllowedCommands(opts Options) error {
	if opts.AllowAnyCommand || slices.ContainsFunc(opts.AllowedCommands, func(d string) bool { return d != "" }) {
		return nil
	}
	return fmt.Errorf("%w: no directories (or programs) for game server commands were given; "+
		"give them with --allowed-commands DIR[,DIR...] (Options.AllowedCommands), "+
		"or, to let a fleet template run any program on this host, --allow-any-command (Options.AllowAnyCommand)", ErrAnyCommand)
}

// newAllowedCommands resolves the entries, each a directory (the programs
// in it and below it are allowed) or a program (allowed alone); each must
// exist.
func newAllowedCommands(entries []string) (allowedCommands, error) {
	var out allowedCommands
	for _, e := range entries {
		if e == "" {
			continue
		}
		real, err := realPath(e)
		if err != nil {
			return nil, fmt.Errorf("agent: allowed commands: %w", err)
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
// agent's working directory), and refuses it unless, once its symbolic
// links are resolved, it lies in one of the directories or is one of the
// programs: a link in an allowed directory to a program elsewhere is
// refused. It returns the resolved
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
		// "." is the entry itself: a program allowed alone (a directory
		// named as the command is no program, and exec says so).
		if rel, err := filepath.Rel(d, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return real, nil
		}
	}
	return "", fmt.Errorf("command %q (%s) refused: not in a directory the agent allows commands from (%s)",
		command, real, strings.Join(dirs, ", "))
}
