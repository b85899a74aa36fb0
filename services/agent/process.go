package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/events"
)

// Processes starts game server processes. The agent's default, OSProcesses,
// runs real operating-system processes; the fleet simulator (services/sim)
// supplies simulated ones, so that one machine can stand in for thousands
// of hosts while every other line of the agent runs as in production.
type Processes interface {
	// Start starts one game server process.
	Start(spec ProcessSpec) (Process, error)
}

// ProcessSpec is what a game server process is started with.
type ProcessSpec struct {
	// GameServer is the server's resource name.
	GameServer string
	// Command and Args come from the fleet's template, with ${VAR}s expanded
	// (never the token: ps shows arguments to every user of the host).
	Command string
	Args    []string
	// Path, if set, is the executable to run, Command resolved by the agent
	// (Options.AllowedCommands); Command stays the process's argv[0]. ""
	// resolves Command as exec.Command does.
	Path string
	// Env is the whole environment, nothing inherited: the template's, PATH
	// and HOME, and Tether's (TETHER_GAMESERVER, TETHER_GAMESERVER_TOKEN,
	// TETHER_SDK_ADDR, TETHER_SDK_HTTP, TETHER_PORT_<NAME>). OSProcesses
	// does not put the token in the process's environment, where other
	// processes of its user can read it (/proc/PID/environ): it hands it over
	// a pipe on fd 3 instead, and sets TETHER_GAMESERVER_TOKEN_FD=3.
	Env map[string]string
	// Credential, if set, is the user and group the process runs as, with
	// no supplementary groups (Options.RunAs); nil runs it as the agent's
	// user.
	Credential *syscall.Credential
	// Stdout and Stderr are where the process's output goes: the write
	// ends of the agent's pipes (logfiles.go), which OSProcesses hands the
	// process as its stdout and stderr; nil is /dev/null.
	Stdout, Stderr *os.File
	// KeepOpen are descriptors the process holds without using them:
	// OSProcesses hands them over after the token's (from descriptor 4,
	// or 3 without a token). The agent gives the read ends of the output
	// pipes, so that the pipes never lose their last reader while the
	// process runs: should the agent die, the process's writes go on
	// filling the pipes (until they are full) instead of killing it with
	// SIGPIPE, and the next agent ends it with its reason
	// (AGENT_RESTARTED).
	KeepOpen []*os.File
	// DieWithAgent asks that the process be killed if the agent dies.
	DieWithAgent bool
}

// The environment variables of the process token: the agent's spec carries
// the token in EnvToken; OSProcesses hands it to the process on file
// descriptor TokenFD, named by EnvTokenFD, instead (the Go SDK reads
// either: sdk.EnvToken, sdk.EnvTokenFD).
const (
	EnvToken   = events.TokenVariable
	EnvTokenFD = "TETHER_GAMESERVER_TOKEN_FD"
	// TokenFD is the descriptor the token is read from: the first after
	// stdin, stdout and stderr.
	TokenFD = 3
)

// Process is one started game server process.
type Process interface {
	// Pid is the process id; the agent reports it in events and in the host
	// inventory.
	Pid() int
	// Signal sends sig to the process and every process of its group; a
	// process that is gone already is not an error.
	Signal(sig syscall.Signal) error
	// Wait blocks until the process has ended and tells how.
	Wait() (ProcessExit, error)
}

// ProcessExit is how a process ended: by a signal (Signal is its name, e.g.
// "killed"), or with an exit code.
type ProcessExit struct {
	Code   int
	Signal string
}

// OSProcesses starts real processes, each in a process group of its own so
// that a stop reaches the children it spawned.
type OSProcesses struct{}

