package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// An agent that restarts (kill -9, an upgrade, a crash) supervises none of
// the processes its predecessor started: it holds neither their tokens nor
// their exit status, and its SDK refuses their calls. Left alone, such a
// server stays READY in the views with nobody watching it, and gets
// allocated. So the agent keeps a record of every process it starts in its
// data directory (pid, and the boot and start time of the process, so that
// a reused pid is never mistaken for it). Before it registers its host it
// terminates the servers of those records with AGENT_RESTARTED and the
// evidence, so the fleets replace them; right after, it stops the processes
// that still run. The controller does the same for the servers no
// record speaks for (services/controller: terminateOrphans).

// OrphanStopper is implemented by Processes whose processes can outlive
// their agent (OSProcesses). Without it, the agent keeps no records: its
// processes end with it.
type OrphanStopper interface {
	// Identity tells this process apart from any later one with the same
	// pid (for an OS process, its start time since boot), or "" if the
	// process is not running.
	Identity(pid int) string
	// StopOrphan stops the process with pid if it still has identity id:
	// SIGTERM to its process group, then SIGKILL once grace has passed. It
	// reports whether the process was still running.
	StopOrphan(ctx context.Context, pid int, id string, grace time.Duration) (bool, error)
}

// orphanGrace is how long an orphaned process gets between SIGTERM and SIGKILL.
const orphanGrace = 5 * time.Second

// processRecord is what the agent keeps on disk of a process it started.
type processRecord struct {
	GameServer string    `json:"gameServer"`
	Pid        int       `json:"pid"`
	Identity   string    `json:"identity"`
	Agent      string    `json:"agent"` // incarnation of the agent that started it
	StartTime  time.Time `json:"startTime"`
	// Subject is the subject of the server's events; empty in the records
	// of agents before host subjects (events.Subject of GameServer).
	Subject string `json:"subject,omitempty"`
}

// subject is the subject of the recorded server's events.
func (r processRecord) subject() (string, error) {
	if r.Subject != "" {
		return r.Subject, nil
	}
	return events.Subject(r.GameServer)
}

// processRecords keeps one file per game server in a directory.
type processRecords struct{ dir string }

func (r processRecords) path(gameServer string) string {
	return filepath.Join(r.dir, strings.ReplaceAll(gameServer, "/", "_")+".json")
}

// save writes a record atomically (a file renamed into place).
func (r processRecords) save(rec processRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	tmp := r.path(rec.GameServer) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.path(rec.GameServer))
}

