package sdk_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// buildExample builds the example game server into a temporary directory,
// with the race detector when the tests have it.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gameserver")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/tetherhq/tether/sdk/go/example/gameserver")
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build the example game server: %v\n%s", err, out)
	}
	return bin
}

// freeGamePort returns a loopback port free for both UDP and TCP, as the
// agent hands out.
func freeGamePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		u.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no port free for both UDP and TCP")
	return 0
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// exampleProc is a running example game server.
type exampleProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	port   int
	start  time.Time // just before the process started
	out    *lockedBuffer
	exited chan struct{} // closed when it has exited; then code is set
	code   int
}

// startExample runs the example against fa, as the agent launches it.
func startExample(t *testing.T, bin string, fa *fakeAgent, args []string, env map[string]string) *exampleProc {
	t.Helper()
	p := &exampleProc{t: t, port: freeGamePort(t), out: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = []string{
		"TETHER_GAMESERVER=fleets/arena/gameServers/gs-test",
		"TETHER_GAMESERVER_TOKEN=" + fa.token,
		"TETHER_SDK_ADDR=" + fa.addr,
		"TETHER_SDK_HTTP=http://127.0.0.1:1", // not used by the Go SDK
		"TETHER_PORT_GAME=" + strconv.Itoa(p.port),
		"TETHER_EXAMPLE_LISTEN_HOST=127.0.0.1",
	}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		err := p.cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
			p.code = 0
		case errors.As(err, &exit):
			p.code = exit.ExitCode() // -1 when killed by a signal
		default:
			p.code = -2
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill() // The test is over; the process must go.
			<-p.exited
		}
		if t.Failed() {
			t.Logf("example game server output:\n%s", p.out)
		}
	})
	return p
}

// waitExit waits for the process to exit and returns its code.
func (p *exampleProc) waitExit(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("the example game server did not exit within %s", timeout)
		return 0
	}
}

func (p *exampleProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// waitLog waits for a line of output containing s.
func (p *exampleProc) waitLog(s string) {
	p.t.Helper()
	waitFor(p.t, 20*time.Second, fmt.Sprintf("%q in the output", s), func() bool { return strings.Contains(p.out.String(), s) })
}

// echoUDP checks that a datagram comes back.
func (p *exampleProc) echoUDP() {
	p.t.Helper()
	conn, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)))
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 64)
	waitFor(p.t, 10*time.Second, "a UDP echo", func() bool {
		if _, err := conn.Write([]byte("ping")); err != nil {
			return false
		}
		_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := conn.Read(buf)
		return err == nil && string(buf[:n]) == "ping"
	})
}

// echoTCP checks that a line comes back.
func (p *exampleProc) echoTCP() {
	p.t.Helper()
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)), 10*time.Second)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(conn, "hello"); err != nil {
		p.t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "hello\n" {
		p.t.Fatalf("TCP echo: %q, %v", line, err)
	}
}

// waitReady waits for the Ready call, with the process token.
func waitReady(t *testing.T, fa *fakeAgent) call {
	t.Helper()
	waitFor(t, 20*time.Second, "Ready", func() bool { return len(fa.callsTo("Ready")) > 0 })
	c := fa.callsTo("Ready")[0]
	if c.auth != "Bearer "+testToken {
		t.Fatalf("Ready with authorization %q", c.auth)
	}
	return c
}

// peers counts the connections calls came from.
func peers(fa *fakeAgent) int {
	calls, _, _, _, _ := fa.snapshot()
	seen := map[string]bool{}
	for _, c := range calls {
		seen[c.peer] = true
	}
	return len(seen)
}

