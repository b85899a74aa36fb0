package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	sdk "github.com/tetherhq/tether/sdk/go"
)

// connect connects a client to fa with a short heartbeat interval.
func connect(t *testing.T, fa *fakeAgent, opts sdk.Options) *sdk.Client {
	t.Helper()
	if opts.Addr == "" {
		opts.Addr = fa.addr
	}
	if opts.Token == "" {
		opts.Token = fa.token
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 10 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := sdk.Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

func shutdownNotice(in time.Duration, reason string) *sdkv1.ShutdownNotice {
	return &sdkv1.ShutdownNotice{Deadline: timestamppb.New(time.Now().Add(in)), Reason: reason}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestConnectOptions(t *testing.T) {
	fa := startFakeAgent(t)
	dead := deadAddr(t)
	tests := []struct {
		name    string
		env     map[string]string
		opts    sdk.Options
		timeout time.Duration
		wantErr string // "" for success
		wantIs  error
	}{
		{name: "from the environment", env: map[string]string{sdk.EnvSDKAddr: fa.addr, sdk.EnvToken: fa.token}},
		{name: "options win over the environment", env: map[string]string{sdk.EnvSDKAddr: dead, sdk.EnvToken: "other"},
			opts: sdk.Options{Addr: fa.addr, Token: fa.token}},
		{name: "no address", env: map[string]string{sdk.EnvToken: fa.token}, wantErr: "no SDK address"},
		{name: "no token", opts: sdk.Options{Addr: fa.addr}, wantErr: "no game server token"},
		{name: "token that cannot be a header", opts: sdk.Options{Addr: fa.addr, Token: "a\nb"}, wantErr: "cannot go in a gRPC header"},
		{name: "negative heartbeat interval", opts: sdk.Options{Addr: fa.addr, Token: fa.token, HeartbeatInterval: -time.Second},
			wantErr: "negative HeartbeatInterval"},
		{name: "nothing listening", opts: sdk.Options{Addr: dead, Token: fa.token}, timeout: 300 * time.Millisecond,
			wantErr: "sdk: connect to", wantIs: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{sdk.EnvSDKAddr, sdk.EnvToken} {
				t.Setenv(k, tt.env[k])
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			c, err := sdk.Connect(ctx, tt.opts)
			if tt.wantErr != "" {
				if err == nil {
					c.Close()
					t.Fatalf("Connect succeeded, want an error with %q", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q, want it to contain %q", err, tt.wantErr)
				}
				if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
					t.Fatalf("error %v is not %v", err, tt.wantIs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Ready(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCallsCarryToken(t *testing.T) {
	tests := []struct {
		method string
		call   func(context.Context, *sdk.Client) error
		check  func(*testing.T, *sdkv1.GameServer)
	}{
		{method: "Ready", call: func(ctx context.Context, c *sdk.Client) error { return c.Ready(ctx) },
			check: func(t *testing.T, gs *sdkv1.GameServer) {
				if gs.GetState() != "READY" {
					t.Errorf("state %q after Ready", gs.GetState())
				}
			}},
		{method: "Health", call: func(ctx context.Context, c *sdk.Client) error { return c.Health(ctx) }},
		{method: "Shutdown", call: func(ctx context.Context, c *sdk.Client) error { return c.Shutdown(ctx) },
			check: func(t *testing.T, gs *sdkv1.GameServer) {
				if gs.GetShutdown() == nil {
					t.Error("no shutdown notice after Shutdown")
				}
			}},
		{method: "GetGameServer", call: func(ctx context.Context, c *sdk.Client) error {
			gs, err := c.GameServer(ctx)
			if err == nil && gs.GetName() != "fleets/arena/gameServers/gs-test" {
				err = errors.New("wrong game server " + gs.GetName())
			}
			return err
		}},
		{method: "SetLabel", call: func(ctx context.Context, c *sdk.Client) error { return c.SetLabel(ctx, "map", "dust") },
			check: func(t *testing.T, gs *sdkv1.GameServer) {
				if gs.GetLabels()["map"] != "dust" {
					t.Errorf("labels %v after SetLabel", gs.GetLabels())
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			t.Parallel()
			fa := startFakeAgent(t)
			c := connect(t, fa, sdk.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tt.call(ctx, c); err != nil {
				t.Fatal(err)
			}
			calls := fa.callsTo(tt.method)
			if len(calls) != 1 {
				t.Fatalf("%d %s calls, want 1", len(calls), tt.method)
			}
			if want := "Bearer " + testToken; calls[0].auth != want {
				t.Fatalf("authorization %q, want %q", calls[0].auth, want)
			}
			if tt.check != nil {
				gs, err := c.GameServer(ctx)
				if err != nil {
					t.Fatal(err)
				}
				tt.check(t, gs)
			}
		})
	}
}

func TestWrongTokenIsRejected(t *testing.T) {
	fa := startFakeAgent(t)
	c := connect(t, fa, sdk.Options{Token: "not-" + testToken})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Ready(ctx)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Ready with a wrong token: %v, want Unauthenticated", err)
	}
	if !strings.HasPrefix(err.Error(), "sdk: ready: ") {
		t.Fatalf("error %q does not name the call", err)
	}
}

func TestHeartbeatReopensBrokenStream(t *testing.T) {
	fa := startFakeAgent(t)
	fa.mu.Lock()
	fa.closeHealthAfter = 3
	fa.mu.Unlock()
	c := connect(t, fa, sdk.Options{})
	stop := c.StartHeartbeat(context.Background())
	defer stop()
	waitFor(t, 10*time.Second, "heartbeats on 3 streams", func() bool {
		_, beats, streams, _, _ := fa.snapshot()
		return streams >= 3 && beats >= 9
	})
	for _, s := range fa.callsTo("HealthStream") {
		if s.auth != "Bearer "+testToken {
			t.Fatalf("heartbeat stream opened with authorization %q", s.auth)
		}
	}
}

func TestHeartbeatPauseResumeStop(t *testing.T) {
	fa := startFakeAgent(t)
	c := connect(t, fa, sdk.Options{})
	stop := c.StartHeartbeat(context.Background())
	waitFor(t, 10*time.Second, "heartbeats", func() bool { return fa.heartbeatCount() >= 3 })

	c.PauseHeartbeat()
	// A heartbeat already sent may still arrive; after that, none.
	var paused int
	holds(50*time.Millisecond, func() bool { paused = fa.heartbeatCount(); return true })
	if !holds(200*time.Millisecond, func() bool { return fa.heartbeatCount() == paused }) {
		t.Fatalf("heartbeats went on while paused: %d, then %d", paused, fa.heartbeatCount())
	}
	if _, _, streams, _, open := fa.snapshot(); streams != 1 || open != 1 {
		t.Fatalf("%d streams opened, %d open while paused; want the one stream kept open", streams, open)
	}

	c.ResumeHeartbeat()
	waitFor(t, 10*time.Second, "heartbeats after resume", func() bool { return fa.heartbeatCount() >= paused+3 })

	stop()
	stop() // again: nothing
	waitFor(t, 10*time.Second, "the stream closed", func() bool {
		_, _, _, clean, open := fa.snapshot()
		return clean == 1 && open == 0
	})
}

func TestHeartbeatEndsWithContext(t *testing.T) {
	fa := startFakeAgent(t)
	c := connect(t, fa, sdk.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	stop := c.StartHeartbeat(ctx)
	defer stop()
	waitFor(t, 10*time.Second, "heartbeats", func() bool { return fa.heartbeatCount() >= 1 })
	cancel()
	waitFor(t, 10*time.Second, "the stream closed cleanly", func() bool {
		_, _, _, clean, open := fa.snapshot()
		return clean == 1 && open == 0
	})
}

func TestWatch(t *testing.T) {
	fa := startFakeAgent(t)
	c := connect(t, fa, sdk.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan *sdkv1.GameServer, 100)
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, func(gs *sdkv1.GameServer) { got <- gs }) }()

	// next waits for an update that satisfies cond.
	next := func(what string, cond func(*sdkv1.GameServer) bool) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case gs := <-got:
				if cond(gs) {
					return
				}
			case err := <-done:
				t.Fatalf("Watch returned while waiting for %s: %v", what, err)
			case <-timeout:
				t.Fatalf("no update with %s", what)
			}
		}
	}
	next("the first state", func(gs *sdkv1.GameServer) bool { return gs.GetState() == "STARTING" })
	fa.update(func(gs *sdkv1.GameServer) { gs.State, gs.GameSession = "ALLOCATED", "gameSessions/gsess-1" })
	next("the allocation", func(gs *sdkv1.GameServer) bool { return gs.GetGameSession() == "gameSessions/gsess-1" })

	// The agent ends the stream: Watch opens another one.
	fa.endWatches()
	waitFor(t, 10*time.Second, "a second watch", func() bool { return len(fa.callsTo("WatchGameServer")) >= 2 })
	fa.update(func(gs *sdkv1.GameServer) { gs.Shutdown = shutdownNotice(time.Minute, "FLEET_SCALED_DOWN") })
	next("the shutdown notice", func(gs *sdkv1.GameServer) bool { return gs.GetShutdown().GetReason() == "FLEET_SCALED_DOWN" })

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
	for _, w := range fa.callsTo("WatchGameServer") {
		if w.auth != "Bearer "+testToken {
			t.Fatalf("watch opened with authorization %q", w.auth)
		}
	}
}

func TestReconnect(t *testing.T) {
	fa := startFakeAgent(t)
	c := connect(t, fa, sdk.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stop := c.StartHeartbeat(ctx)
	defer stop()
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a heartbeat", func() bool { return fa.heartbeatCount() >= 1 })
	first := fa.callsTo("Ready")[0].peer

	if err := c.Reconnect(); err != nil {
		t.Fatal(err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if second := fa.callsTo("Health")[0].peer; second == first {
		t.Fatalf("Health after Reconnect came from %s, the old connection", second)
	}
	waitFor(t, 10*time.Second, "the heartbeat stream reopened on the new connection", func() bool {
		streams := fa.callsTo("HealthStream")
		return len(streams) >= 2 && streams[len(streams)-1].peer != first
	})
	beats := fa.heartbeatCount()
	waitFor(t, 10*time.Second, "heartbeats on the new stream", func() bool { return fa.heartbeatCount() >= beats+3 })
	for _, c := range fa.callsTo("HealthStream") {
		if c.auth != "Bearer "+testToken {
			t.Fatalf("stream reopened with authorization %q", c.auth)
		}
	}
}

// A break that Reconnect causes is not a failure: however often the
// connection is dropped, the streams reopen at once rather than after a
// growing delay (up to 2s).
func TestRepeatedReconnectsReopenAtOnce(t *testing.T) {
	fa := startFakeAgent(t)
	c := connect(t, fa, sdk.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := c.StartHeartbeat(ctx)
	defer stop()
	go c.Watch(ctx, func(*sdkv1.GameServer) {})
	waitFor(t, 10*time.Second, "a heartbeat stream and a watch", func() bool {
		return len(fa.callsTo("HealthStream")) == 1 && len(fa.callsTo("WatchGameServer")) == 1
	})
	for i := 2; i <= 10; i++ {
		if err := c.Reconnect(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Second, fmt.Sprintf("stream %d reopened", i), func() bool {
			return len(fa.callsTo("HealthStream")) >= i && len(fa.callsTo("WatchGameServer")) >= i
		})
	}
}

func TestClose(t *testing.T) {
	fa := startFakeAgent(t)
	c := connect(t, fa, sdk.Options{})
	stop := c.StartHeartbeat(context.Background())
	defer stop()
	watched := make(chan error, 1)
	go func() { watched <- c.Watch(context.Background(), func(*sdkv1.GameServer) {}) }()
	waitFor(t, 10*time.Second, "a heartbeat and a watch", func() bool {
		return fa.heartbeatCount() >= 1 && len(fa.callsTo("WatchGameServer")) == 1
	})

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, clean, _ := fa.snapshot(); clean != 1 {
		t.Fatalf("after Close: %d clean closes of the heartbeat stream, want 1", clean)
	}
	select {
	case err := <-watched:
		if !errors.Is(err, sdk.ErrClosed) {
			t.Fatalf("Watch returned %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after Close")
	}
	ctx := context.Background()
	for name, err := range map[string]error{
		"Ready": c.Ready(ctx), "Health": c.Health(ctx), "Reconnect": c.Reconnect(),
		"Watch": c.Watch(ctx, func(*sdkv1.GameServer) {}),
	} {
		if !errors.Is(err, sdk.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	c.StartHeartbeat(ctx)() // a no-op that returns at once
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestPort(t *testing.T) {
	tests := []struct {
		name, port, env, value string
		want                   int
		wantErr                bool
	}{
		{name: "simple", port: "game", env: "TETHER_PORT_GAME", value: "7001", want: 7001},
		{name: "dashes", port: "game-udp", env: "TETHER_PORT_GAME_UDP", value: "7002", want: 7002},
		{name: "unset", port: "query", env: "TETHER_PORT_QUERY", wantErr: true},
		{name: "not a number", port: "game", env: "TETHER_PORT_GAME", value: "x", wantErr: true},
		{name: "out of range", port: "game", env: "TETHER_PORT_GAME", value: "70000", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sdk.PortEnv(tt.port); got != tt.env {
				t.Fatalf("PortEnv(%q) = %q, want %q", tt.port, got, tt.env)
			}
			if tt.value != "" {
				t.Setenv(tt.env, tt.value)
			}
			got, err := sdk.Port(tt.port)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Port(%q) = %d, %v; want %d, error %t", tt.port, got, err, tt.want, tt.wantErr)
			}
		})
	}
}
