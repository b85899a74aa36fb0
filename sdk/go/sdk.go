// Package sdk is the Go SDK for game servers run by Tether.
//
// A game server process connects to its host agent's local SDK (the agent
// puts the address in its environment and hands it the process token on a
// file descriptor; see Token), calls Ready
// when it can take players, heartbeats in the background, and watches its
// GameServer for an allocation or a shutdown notice:
//
//	c, err := sdk.Connect(ctx, sdk.Options{Logger: log})
//	if err != nil { ... }
//	defer c.Close()
//	stop := c.StartHeartbeat(ctx)
//	defer stop()
//	go c.Watch(ctx, func(gs *sdkv1.GameServer) { ... })
//	err = c.Ready(ctx)
//
// The process is identified by its token, which every call carries as
// "authorization: Bearer <token>", never by its connection: Reconnect, or a
// connection that breaks and is dialled again, changes nothing about which
// server the agent thinks it is (docs/architecture.md, "The failures it is
// built against", 1).
package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// ErrClosed is returned by calls on a Client after Close, and by Watch when
// the Client is closed under it.
var ErrClosed = errors.New("sdk: client closed")

// Defaults of Options.
const (
	// DefaultHeartbeatInterval is the default Options.HeartbeatInterval:
	// well below the 5 s default health period of a fleet.
	DefaultHeartbeatInterval = time.Second
	// DefaultKeepalive is the default Options.Keepalive: well below the
	// idle timeouts of load balancers and NAT tables (docs/architecture.md,
	// "The failures it is built against", 2).
	DefaultKeepalive = 10 * time.Second
)

// Options configure a Client. The zero value is usable in a process the
// agent launched: the address and token come from its environment.
type Options struct {
	// Addr is the agent's gRPC SDK address, host:port, plaintext; default
	// $TETHER_SDK_ADDR.
	Addr string
	// Token identifies the process to the agent; default what Token
	// returns: read from the descriptor $TETHER_GAMESERVER_TOKEN_FD names,
	// or else $TETHER_GAMESERVER_TOKEN.
	Token string
	// HeartbeatInterval is how often StartHeartbeat sends a heartbeat;
	// default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// Keepalive is the interval of gRPC keepalive pings, sent even when no
	// call or stream is open; a ping unanswered for as long again closes the
	// connection. Default DefaultKeepalive; grpc-go raises values below 10 s
	// to 10 s.
	Keepalive time.Duration
	// Logger receives the client's logs; default discards them.
	Logger *slog.Logger
}

// setDefaults fills the zero fields of o. It fails if the token is to come
// from the agent's descriptor and that cannot be read.
func (o *Options) setDefaults() error {
	if o.Addr == "" {
		o.Addr = os.Getenv(EnvSDKAddr)
	}
	if o.Token == "" {
		token, err := Token()
		if err != nil {
			return err
		}
		o.Token = token
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.Keepalive == 0 {
		o.Keepalive = DefaultKeepalive
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Validate reports whether o can be used as it is (Connect applies the
// defaults first).
func (o Options) Validate() error {
	if o.Addr == "" {
		return fmt.Errorf("sdk: no SDK address: set Options.Addr or $%s", EnvSDKAddr)
	}
	if o.Token == "" {
		return fmt.Errorf("sdk: no game server token: set Options.Token, or start the process from a Tether agent ($%s or $%s)", EnvTokenFD, EnvToken)
	}
	for _, b := range []byte(o.Token) {
		if b <= ' ' || b > '~' {
			return fmt.Errorf("sdk: the game server token has a character that cannot go in a gRPC header (%q)", b)
		}
	}
	if o.HeartbeatInterval < 0 {
		return fmt.Errorf("sdk: negative HeartbeatInterval %s", o.HeartbeatInterval)
	}
	if o.Keepalive < 0 {
		return fmt.Errorf("sdk: negative Keepalive %s", o.Keepalive)
	}
	return nil
}

// Client talks to the agent's local SDK over gRPC. Its methods are safe for
// concurrent use.
type Client struct {
	opts  Options
	log   *slog.Logger
	pause pauser

	// life ends when the Client is closed; it ends heartbeats and watches.
	life context.Context
	kill context.CancelFunc
	// beats counts running heartbeat loops, which Close waits for.
	beats sync.WaitGroup

	mu     sync.Mutex
	conn   *grpc.ClientConn
	api    sdkv1.SDKServiceClient
	conns  int // connections dialled so far, for logs
	closed bool
}

// Connect applies the defaults to opts, dials the agent's SDK and waits
// until the connection is up or ctx ends. Later calls wait for the
// connection (gRPC wait-for-ready) as long as their context allows, so a
// connection that blinks does not fail them.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	life, kill := context.WithCancel(context.Background())
	c := &Client{opts: opts, log: opts.Logger, life: life, kill: kill}
	c.pause.changed = make(chan struct{})
	conn, err := c.dial()
	if err != nil {
		kill()
		return nil, err
	}
	if err := waitConnected(ctx, conn); err != nil {
		kill()
		_ = conn.Close() // The connection is unusable; its close error adds nothing.
		return nil, fmt.Errorf("sdk: connect to %s: %w", opts.Addr, err)
	}
	return c, nil
}

// dial creates a connection and makes it the one calls use.
func (c *Client) dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(c.opts.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(c.opts.Token)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: c.opts.Keepalive, Timeout: c.opts.Keepalive, PermitWithoutStream: true,
		}),
		grpc.WithUserAgent("tether-sdk-go"),
	)
	if err != nil {
		return nil, fmt.Errorf("sdk: dial %s: %w", c.opts.Addr, err)
	}
	conn.Connect() // Dial now, not at the first call.
	c.conn, c.api = conn, sdkv1.NewSDKServiceClient(conn)
	c.conns++
	c.log.Info("sdk connection dialled", "addr", c.opts.Addr, "connection", c.conns)
	return conn, nil
}