func TestExampleGameServer(t *testing.T) {
	bin := buildExample(t)
	fast := []string{"--heartbeat-interval", "20ms"}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		run      func(t *testing.T, p *exampleProc, fa *fakeAgent)
		wantCode int
	}{{
		name: "serves, heartbeats and stops on a shutdown notice",
		args: fast,
		run: func(t *testing.T, p *exampleProc, fa *fakeAgent) {
			waitReady(t, fa)
			waitFor(t, 20*time.Second, "heartbeats", func() bool { return fa.heartbeatCount() >= 3 })
			for _, s := range fa.callsTo("HealthStream") {
				if s.auth != "Bearer "+testToken {
					t.Fatalf("heartbeat stream with authorization %q", s.auth)
				}
			}
			p.echoUDP()
			p.echoTCP()
			fa.update(func(gs *sdkv1.GameServer) {
				gs.State, gs.Shutdown = "SHUTTING_DOWN", shutdownNotice(30*time.Second, "FLEET_SCALED_DOWN")
			})
		},
	}, {
		name:     "crash before ready",
		env:      map[string]string{"TETHER_EXAMPLE_CRASH_BEFORE_READY": "true"},
		wantCode: 3,
		run: func(t *testing.T, p *exampleProc, fa *fakeAgent) {
			p.waitExit(20 * time.Second)
			if calls, _, _, _, _ := fa.snapshot(); len(calls) != 0 {
				t.Fatalf("it crashed before Ready but called %v", calls)
			}
		},
	}, {
		name: "ready after a delay",
		args: []string{"--ready-delay", "300ms"},
		run: func(t *testing.T, p *exampleProc, fa *fakeAgent) {
			ready := waitReady(t, fa)
			if d := ready.at.Sub(p.start); d < 300*time.Millisecond {
				t.Fatalf("Ready %s after start, want at least 300ms", d)
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name:     "exits on its own",
		args:     []string{"--exit-after", "200ms"},
		env:      map[string]string{"TETHER_EXAMPLE_EXIT_CODE": "7"},
		wantCode: 7,
	}, {
		name: "ignores SIGTERM, not the notice",
		args: append([]string{"--ignore-sigterm"}, fast...),
		run: func(t *testing.T, p *exampleProc, fa *fakeAgent) {
			waitReady(t, fa)
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.waitLog("SIGTERM ignored")
			if !p.running() {
				t.Fatal("it exited on SIGTERM")
			}
			p.echoUDP()
			fa.update(func(gs *sdkv1.GameServer) { gs.Shutdown = shutdownNotice(30*time.Second, "FLEET_SCALED_DOWN") })
		},
	}, {
		name: "ignores the notice, not SIGTERM",
		args: append([]string{"--ignore-shutdown-notice"}, fast...),
		run: func(t *testing.T, p *exampleProc, fa *fakeAgent) {
			waitReady(t, fa)
			fa.update(func(gs *sdkv1.GameServer) { gs.Shutdown = shutdownNotice(30*time.Second, "FLEET_SCALED_DOWN") })
			p.waitLog("shutdown notice ignored")
			if !p.running() {
				t.Fatal("it exited on the notice")
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "stops heartbeating but keeps running",
		args: []string{"--heartbeat-interval", "20ms", "--stop-heartbeat-after", "300ms"},
		run: func(t *testing.T, p *exampleProc, fa *fakeAgent) {
			waitReady(t, fa)
			waitFor(t, 20*time.Second, "heartbeats", func() bool { return fa.heartbeatCount() >= 3 })
			p.waitLog("heartbeats stopped")
			var n int
			holds(100*time.Millisecond, func() bool { n = fa.heartbeatCount(); return true }) // one in flight may land
			if !holds(300*time.Millisecond, func() bool { return fa.heartbeatCount() == n }) {
				t.Fatalf("heartbeats went on: %d, then %d", n, fa.heartbeatCount())
			}
			if _, _, _, _, open := fa.snapshot(); open != 1 {
				t.Fatalf("%d heartbeat streams open, want the silent one", open)
			}
			p.echoUDP()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "drops its SDK connection again and again",
		args: []string{"--heartbeat-interval", "20ms", "--reconnect-every", "150ms"},
		run: func(t *testing.T, p *exampleProc, fa *fakeAgent) {
			waitReady(t, fa)
			waitFor(t, 20*time.Second, "calls from 4 connections", func() bool { return peers(fa) >= 4 })
			beats := fa.heartbeatCount()
			waitFor(t, 20*time.Second, "heartbeats going on", func() bool { return fa.heartbeatCount() >= beats+5 })
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name:     "bad value in the environment",
		env:      map[string]string{"TETHER_EXAMPLE_READY_DELAY": "soon"},
		wantCode: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fa := startFakeAgent(t)
			p := startExample(t, bin, fa, tt.args, tt.env)
			if tt.run != nil {
				tt.run(t, p, fa)
			}
			if code := p.waitExit(20 * time.Second); code != tt.wantCode {
				t.Fatalf("exit code %d, want %d", code, tt.wantCode)
			}
		})
	}
}
