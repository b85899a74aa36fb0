package agent

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// shutdownGrace is the deadline a game server's own Shutdown call gets.
const shutdownGrace = 30 * time.Second

// supervise runs the process until the server is finished: a crash before
// Ready is restarted with doubling backoff up to MaxStartAttempts.
func (gs *gameServer) supervise(ctx context.Context) {
	defer func() {
		gs.mu.Lock()
		if gs.killTimer != nil {
			gs.killTimer.Stop()
		}
		close(gs.done)
		gs.notifyLocked()
		gs.mu.Unlock()
		gs.agones.close()
		gs.a.forget(gs)
		gs.a.logs.release(gs.name)
	}()
	backoff := gs.a.opts.RestartBackoff
	for {
		gs.mu.Lock()
		gs.attempt++
		attempt, stopping := gs.attempt, gs.stopping
		gs.mu.Unlock()
		if stopping {
			gs.recordDetached(events.Terminate{Reason: gs.stopReason(), Evidence: &eventsv1.Evidence{Detail: "stopped before the process started", StartAttempts: int32(attempt - 1)}})
			return
		}
		proc, err := gs.launch(attempt)
		if err != nil {
			gs.log.Error("game server process did not start", "err", err)
			gs.recordDetached(events.Terminate{Reason: eventsv1.Reason_REASON_PROCESS_START_FAILED, Evidence: &eventsv1.Evidence{Detail: err.Error(), StartAttempts: int32(attempt)}})
			return
		}
		end, werr := proc.Wait()
		if werr != nil {
			gs.log.Error("wait for game server process", "err", werr)
		}
		exited := exitFacts(end, attempt)
		if ctx.Err() != nil && !gs.a.opts.KillProcessesOnExit {
			// The agent is stopping and leaves its processes be: it no longer
			// supervises them, and records nothing more of them. The
			// process record stays, so the next agent on the host finds the
			// server whose process had ended and terminates it.
			gs.log.Info("agent stopping; process end not recorded (the next agent will)", "pid", proc.Pid())
			return
		}
		gs.forgetProcess()
		gs.mu.Lock()
		gs.proc = nil
		gs.setPid(0)
		exited.BeforeReady = !gs.state.GetEverReady()
		restart := exited.BeforeReady && !gs.stopping && attempt < gs.a.opts.MaxStartAttempts && ctx.Err() == nil
		var lastPing time.Time // the real last health ping; events only record connects and misses
		if gs.check != nil {
			if at := gs.lastPingAt(); !at.IsZero() {
				gs.check.pinged(at) // a ping not folded yet (an older one changes nothing)
			}
			lastPing = gs.check.lastPing
		}
		gs.mu.Unlock()
		exited.WillRestart = restart
		gs.log.Info("game server process exited", "pid", proc.Pid(), "exit", describeExit(end), "attempt", attempt, "restart", restart)
		if !restart {
			if gs.lifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
				gs.log.Info("process of a server already terminated elsewhere has ended")
				return
			}
			gs.recordDetached(events.RecordExit{Exited: exited, LastHeartbeat: lastPing})
			return
		}
		if err := gs.record(ctx, events.RecordExit{Exited: exited, LastHeartbeat: lastPing}); err != nil {
			gs.log.Error("record process exit", "err", err)
		}
		select {
		case <-ctx.Done():
			gs.recordDetached(events.Terminate{Reason: eventsv1.Reason_REASON_HOST_SHUTDOWN,
				Evidence: &eventsv1.Evidence{Detail: "the agent stopped while the process waited to restart", StartAttempts: int32(attempt)}})
			return
		case <-gs.a.opts.Clock.After(backoff):
		}
		backoff *= 2
	}
}

// exitFacts turns a process's end into a ProcessExited payload.
func exitFacts(end ProcessExit, attempt int) *eventsv1.ProcessExited {
	x := &eventsv1.ProcessExited{Attempt: int32(attempt)}
	if end.Signal != "" {
		x.Signal = end.Signal
		return x
	}
	x.ExitCode = proto.Int32(int32(end.Code))
	return x
}

