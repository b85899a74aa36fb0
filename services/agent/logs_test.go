package agent_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/hostlogs"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// readLogs reads a server's lines over NATS, as the API does, from the
// start tail gives to the end written so far: "out 3", "err 3", ….
func (h *harness) readLogs(name string, req *agentv1.LogsRequest) ([]string, *agentv1.LogsReply, error) {
	h.t.Helper()
	client := hostlogs.NewClient(h.js.Conn())
	req.GameServer = name
	var lines []string
	for {
		reply, err := client.Read(h.ctx, "h1", req)
		if err != nil {
			return nil, nil, err
		}
		if reply.GetError() != agentv1.LogsReply_ERROR_UNSPECIFIED {
			return nil, reply, nil
		}
		for _, l := range reply.GetLines() {
			lines = append(lines, string(l.GetText()))
		}
		if reply.GetCaughtUp() {
			return lines, reply, nil
		}
		req = &agentv1.LogsRequest{GameServer: name, Stream: req.GetStream(), Cursor: reply.GetNext()}
	}
}

// shellServer is a template that runs script with /bin/sh. The script
// comes through the environment: the agent expands ${VAR}s in arguments,
// and would take the script's own for its.
func shellServer(script string) *eventsv1.GameServerTemplate {
	return &eventsv1.GameServerTemplate{Command: "/bin/sh", Args: []string{"-c", "${SCRIPT}"}, Env: map[string]string{"SCRIPT": script}}
}

// logFiles lists a server's log files and their sizes.
func logFiles(t *testing.T, dir string) (names []string, total int64) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("log file %s has mode %v, want 0600", e.Name(), info.Mode().Perm())
		}
		names = append(names, e.Name())
		total += info.Size()
	}
	return names, total
}

// A real game server's stdout and stderr land in its log files, which
// rotate at their size; retention keeps the host's logs under their limit
// by removing the oldest files, and the files of an ended server once they
// are older than the retention; the API's reads get the lines over NATS.
func TestGameServerOutputLandsInRotatedLogFiles(t *testing.T) {
	logDir := t.TempDir()
	h := newHarnessOpts(t, func(o *agent.Options) {
		o.LogDir = logDir
		o.Logs = agent.LogOptions{FileMaxBytes: 1 << 10, MaxBytes: 8 << 10, RetentionEvery: 20 * time.Millisecond, Retention: 24 * time.Hour}
	})
	name := "fleets/arena/gameServers/gs-chatty"
	// 300 lines of about 48 bytes in the files, 14 KiB, over the 8 KiB
	// limit; then one on stderr.
	h.schedule(name, shellServer(`i=0; while [ $i -lt 300 ]; do echo "out $i"; i=$((i+1)); done; sleep 0.2; echo "err done" >&2; exec sleep 600`))
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)
	dir := filepath.Join(logDir, "logs", "arena", "gs-chatty")
	if started.GetLogPath() != dir {
		t.Fatalf("ProcessStarted names the log directory %q, want %q", started.GetLogPath(), dir)
	}

	wait.Until(t, 20*time.Second, "the last lines readable, and retention down to the limit", func() error {
		var last []string
		for _, stream := range []agentv1.LogLine_Stream{agentv1.LogLine_STDOUT, agentv1.LogLine_STDERR} {
			lines, _, err := h.readLogs(name, &agentv1.LogsRequest{TailLines: 1, Stream: stream})
			if err != nil {
				t.Fatal(err)
			}
			last = append(last, lines...)
		}
		files, total := logFiles(t, dir)
		if got := strings.Join(last, ","); got != "out 299,err done" || total > 8<<10 {
			return fmt.Errorf("last lines %q, want \"out 299,err done\"; files %v, %d bytes, want at most %d", got, files, total, 8<<10)
		}
		return nil
	})
	files, _ := logFiles(t, dir)
	if len(files) < 5 || files[0] == "0000000001.log" {
		t.Fatalf("log files %v: want several, the oldest removed", files)
	}
	for _, d := range []string{filepath.Join(logDir, "logs"), dir} {
		if info, err := os.Stat(d); err != nil || info.Mode().Perm() != 0o700 {
			t.Errorf("log directory %s: %v, want mode 0700", d, err)
		}
	}
	// What is kept is a whole run of the last lines, in order.
	stdout, reply, err := h.readLogs(name, &agentv1.LogsRequest{Stream: agentv1.LogLine_STDOUT})
	if err != nil || reply.GetError() != 0 || len(stdout) == 0 {
		t.Fatalf("read stdout: %v %v %v", err, reply, stdout)
	}
	first, err := strconv.Atoi(strings.TrimPrefix(stdout[0], "out "))
	if err != nil || first == 0 {
		t.Fatalf("stdout kept starts with %q, want a line after the first", stdout[0])
	}
	for i, l := range stdout {
		if l != fmt.Sprintf("out %d", first+i) {
			t.Fatalf("stdout line %d is %q, want %q", i, l, fmt.Sprintf("out %d", first+i))
		}
	}

	// A server that ends: its files stay, readable, until they are older
	// than the retention.
	ended := "fleets/arena/gameServers/gs-brief"
	h.schedule(ended, shellServer("echo goodbye; exit 0"))
	h.waitEvent(ended, "GameServerTerminated")
	var last *agentv1.LogsReply
	wait.For(t, 10*time.Second, "the ended server's log to end", func() bool {
		var lines []string
		if lines, last, err = h.readLogs(ended, &agentv1.LogsRequest{}); err != nil {
			t.Fatal(err)
		}
		return last.GetEnded() && len(lines) > 0 && lines[0] == "goodbye"
	})
	endedDir := filepath.Join(logDir, "logs", "arena", "gs-brief")
	old := time.Now().Add(-25 * time.Hour)
	endedFiles, _ := logFiles(t, endedDir)
	for _, f := range endedFiles {
		if err := os.Chtimes(filepath.Join(endedDir, f), old, old); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "retention to remove the ended server's day-old files", func() bool {
		_, err := os.Stat(endedDir)
		return os.IsNotExist(err)
	})
	_, reply, err = h.readLogs(ended, &agentv1.LogsRequest{})
	if err != nil || reply.GetError() != agentv1.LogsReply_NOT_FOUND {
		t.Fatalf("read of removed logs: %v %v, want NOT_FOUND", reply, err)
	}
}