// waitConnected waits until conn is ready or ctx ends.
func waitConnected(ctx context.Context, conn *grpc.ClientConn) error {
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return errors.New("connection closed")
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connection still %s: %w", s, ctx.Err())
		}
	}
}

// bearer is the per-call credential that carries the process token. It is
// sent over plaintext: the SDK listens on loopback only.
type bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (bearer) RequireTransportSecurity() bool { return false }

// client returns the stub of the current connection.
func (c *Client) client() (sdkv1.SDKServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	return c.api, nil
}

// Reconnect closes the connection and dials a new one, as if the control
// connection had dropped. Calls in flight on the old connection fail;
// heartbeats and watches reopen their streams on the new one. The agent
// still knows the process by its token. Reconnect does not wait for the new
// connection: the next call does.
func (c *Client) Reconnect() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	old := c.conn
	_, err := c.dial()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := old.Close(); err != nil {
		return fmt.Errorf("sdk: close old connection: %w", err)
	}
	return nil
}

// Close ends the heartbeats and watches of the Client (a heartbeat stream
// is closed cleanly) and closes its connection. Later calls return
// ErrClosed; closing again does nothing.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conn := c.conn
	c.mu.Unlock()
	c.kill()
	c.beats.Wait()
	if err := conn.Close(); err != nil {
		return fmt.Errorf("sdk: close: %w", err)
	}
	return nil
}

// Ready marks the server ready to be allocated; calling it again after an
// allocation returns the server to READY. The first call must come within
// the fleet's ready timeout of the process's start (health
// ready_timeout_seconds, by default 300 s or the health contract's initial
// delay and threshold × period if longer), or the agent makes the server
// UNHEALTHY (READY_TIMEOUT) and its fleet replaces it.
func (c *Client) Ready(ctx context.Context) error {
	api, err := c.client()
	if err == nil {
		_, err = api.Ready(ctx, &sdkv1.ReadyRequest{}, grpc.WaitForReady(true))
	}
	return wrap("ready", err)
}

// Health sends one heartbeat as a unary call (StartHeartbeat is the usual
// way to heartbeat).
func (c *Client) Health(ctx context.Context) error {
	api, err := c.client()
	if err == nil {
		_, err = api.Health(ctx, &sdkv1.HealthRequest{}, grpc.WaitForReady(true))
	}
	return wrap("health", err)
}

// Shutdown asks the agent to shut the server down; the agent then sends a
// shutdown notice (see Watch) and SIGTERM.
func (c *Client) Shutdown(ctx context.Context) error {
	api, err := c.client()
	if err == nil {
		_, err = api.Shutdown(ctx, &sdkv1.ShutdownRequest{}, grpc.WaitForReady(true))
	}
	return wrap("shutdown", err)
}

// GameServer returns the server as the agent knows it.
func (c *Client) GameServer(ctx context.Context) (*sdkv1.GameServer, error) {
	api, err := c.client()
	if err != nil {
		return nil, wrap("get game server", err)
	}
	gs, err := api.GetGameServer(ctx, &sdkv1.GetGameServerRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return nil, wrap("get game server", err)
	}
	return gs, nil
}

// SetLabel sets the label key to value on the server.
func (c *Client) SetLabel(ctx context.Context, key, value string) error {
	api, err := c.client()
	if err == nil {
		_, err = api.SetLabel(ctx, &sdkv1.SetLabelRequest{Key: key, Value: value}, grpc.WaitForReady(true))
	}
	return wrap("set label "+key, err)
}

// wrap names the call that failed; ErrClosed is returned as it is.
func wrap(what string, err error) error {
	if err == nil || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("sdk: %s: %w", what, err)
}
