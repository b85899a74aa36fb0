// Command agonesgameserver is a game server built for Agones' SDK, as a
// studio's server would be: it finds the SDK by AGONES_SDK_GRPC_HOST and
// AGONES_SDK_GRPC_PORT, speaks Agones' gRPC protocol (agones.dev.sdk.SDK),
// calls Ready and holds a Health stream with a ping every
// AGONES_EXAMPLE_HEALTH_EVERY (default 1s). It knows nothing of Tether.
// With AGONES_EXAMPLE_RECONNECT_EVERY set it drops its connection that
// often and connects again, as a client whose connection blinks. It
// exits 0 on SIGTERM. make chaos runs half of its servers on it.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, log); err != nil {
		log.Error("agones game server", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx ends.
func run(ctx context.Context, log *slog.Logger) error {
	every, err := envDuration("AGONES_EXAMPLE_HEALTH_EVERY", time.Second)
	if err != nil {
		return err
	}
	reconnect, err := envDuration("AGONES_EXAMPLE_RECONNECT_EVERY", 0)
	if err != nil {
		return err
	}
	addr := os.Getenv("AGONES_SDK_GRPC_HOST") + ":" + os.Getenv("AGONES_SDK_GRPC_PORT")
	if os.Getenv("AGONES_SDK_GRPC_PORT") == "" {
		return fmt.Errorf("AGONES_SDK_GRPC_PORT is not set: run this under an agent that serves Agones' SDK")
	}
	ready := false
	for ctx.Err() == nil {
		if err := session(ctx, log, addr, every, reconnect, &ready); err != nil && ctx.Err() == nil {
			log.Warn("SDK connection lost; connecting again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	log.Info("stopping")
	return nil
}

// session is one connection to the SDK: Ready once (the first session),
// then health pings every period until ctx ends, the connection fails, or
// reconnect (when set) has passed.
func session(ctx context.Context, log *slog.Logger, addr string, every, reconnect time.Duration, ready *bool) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	sdk := agonessdk.NewSDKClient(conn)
	if !*ready {
		if _, err := sdk.Ready(ctx, &agonessdk.Empty{}); err != nil {
			return fmt.Errorf("ready: %w", err)
		}
		*ready = true
		log.Info("ready")
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	health, err := sdk.Health(sctx)
	if err != nil {
		return fmt.Errorf("health stream: %w", err)
	}
	var end <-chan time.Time
	if reconnect > 0 {
		end = time.After(reconnect)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if err := health.Send(&agonessdk.Empty{}); err != nil {
			return fmt.Errorf("health ping: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-end:
			return nil // drop the connection; the caller connects again
		case <-tick.C:
		}
	}
}

// envDuration reads a duration from the environment; def when unset.
func envDuration(key string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 500ms", key, v)
	}
	return d, nil
}
