package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// running reports whether a process is alive (not gone, not a zombie).
func running(pid int) bool {
	return agent.OSProcesses{}.Identity(pid) != ""
}

// TestRestartedAgentStopsAndTerminatesItsPredecessorsServers: an agent
// dies without stopping its processes (kill -9 leaves them running), and a
// new agent starts on the host with the same data directory. Before it
// registers, the new agent terminates the server with AGENT_RESTARTED and
// the evidence; then its HostRegistered (with a new incarnation) reaches
// the stream, and it stops the process the old one left.
func TestRestartedAgentStopsAndTerminatesItsPredecessorsServers(t *testing.T) {
	logDir := t.TempDir()
	keep := func(o *agent.Options) { o.LogDir, o.KillProcessesOnExit = logDir, false }
	old := newHarnessOpts(t, keep)
	name := "fleets/arena/gameServers/gs-orphan"
	old.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	pid := int(old.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }) // whatever happens below

	// The old agent dies: its work stops, its process runs on, unsupervised.
	old.crash()
	if !running(pid) {
		t.Fatalf("the process %d did not outlive its agent", pid)
	}
	before := len(old.history(name))

	// A new agent on the same host and data directory.
	renewed := old.restart(keep)
	reg := renewed.waitHostRegistered(2)
	// The harness gives each agent a range of 10 game ports.
	if n := reg[1].Data.(*eventsv1.HostRegistered).GetGamePorts(); n != 10 {
		t.Fatalf("the host registered %d game ports, want its range's 10", n)
	}
	wait.For(t, 15*time.Second, "the orphaned process to be stopped", func() bool { return !running(pid) })
	hist := renewed.history(name)
	if len(hist) != before+1 {
		t.Fatalf("%d events after the restart, want 1 (GameServerTerminated): %v", len(hist)-before, hist[before:])
	}
	end := hist[before]
	term, ok := end.Data.(*eventsv1.GameServerTerminated)
	if !ok || term.GetReason() != eventsv1.Reason_REASON_AGENT_RESTARTED || end.Producer != "hosts/h1" ||
		!strings.Contains(term.GetEvidence().GetDetail(), "(pid "+strconv.Itoa(pid)+")") ||
		!strings.Contains(term.GetEvidence().GetDetail(), "was still running and is stopped") {
		t.Fatalf("the orphan ended with %s by %s: %v", end.Type, end.Producer, end.Data)
	}
	if end.Sequence > reg[1].Sequence {
		t.Errorf("the server was terminated (sequence %d) after the host registered again (%d)", end.Sequence, reg[1].Sequence)
	}
	first, second := reg[0].Data.(*eventsv1.HostRegistered), reg[1].Data.(*eventsv1.HostRegistered)
	if first.GetAgentIncarnation() == "" || first.GetAgentIncarnation() == second.GetAgentIncarnation() {
		t.Errorf("incarnations %q then %q, want two different ones", first.GetAgentIncarnation(), second.GetAgentIncarnation())
	}
	// The record goes once StopOrphan has returned, a moment after the
	// process is gone.
	wait.For(t, 10*time.Second, "the process record to be removed", func() bool {
		records, err := os.ReadDir(logDir + "/processes")
		if err != nil {
			t.Fatal(err)
		}
		return len(records) == 0
	})
}

// TestReclaimNeverStopsAProcessThatReusedThePid: a record whose process has
// ended, and whose pid now belongs to another process, stops nothing; the
// server is still terminated, with evidence that its process had ended.
func TestReclaimNeverStopsAProcessThatReusedThePid(t *testing.T) {
	logDir := t.TempDir()
	keep := func(o *agent.Options) { o.LogDir, o.KillProcessesOnExit = logDir, false }
	old := newHarnessOpts(t, keep)
	name := "fleets/arena/gameServers/gs-reused"
	old.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	pid := int(old.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	old.crash()

	// The process ends while no agent runs, and its pid goes to another
	// process. (A pid cannot be reused on demand: the record is pointed at
	// a stranger instead, with an identity that is not the stranger's.)
	path := logDir + "/processes/fleets_arena_gameServers_gs-reused.json"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-old.done; err != nil { // in this process, the old agent's supervisor saw the end
		t.Fatal(err)
	}
	old.done <- nil // for the harness's cleanup
	stranger := exec.Command("/bin/sleep", "600")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if rec["pid"] != float64(pid) || rec["identity"] == "" {
		t.Fatalf("record %s does not hold pid %d and an identity", raw, pid)
	}
	// The stranger started later: the same pid, another start time.
	rec["pid"], rec["identity"] = stranger.Process.Pid, agent.OSProcesses{}.Identity(stranger.Process.Pid)+"-earlier"
	forged, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, forged, 0o600); err != nil {
		t.Fatal(err)
	}

	renewed := old.restart(keep)
	renewed.waitHostRegistered(2)
	end := renewed.history(name)
	term, ok := end[len(end)-1].Data.(*eventsv1.GameServerTerminated)
	if !ok || term.GetReason() != eventsv1.Reason_REASON_AGENT_RESTARTED || !strings.Contains(term.GetEvidence().GetDetail(), "had already ended") {
		t.Fatalf("the server ended with %v", end[len(end)-1].Data)
	}
	if !running(stranger.Process.Pid) {
		t.Fatal("the agent stopped a process that was not its own")
	}
}

