// Package sdk is the Go SDK for game servers run by Tether. A game server
// process connects to its host agent's local SDK (the address and token are
// in its environment), calls Ready when it can take players, heartbeats in
// the background, and watches for allocation and shutdown notices.
//
// The process is identified by its token, not by its connection: Reconnect
// (or a broken connection) changes nothing about which server it is.
package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// Environment variables the agent sets for every game server process.
const (
	EnvGameServer = "TETHER_GAMESERVER"
	EnvToken      = "TETHER_GAMESERVER_TOKEN"
	EnvSDKAddr    = "TETHER_SDK_ADDR"
	EnvSDKHTTP    = "TETHER_SDK_HTTP"
)

// Options configure a Client.
type Options struct {
	// Addr is the agent's gRPC SDK address; default $TETHER_SDK_ADDR.
	Addr string
	// Token identifies the process; default $TETHER_GAMESERVER_TOKEN.
	Token string
	// HeartbeatInterval is the heartbeat period of StartHeartbeat; default 1s.
	HeartbeatInterval time.Duration
	// Keepalive is the gRPC keepalive ping interval; default 10s.
	Keepalive time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

// Client talks to the local SDK.
type Client struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	conn   *grpc.ClientConn
	client sdkv1.SDKServiceClient
	paused bool
}

// Connect dials the agent's SDK. It does not wait for the connection.
func Connect(opts Options) (*Client, error) {
	if opts.Addr == "" {
		opts.Addr = os.Getenv(EnvSDKAddr)
	}
	if opts.Token == "" {
		opts.Token = os.Getenv(EnvToken)
	}
	if opts.Addr == "" || opts.Token == "" {
		return nil, fmt.Errorf("sdk: no SDK address or token: is %s and %s set by the agent?", EnvSDKAddr, EnvToken)
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = time.Second
	}
	if opts.Keepalive <= 0 {
		opts.Keepalive = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{opts: opts, log: opts.Logger}
	if err := c.dial(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Client) dial() error {
	token := c.opts.Token
	auth := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	conn, err := grpc.NewClient(c.opts.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: c.opts.Keepalive, Timeout: c.opts.Keepalive, PermitWithoutStream: true}),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(auth(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(auth(ctx), desc, cc, method, opts...)
		}),
	)
	if err != nil {
		return fmt.Errorf("sdk: dial %s: %w", c.opts.Addr, err)
	}
	c.mu.Lock()
	old := c.conn
	c.conn, c.client = conn, sdkv1.NewSDKServiceClient(conn)
	c.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

func (c *Client) api() sdkv1.SDKServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.client
}

// Reconnect drops the connection and dials a new one: the agent still
// knows the process by its token.
func (c *Client) Reconnect() error {
	c.log.Info("sdk reconnecting")
	return c.dial()
}

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.Close()
}

// Ready marks the server ready to be allocated.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.api().Ready(ctx, &sdkv1.ReadyRequest{})
	return wrap("ready", err)
}

// Health sends one heartbeat.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.api().Health(ctx, &sdkv1.HealthRequest{})
	return wrap("health", err)
}

// Shutdown asks the agent to stop the server.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.api().Shutdown(ctx, &sdkv1.ShutdownRequest{})
	return wrap("shutdown", err)
}

// GameServer returns the server as the agent knows it.
func (c *Client) GameServer(ctx context.Context) (*sdkv1.GameServer, error) {
	gs, err := c.api().GetGameServer(ctx, &sdkv1.GetGameServerRequest{})
	return gs, wrap("get game server", err)
}

// SetLabel sets a label on the server.
func (c *Client) SetLabel(ctx context.Context, key, value string) error {
	_, err := c.api().SetLabel(ctx, &sdkv1.SetLabelRequest{Key: key, Value: value})
	return wrap("set label", err)
}

// PauseHeartbeat stops heartbeats without closing anything (a hang, for
// tests and the example's misbehaviour); ResumeHeartbeat restarts them.
func (c *Client) PauseHeartbeat() { c.setPaused(true) }

// ResumeHeartbeat restarts heartbeats after PauseHeartbeat.
func (c *Client) ResumeHeartbeat() { c.setPaused(false) }

func (c *Client) setPaused(p bool) {
	c.mu.Lock()
	c.paused = p
	c.mu.Unlock()
}

func (c *Client) isPaused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused
}

// StartHeartbeat keeps a HealthStream open and sends a heartbeat every
// HeartbeatInterval until ctx ends, reopening the stream when it breaks.
// It returns when ctx ends.
func (c *Client) StartHeartbeat(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.heartbeatStream(ctx)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("heartbeat stream broke; reopening", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *Client) heartbeatStream(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api().HealthStream(sctx)
	if err != nil {
		return err
	}
	t := time.NewTicker(c.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		if !c.isPaused() {
			if err := stream.Send(&sdkv1.HealthStreamRequest{}); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			_, err := stream.CloseAndRecv()
			return err
		case <-t.C:
		}
	}
}

// Watch calls fn with the server on every change until ctx ends,
// re-establishing the stream after errors.
func (c *Client) Watch(ctx context.Context, fn func(*sdkv1.GameServer)) error {
	backoff := 100 * time.Millisecond
	for {
		stream, err := c.api().WatchGameServer(ctx, &sdkv1.WatchGameServerRequest{})
		if err == nil {
			for {
				gs, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				backoff = 100 * time.Millisecond
				fn(gs)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("watch broke; reopening", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sdk: %s: %w", what, err)
}