// launch starts the process and records ProcessStarted.
func (gs *gameServer) launch(attempt int) (Process, error) {
	t := gs.spec.GetTemplate()
	path, err := gs.a.allowed.resolve(t.GetCommand())
	if err != nil {
		return nil, err
	}
	// The environment is built here, not inherited: nothing of the agent's
	// own (player-token keys, credentials' paths) reaches a game server.
	home := os.Getenv("HOME")
	var cred *syscall.Credential
	if gs.a.runAs != nil {
		home, cred = gs.a.runAs.home, gs.a.runAs.cred
	}
	env := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": home,
		"TETHER_GAMESERVER": gs.name, EnvToken: gs.token,
		"TETHER_SDK_ADDR": gs.a.SDKAddr(), "TETHER_SDK_HTTP": "http://" + gs.a.SDKHTTPAddr(),
	}
	gs.templateEnv(env, t.GetEnv())
	gs.agones.env(env) // after the template's: a fleet cannot point the SDK elsewhere
	var ports []*eventsv1.Port
	for i, p := range t.GetPorts() {
		env["TETHER_PORT_"+envName(p.GetName())] = strconv.Itoa(gs.ports[i])
		ports = append(ports, &eventsv1.Port{Name: p.GetName(), Port: int32(gs.ports[i]), Protocol: p.GetProtocol()})
	}
	args := gs.expandArgs(t.GetArgs(), env)
	// The lock is held from exec until ProcessStarted is recorded: a process
	// can call the SDK at once, and a call recorded first (SdkConnected)
	// would be undone by ProcessStarted, which starts the process's
	// connection afresh; the next call would then record a second connect.
	// Its calls wait for the record instead (a health ping leaves its
	// connection to a background fold, which waits: gameServer.healthPing).
	out, err := gs.a.logs.output(gs.name)
	if err != nil {
		return nil, fmt.Errorf("game server log: %w", err)
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	// What the last process's health pings left is not the new process's.
	gs.pendingConn.Store(nil)
	gs.lastPing.Store(0)
	proc, err := gs.a.opts.Processes.Start(ProcessSpec{
		GameServer: gs.name, Command: t.GetCommand(), Path: path, Args: args, Env: env, Credential: cred,
		Stdout: out.stdoutW, Stderr: out.stderrW, KeepOpen: out.keep, DieWithAgent: gs.a.opts.KillProcessesOnExit,
	})
	out.started(err == nil)
	if err != nil {
		return nil, err
	}
	pid := proc.Pid()
	gs.setPid(pid) // first: the process may be calling the SDK already (processpid.go)
	gs.recordProcess(pid)
	gs.proc = proc
	gs.check = newHealthCheck(gs.spec.GetHealth(), time.Duration(gs.spec.GetSdkDisconnectGraceSeconds())*time.Second, gs.a.opts.Clock.Now())
	gs.log.Info("game server process started", "pid", pid, "attempt", attempt, "log", gs.logPath)
	ctx, cancel := context.WithTimeout(context.Background(), finalEventTimeout)
	defer cancel()
	if err := gs.recordLocked(ctx, events.RecordProcessStart{Started: &eventsv1.ProcessStarted{
		Pid: int32(pid), Address: gs.a.opts.Address, Ports: ports, LogPath: gs.logPath, Attempt: int32(attempt),
	}}); err != nil {
		gs.log.Error("record process start", "pid", pid, "err", err)
	}
	return proc, nil
}

// describeExit says how a process ended, for logs: "exit code 3" or
// "signal killed".
func describeExit(end ProcessExit) string {
	if end.Signal != "" {
		return "signal " + end.Signal
	}
	return "exit code " + strconv.Itoa(end.Code)
}

// envName turns a port name into its environment suffix: "game-udp" → "GAME_UDP".
func envName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// stop tells the process to stop: a shutdown notice to its SDK watchers,
// SIGTERM to its process group, and SIGKILL at the deadline.
func (gs *gameServer) stop(reason eventsv1.Reason, deadline time.Time) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.stopping {
		return
	}
	gs.stopping = true
	gs.notice = &sdkv1.ShutdownNotice{Deadline: timestamppb.New(deadline), Reason: events.ReasonName(reason)}
	gs.notifyLocked()
	if gs.proc == nil {
		return
	}
	proc := gs.proc
	gs.log.Info("stopping game server", "reason", events.ReasonName(reason), "deadline", deadline)
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		gs.log.Warn("SIGTERM failed", "pid", proc.Pid(), "err", err)
	}
	gs.recordSignalLocked(syscall.SIGTERM, reason, deadline)
	gs.killTimer = gs.a.opts.Clock.AfterFunc(gs.a.opts.Clock.Until(deadline), func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		if gs.proc != proc {
			return // it exited in time
		}
		gs.log.Warn("shutdown deadline passed; killing", "pid", proc.Pid())
		if err := proc.Signal(syscall.SIGKILL); err != nil {
			gs.log.Warn("SIGKILL failed", "pid", proc.Pid(), "err", err)
		}
		gs.recordSignalLocked(syscall.SIGKILL, reason, deadline)
	})
}

// recordSignalLocked records a stop signal sent to the process (each step
// of a termination is an event).
func (gs *gameServer) recordSignalLocked(sig syscall.Signal, reason eventsv1.Reason, deadline time.Time) {
	if gs.state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
		return // ended elsewhere (e.g. HOST_LOST): the process is only cleaned up
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalEventTimeout)
	defer cancel()
	if err := gs.recordLocked(ctx, events.RecordSignal{Signalled: &eventsv1.ProcessSignalled{
		Signal: sig.String(), Reason: reason, Deadline: timestamppb.New(deadline),
	}}); err != nil {
		gs.log.Warn("record signal", "signal", sig.String(), "err", err)
	}
}

// stopReason is the reason of the shutdown in progress.
func (gs *gameServer) stopReason() eventsv1.Reason {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if r := gs.state.GetReason(); r != eventsv1.Reason_REASON_UNSPECIFIED {
		return r
	}
	return eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API
}