// TestOrphanStopperChecksIdentity: StopOrphan stops a process only with
// its identity, SIGKILLs one that ignores SIGTERM, and reports whether it
// ran.
func TestOrphanStopperChecksIdentity(t *testing.T) {
	var p agent.OSProcesses
	cmd := exec.Command("/bin/sh", "-c", "trap '' TERM; sleep 600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }() // as init would reap an orphan
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-reaped })
	pid := cmd.Process.Pid
	id := p.Identity(pid)
	if id == "" {
		t.Fatal("no identity for a running process")
	}
	ctx := context.Background()
	if ran, err := p.StopOrphan(ctx, pid, id+"0", 50*time.Millisecond); ran || err != nil {
		t.Fatalf("StopOrphan with another identity: %v %v, want false, nil", ran, err)
	}
	if !running(pid) {
		t.Fatal("a process with another identity was stopped")
	}
	if ran, err := p.StopOrphan(ctx, pid, id, 100*time.Millisecond); !ran || err != nil {
		t.Fatalf("StopOrphan: %v %v, want true, nil", ran, err)
	}
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Fatal("the process that ignores SIGTERM still runs")
	}
	if ran, err := p.StopOrphan(ctx, pid, id, 50*time.Millisecond); ran || err != nil {
		t.Fatalf("StopOrphan of an ended process: %v %v, want false, nil", ran, err)
	}
}

// TestExitIsLoggedInWords: a process's end is logged as its exit code or
// signal, not as a pointer.
func TestExitIsLoggedInWords(t *testing.T) {
	h := newHarnessOpts(t, func(o *agent.Options) { o.MaxStartAttempts = 1 })
	name := "fleets/arena/gameServers/gs-exit"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sh", Args: []string{"-c", "exit 3"}})
	h.waitEvent(name, "GameServerTerminated")
	wait.For(t, 10*time.Second, "the exit in the log", func() bool {
		return strings.Contains(h.logs.String(), `exit="exit code 3"`)
	})
	if strings.Contains(h.logs.String(), "exit_code=0x") {
		t.Fatalf("an exit code logged as a pointer:\n%s", h.logs.String())
	}
}

// An agent that stops (SIGTERM) ends its game servers' SDK streams as it
// goes, and leaves the processes running: that is no disconnection of
// theirs, and nothing is recorded (found trying a cluster by hand: each
// agent stop logged a failed SdkDisconnected write).
func TestStoppedAgentRecordsNoSDKDisconnect(t *testing.T) {
	keep := func(o *agent.Options) { o.LogDir, o.KillProcessesOnExit = t.TempDir(), false }
	h := newHarnessOpts(t, keep)
	name := "fleets/arena/gameServers/gs-stays"
	h.scheduleSpec(name, &eventsv1.FleetSpec{
		Template: &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}},
		Health:   &eventsv1.HealthPolicy{Disabled: true},
	})
	pid := int(h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	connectSDK(t, h, name)

	h.crash() // the agent's context ends, as on SIGTERM
	err := <-h.done
	h.done <- err // for the harness's cleanup
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	if !running(pid) {
		t.Fatalf("the process %d did not outlive its agent", pid)
	}
	// The stream's end may be handled after Run returned.
	wait.Holds(t, time.Second, "no SdkDisconnected recorded", func() bool { return !h.has(name, "SdkDisconnected") })
	if strings.Contains(h.logs.String(), "record SDK disconnected") {
		t.Errorf("the agent tried to record a disconnection as it stopped:\n%s", h.logs.String())
	}
}

// The SDK's REST API reads nothing from a caller without a game server's
// token (401 before the body), and takes no body larger than an SDK call
// needs (413); a call with the token and a small body is served.
func TestSDKRESTChecksTheTokenBeforeTheBody(t *testing.T) {
	h := newHarnessOpts(t, func(*agent.Options) {})
	name := "fleets/arena/gameServers/gs-rest"
	h.scheduleSpec(name, &eventsv1.FleetSpec{
		Template: &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}},
		Health:   &eventsv1.HealthPolicy{Disabled: true},
	})
	pid := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid()
	token := h.agent.ProcessToken(int(pid))
	post := func(token string, body io.Reader, length int64) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+h.agent.SDKHTTPAddr()+"/v1/sdk/health", body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// 512 MB announced and never sent: answered at once, unread.
	conn, err := net.Dial("tcp", h.agent.SDKHTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /v1/sdk/health HTTP/1.1\r\nHost: sdk\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 512<<20); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to 512 MB announced without a token: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token, 512 MB announced: %d, want 401", resp.StatusCode)
	}
	if code := post("not-a-token", strings.NewReader("{}"), 2); code != http.StatusUnauthorized {
		t.Errorf("an unknown token: %d, want 401", code)
	}
	big := strings.Repeat(" ", 1<<20) + "{}"
	if code := post(token, strings.NewReader(big), int64(len(big))); code != http.StatusRequestEntityTooLarge {
		t.Errorf("1 MB with the token: %d, want 413", code)
	}
	if code := post(token, strings.NewReader("{}"), 2); code != http.StatusOK {
		t.Errorf("a heartbeat with the token: %d, want 200", code)
	}
}