// A game server's output pipes keep a reader while it runs, its own
// (ProcessSpec.KeepOpen): when the agent that read them is gone, its
// writes go on instead of killing it with SIGPIPE, and the next agent ends
// it with its reason. Without it, a write kills it.
func TestOutputPipesOutliveTheAgent(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep bool
	}{{"kept open", true}, {"not kept", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			spec := agent.ProcessSpec{Command: "/bin/sh", Args: []string{"-c", "while :; do echo tick; done"},
				Env: map[string]string{"PATH": os.Getenv("PATH")}, Stdout: w, Stderr: w}
			if tc.keep {
				spec.KeepOpen = []*os.File{r}
			}
			proc, err := agent.OSProcesses{}.Start(spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proc.Signal(syscall.SIGKILL) })
			// The agent dies: its ends close, and the process writes on.
			w.Close()
			r.Close()
			if !tc.keep {
				end, err := proc.Wait()
				if err != nil || end.Signal != syscall.SIGPIPE.String() {
					t.Fatalf("without a kept reader the process ended with %+v %v, want %s", end, err, syscall.SIGPIPE)
				}
				return
			}
			// Its writes go into the pipe: read them where it keeps it
			// (without a token, the first kept descriptor is 3).
			kept, err := os.Open("/proc/" + strconv.Itoa(proc.Pid()) + "/fd/3")
			if err != nil {
				t.Fatal(err)
			}
			defer kept.Close()
			lines := bufio.NewScanner(kept)
			for range 100_000 { // more than a pipe holds: written after the agent's ends closed
				if !lines.Scan() || lines.Text() != "tick" {
					t.Fatalf("the process's output after its agent was gone: %q %v", lines.Text(), lines.Err())
				}
			}
			if !running(proc.Pid()) {
				t.Fatal("the process did not outlive its agent's pipes")
			}
		})
	}
}