// Start starts the command with its output going to spec.Stdout and
// spec.Stderr, pipes the agent reads into its log files, so a process
// running as another user (spec.Credential) needs no access to the log
// directory. The process gets spec.Env and nothing of the agent's
// environment; the process token goes over a pipe (see ProcessSpec.Env).
func (OSProcesses) Start(spec ProcessSpec) (Process, error) {
	cmd := exec.Command(spec.Command, spec.Args...)
	if spec.Path != "" {
		cmd.Path, cmd.Err = spec.Path, nil
	}
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	if spec.Stderr != nil {
		cmd.Stderr = spec.Stderr
	}
	cmd.Env = make([]string, 0, len(spec.Env)+1) // not nil: nil would inherit the agent's environment
	token, hasToken := spec.Env[EnvToken]
	for k, v := range spec.Env {
		if k != EnvToken {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if hasToken {
		r, err := tokenPipe(token)
		if err != nil {
			return nil, err
		}
		defer r.Close() // the child has its own copy once started
		cmd.ExtraFiles = []*os.File{r}
		cmd.Env = append(cmd.Env, EnvTokenFD+"="+strconv.Itoa(TokenFD))
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, spec.KeepOpen...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.Credential != nil {
		cred := *spec.Credential
		cred.Groups, cred.NoSetGroups = []uint32{}, false // setgroups(0): no supplementary groups
		cmd.SysProcAttr.Credential = &cred
	}
	if spec.DieWithAgent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL // set after the user change (which clears it), by Go
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return osProcess{cmd.Process}, nil
}

// tokenPipe returns the read end of a pipe that holds token and a newline
// (for shells' read) and then ends: a reader gets the token once, and it is
// gone from the pipe after.
func tokenPipe(token string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("token pipe: %w", err)
	}
	// A token is far smaller than a pipe's buffer: the write does not wait
	// for a reader.
	_, err = w.WriteString(token + "\n")
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("token pipe: %w", err)
	}
	return r, nil
}

// osProcess is a started OS process.
type osProcess struct{ p *os.Process }

func (o osProcess) Pid() int { return o.p.Pid }

func (o osProcess) Signal(sig syscall.Signal) error {
	if err := syscall.Kill(-o.p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func (o osProcess) Wait() (ProcessExit, error) {
	state, err := o.p.Wait()
	if err != nil || state == nil {
		return ProcessExit{Signal: "unknown"}, err
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ProcessExit{Signal: ws.Signal().String()}, nil
	}
	return ProcessExit{Code: state.ExitCode()}, nil
}

// Identity is the machine's boot id and the process's start time in clock
// ticks since that boot (field 22 of /proc/<pid>/stat), which a later
// process reusing the pid, in this boot or after a reboot, does not have;
// "" if no such process runs (a zombie has ended).
func (OSProcesses) Identity(pid int) string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// "pid (comm) state ppid …": comm may hold spaces and parentheses, so
	// the fields are counted from the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(string(data[i+1:]))
	const state, startTime = 0, 19 // fields 3 and 22 of the whole line
	if len(fields) <= startTime || fields[state] == "Z" || fields[state] == "X" {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + fields[startTime]
}

// orphanPoll is how often StopOrphan looks whether the process has gone.
const orphanPoll = 20 * time.Millisecond

// StopOrphan stops the process group of pid if the process still has
// identity id: SIGTERM, then SIGKILL once grace has passed without it
// ending, then a wait of at most grace more for it to go.
func (p OSProcesses) StopOrphan(ctx context.Context, pid int, id string, grace time.Duration) (bool, error) {
	if id == "" || p.Identity(pid) != id {
		return false, nil
	}
	gone := func(limit time.Duration) bool {
		deadline := time.Now().Add(limit)
		for p.Identity(pid) == id {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return false
			}
			time.Sleep(orphanPoll)
		}
		return true
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return true, fmt.Errorf("signal %s: %w", sig, err)
		}
		if gone(grace) {
			return true, nil
		}
		if err := ctx.Err(); err != nil {
			return true, err
		}
	}
	return true, fmt.Errorf("process %d still runs %s after SIGKILL", pid, grace)
}