// remove deletes a server's record; a missing one is not an error.
func (r processRecords) remove(gameServer string) error {
	if err := os.Remove(r.path(gameServer)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// load reads every record. A file that does not decode is reported and
// removed: it names no process the agent could prove is its own.
func (r processRecords) load() ([]processRecord, []error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	var out []processRecord
	var bad []error
	for _, e := range entries {
		p := filepath.Join(r.dir, e.Name())
		if !strings.HasSuffix(e.Name(), ".json") {
			_ = os.Remove(p) // a write cut short (.tmp): it was never a record
			continue
		}
		data, err := os.ReadFile(p)
		var rec processRecord
		if err == nil {
			err = json.Unmarshal(data, &rec)
		}
		if err == nil && rec.GameServer == "" {
			err = errors.New("no game server named")
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("process record %s: %w", p, err))
			_ = os.Remove(p)
			continue
		}
		out = append(out, rec)
	}
	return out, bad
}

// recordProcess keeps a started process's record, when its processes can
// outlive the agent. A record that cannot be written is logged: the
// controller still terminates the server if this agent dies, but its
// process would then run on unstopped.
func (gs *gameServer) recordProcess(pid int) {
	stopper, ok := gs.a.opts.Processes.(OrphanStopper)
	if !ok {
		return
	}
	rec := processRecord{GameServer: gs.name, Pid: pid, Identity: stopper.Identity(pid), Agent: gs.a.incarnation, StartTime: gs.a.opts.Clock.Now(), Subject: gs.subject}
	if err := gs.a.records.save(rec); err != nil {
		gs.log.Error("keep the process record", "pid", pid, "err", err)
	}
}

// forgetProcess drops the record of a process that has ended.
func (gs *gameServer) forgetProcess() {
	if _, ok := gs.a.opts.Processes.(OrphanStopper); !ok {
		return
	}
	if err := gs.a.records.remove(gs.name); err != nil {
		gs.log.Error("remove the process record", "err", err)
	}
}

// reclaim handles what an earlier agent of this host left, before the host
// registers again, so that by the time it is ONLINE none of those servers
// is READY: each recorded server is terminated with AGENT_RESTARTED (the
// evidence says whether its process still runs), and the record of a
// process that has ended goes. It returns the records of the processes
// that still run; stopOrphans stops them once the host has registered (a
// game may take its SIGTERM grace to exit). A failure (the stream
// unreachable) is returned and the step retried; it is idempotent.
func (a *Agent) reclaim(ctx context.Context) ([]processRecord, error) {
	stopper, ok := a.opts.Processes.(OrphanStopper)
	if !ok {
		return nil, nil
	}
	recs, bad := a.records.load()
	for _, err := range bad {
		a.log.Error("unreadable process record removed", "err", err)
	}
	var live []processRecord
	for _, rec := range recs {
		running := rec.Identity != "" && stopper.Identity(rec.Pid) == rec.Identity
		if err := a.terminateOrphan(ctx, rec, running); err != nil {
			return nil, err
		}
		if running {
			live = append(live, rec)
			continue
		}
		if err := a.records.remove(rec.GameServer); err != nil {
			return nil, fmt.Errorf("remove process record of %s: %w", rec.GameServer, err)
		}
	}
	return live, nil
}

// stopOrphans stops the processes an earlier agent left running (their
// servers are terminated already) and drops their records. One that cannot
// be stopped keeps its record, for the next agent to try again.
func (a *Agent) stopOrphans(ctx context.Context, orphans []processRecord) {
	stopper, ok := a.opts.Processes.(OrphanStopper)
	if !ok {
		return
	}
	for _, rec := range orphans {
		if _, err := stopper.StopOrphan(ctx, rec.Pid, rec.Identity, orphanGrace); err != nil {
			a.log.Error("stop a process an earlier agent left", "game_server", rec.GameServer, "pid", rec.Pid, "err", err)
			continue
		}
		a.log.Info("process an earlier agent left stopped", "game_server", rec.GameServer, "pid", rec.Pid)
		if err := a.records.remove(rec.GameServer); err != nil {
			a.log.Error("remove the process record", "game_server", rec.GameServer, "err", err)
		}
	}
}

// terminateOrphan records the end of a server an earlier agent ran, decided
// on its history and guarded by its last sequence, unless it has ended
// already (its process exited and was recorded in time, or the controller
// judged it).
func (a *Agent) terminateOrphan(ctx context.Context, rec processRecord, running bool) error {
	detail := fmt.Sprintf("the agent of %s restarted; the process (pid %d) started by agent %s had already ended",
		a.host, rec.Pid, rec.Agent)
	if running {
		detail = fmt.Sprintf("the agent of %s restarted and cannot supervise the process (pid %d) started by agent %s; it was still running and is stopped (SIGTERM, SIGKILL after %s)",
			a.host, rec.Pid, rec.Agent, orphanGrace)
	}
	subject, err := rec.subject()
	if err != nil {
		return err
	}
	var state *eventsv1.GameServerState
	res, err := write.Do(ctx, a.opts.Store, write.Op{
		Name:    rec.GameServer,
		Subject: subject,
		Read: func(ctx context.Context) (uint64, error) {
			// As the stream's leader has it: a replica behind it may not
			// hold the server yet, and a server it does not show would be
			// judged "never ours" and left running in the views.
			hist, err := a.opts.Store.CurrentHistory(ctx, subject, 0)
			if err != nil {
				return 0, fmt.Errorf("read %s: %w", rec.GameServer, err)
			}
			state = nil
			var seq uint64
			for _, e := range hist {
				next, err := events.ApplyGameServer(state, e)
				if err != nil {
					// The projector dead-letters such an event; the server's
					// state is what the others made it.
					a.log.Warn("event of an orphaned server's history skipped", "game_server", rec.GameServer, "sequence", e.Sequence, "type", e.Type, "err", err)
				} else {
					state = next
				}
				seq = e.Sequence
			}
			return seq, nil
		},
		Decide: func(context.Context) ([]proto.Message, error) {
			if state == nil || state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED || state.GetHost() != a.host {
				return nil, nil // ended already, or never ours
			}
			ev := &eventsv1.Evidence{RequestedBy: a.producer, Detail: detail, StartAttempts: state.GetStartAttempts()}
			return events.DecideGameServer(rec.GameServer, state, events.Terminate{Reason: eventsv1.Reason_REASON_AGENT_RESTARTED, Evidence: ev})
		},
		Stamp: func(context.Context) events.Stamp { return a.stamp() },
	}, write.Policy{Attempts: maxRecordAttempts})
	if err != nil {
		return fmt.Errorf("terminate %s: %w", rec.GameServer, err)
	}
	if len(res.Events) == 0 {
		a.log.Info("orphaned process's server needs no termination", "game_server", rec.GameServer,
			"state", events.LifecycleName(state.GetLifecycle()), "pid", rec.Pid, "was_running", running)
		return nil
	}
	a.log.Warn("game server of an earlier agent terminated", "game_server", rec.GameServer, "pid", rec.Pid, "was_running", running)
	return nil
}
