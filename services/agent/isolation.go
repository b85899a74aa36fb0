package agent

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/events"
)

// A game server is whatever its fleet's template says to run, so the agent
// keeps it from everything else on the host: it runs as a user of its own
// (Options.RunAs) rather than as root, it is started only from directories
// the host allows (Options.AllowedCommands; from anywhere only when told
// so, Options.AllowAnyCommand), it gets an environment built for it (none
// of the agent's variables), and its process token comes over a pipe, not
// in its environment (ProcessSpec.Env).

// templateEnv adds a template's variables to env, the environment the agent
// built for a process, but none of the agent's own (events.AgentVariable):
// a template's TETHER_GAMESERVER_TOKEN would replace the token the agent
// hands over on its descriptor. The API refuses such templates; one stored
// before is started without them, with a warning.
func (gs *gameServer) templateEnv(env, template map[string]string) {
	for k, v := range template {
		if events.AgentVariable(k) {
			gs.log.Warn("template variable ignored: the agent sets it", "variable", k)
			continue
		}
		env[k] = v
	}
}

// expandArgs expands the ${VAR}s of a template's arguments from the
// process's environment, but never the SDK token: ps shows every process's
// arguments to every user of the host. A reference to the token expands to
// nothing, with a warning (the API refuses such templates; the process
// reads its token from its descriptor).
func (gs *gameServer) expandArgs(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, arg := range args {
		out[i] = os.Expand(arg, func(k string) string {
			if k == EnvToken {
				gs.log.Warn("template argument names the SDK token, which is never put in arguments; expanded to nothing", "arg", i)
				return ""
			}
			return env[k]
		})
	}
	return out
}

// ErrRootGameServers is CheckRunAs's answer to options that would run every
// game server as root.
var ErrRootGameServers = errors.New("agent: game servers would run as root")

// ErrAnyCommand is New's answer to options that would let game servers run
// any command: AllowedCommands is empty and AllowAnyCommand is not set.
var ErrAnyCommand = errors.New("agent: game servers would run any command")

// runAs is the user game servers run as, resolved from Options.RunAs.
type runAs struct {
	name string
	home string
	// cred is nil when the user is the agent's own: nothing to change.
	cred *syscall.Credential
}

// lookupRunAs resolves spec, a user name or a numeric uid, for an agent
// running with effective uid euid and group egid. Only root can start
// processes as another user; root itself is refused unless allowRoot.
func lookupRunAs(spec string, euid, egid int, allowRoot bool) (*runAs, error) {
	if spec == "" {
		return nil, nil
	}
	u, err := user.Lookup(spec)
	if _, notNumber := strconv.Atoi(spec); err != nil && notNumber == nil {
		u, err = user.LookupId(spec) // a uid
	}
	if err != nil {
		return nil, fmt.Errorf("agent: run as %q: %w", spec, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("agent: run as %q: uid %q: %w", spec, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("agent: run as %q: gid %q: %w", spec, u.Gid, err)
	}
	if uid == 0 && !allowRoot {
		return nil, fmt.Errorf("%w: the user to run them as, %q, is root", ErrRootGameServers, spec)
	}
	r := &runAs{name: u.Username, home: u.HomeDir}
	if int(uid) == euid && int(gid) == egid {
		return r, nil // the agent's own user and group
	}
	if euid != 0 {
		return nil, fmt.Errorf("agent: run as %q: starting game servers as another user needs an agent running as root (this one runs as uid %d)", spec, euid)
	}
	r.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return r, nil
}

// CheckRunAs refuses options that would have an agent running as root
// start every game server as root: RunAs is empty and AllowRootGameServers
// is not set. `tether agent` calls it before New, so that a host agent run
// as root must be told whom to run game servers as (or told explicitly,
// for development, that root will do). New itself does not refuse such
// options (tests, `tether dev`); the agent then warns at start-up.
func CheckRunAs(opts Options) error { return checkRunAs(opts, os.Geteuid()) }

func checkRunAs(opts Options, euid int) error {
	if euid == 0 && opts.RunAs == "" && !opts.AllowRootGameServers {
		return fmt.Errorf("%w: the agent runs as root and no user to run them as is given", ErrRootGameServers)
	}
	return nil
}

// DenyInspection makes the calling process non-dumpable (prctl
// PR_SET_DUMPABLE 0). Other processes of its user, among them the game
// servers of an agent that runs them as its own user, can then neither
// trace it nor read its memory, its open files or its environment (with
// TETHER_PLAYER_TOKEN_KEYS) through /proc; root still can. The process
// dumps no core either. The setting lasts until the process ends; the
// processes it starts are dumpable again once they exec. `tether agent`
// calls it at start-up.
func DenyInspection() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("agent: prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}

// inheritedFDs marks close-on-exec every descriptor above stderr that is
// not: those the agent's process inherited open from its parent (a shell's,
// a supervisor's, a test runner's), which exec would otherwise hand on to
// every game server (fds 10 and 251 were seen in one). Go opens its own
// descriptors close-on-exec, and a game server's own (its token, its
// output) are handed over by exec.Cmd, which dups them into the child; so
// a game server gets descriptors 0-2, the token's and its keep-open pipes
// (ProcessSpec.KeepOpen), and no others. New calls it for real processes.
// It returns the descriptors it marked.
func inheritedFDs() ([]int, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("agent: list the process's descriptors: %w", err)
	}
	var marked []int
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed since it was listed (the listing's own), or marked already
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
			return marked, fmt.Errorf("agent: mark descriptor %d close-on-exec: %w", fd, err)
		}
		marked = append(marked, fd)
	}
	return marked, nil
}

// keepInheritedFDs keeps the descriptors the agent inherited from its game
// servers (inheritedFDs), and says which it found.
func (a *Agent) keepInheritedFDs() error {
	marked, err := inheritedFDs()
	if err != nil {
		return err
	}
	if len(marked) > 0 {
		a.log.Info("descriptors inherited from the agent's parent are closed in game servers", "fds", marked)
	}
	return nil
}

// warnIsolation warns, at start-up, of what keeps the agent's real game
// server processes from being isolated: running as root, and running any
// command at all.
func (a *Agent) warnIsolation() {
	if _, real := a.opts.Processes.(OSProcesses); !real {
		return // simulated processes run nothing
	}
	asRoot := os.Geteuid() == 0 && (a.runAs == nil || a.runAs.cred == nil) // no user, or root allowed
	switch {
	case asRoot && a.opts.AllowRootGameServers:
		a.log.Warn("game servers run as root, as allowed for development: each can do anything on this host")
	case asRoot:
		a.log.Warn("game servers run as root: each can do anything on this host; give the agent a user to run them as (tether agent --run-as)")
	case a.runAs != nil:
		a.log.Info("game servers run as their user", "user", a.runAs.name)
	}
	if len(a.allowed) == 0 {
		a.log.Warn("every command is allowed (--allow-any-command): a fleet template can run any program on this host; restrict them with tether agent --allowed-commands")
	} else {
		a.log.Info("game server commands allowed only from these directories", "dirs", []string(a.allowed))
	}
}
