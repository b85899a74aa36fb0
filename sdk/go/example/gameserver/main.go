// Command gameserver is Tether's example game server: a UDP (and TCP line)
// echo server on $TETHER_PORT_GAME that uses the Go SDK, and that can be told
// to misbehave, for tests, the simulator and the demo.
//
// Every flag can also be set through the environment as
// TETHER_EXAMPLE_<FLAG> (upper case, dashes as underscores), so a fleet
// template can choose a misbehaviour with env.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	sdk "github.com/tetherhq/tether/sdk/go"
)

// config is the example's behaviour.
type config struct {
	readyDelay         time.Duration
	exitAfter          time.Duration
	exitCode           int
	crashBeforeReady   bool
	stopHeartbeatAfter time.Duration
	reconnectEvery     time.Duration
	ignoreSigterm      bool
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil)).With("game_server", os.Getenv(sdk.EnvGameServer))
	cfg, err := parse(os.Args[1:])
	if err != nil {
		log.Error("bad flags", "err", err)
		os.Exit(2)
	}
	os.Exit(run(log, cfg))
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("gameserver", flag.ContinueOnError)
	fs.DurationVar(&c.readyDelay, "ready-delay", 0, "wait this long before calling Ready")
	fs.DurationVar(&c.exitAfter, "exit-after", 0, "exit on its own after this long (0: never)")
	fs.IntVar(&c.exitCode, "exit-code", 0, "exit code for --exit-after")
	fs.BoolVar(&c.crashBeforeReady, "crash-before-ready", false, "exit 3 at once, before Ready")
	fs.DurationVar(&c.stopHeartbeatAfter, "stop-heartbeat-after", 0, "stop heartbeating after this long but keep running (a hang)")
	fs.DurationVar(&c.reconnectEvery, "reconnect-every", 0, "drop and re-open the SDK connection this often")
	fs.BoolVar(&c.ignoreSigterm, "ignore-sigterm", false, "ignore SIGTERM (the agent then kills at the deadline)")
	fs.VisitAll(func(f *flag.Flag) {
		env := "TETHER_EXAMPLE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			_ = f.Value.Set(v) // a bad env value is caught when flags parse below fail the same way
			f.DefValue = v
		}
	})
	return c, fs.Parse(args)
}

func run(log *slog.Logger, cfg config) int {
	if cfg.crashBeforeReady {
		log.Error("crashing before Ready, as asked")
		return 3
	}
	port := os.Getenv("TETHER_PORT_GAME")
	if port == "" {
		log.Error("TETHER_PORT_GAME is not set")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sigterm := make(chan os.Signal, 1)
	signal.Notify(sigterm, syscall.SIGTERM)

	udp, err := net.ListenPacket("udp", "0.0.0.0:"+port)
	if err != nil {
		log.Error("listen UDP", "err", err)
		return 1
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp", "0.0.0.0:"+port)
	if err != nil {
		log.Error("listen TCP", "err", err)
		return 1
	}
	defer tcp.Close()
	go echoUDP(udp)
	go echoTCP(tcp)

	client, err := sdk.Connect(sdk.Options{Logger: log})
	if err != nil {
		log.Error("connect SDK", "err", err)
		return 1
	}
	defer client.Close()
	go client.StartHeartbeat(ctx)
	shutdown := make(chan *sdkv1.ShutdownNotice, 1)
	go func() {
		if err := client.Watch(ctx, func(gs *sdkv1.GameServer) {
			if gs.GetShutdown() != nil {
				select {
				case shutdown <- gs.GetShutdown():
				default:
				}
			}
		}); err != nil {
			log.Warn("watch ended", "err", err)
		}
	}()

	select {
	case <-ctx.Done():
		return 0
	case <-time.After(cfg.readyDelay):
	}
	if err := client.Ready(ctx); err != nil {
		log.Error("ready", "err", err)
		return 1
	}
	log.Info("ready", "port", port)

	var exitTimer, hangTimer, reconnect <-chan time.Time
	if cfg.exitAfter > 0 {
		exitTimer = time.After(cfg.exitAfter)
	}
	if cfg.stopHeartbeatAfter > 0 {
		hangTimer = time.After(cfg.stopHeartbeatAfter)
	}
	if cfg.reconnectEvery > 0 {
		t := time.NewTicker(cfg.reconnectEvery)
		defer t.Stop()
		reconnect = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return 0
		case n := <-shutdown:
			log.Info("shutdown notice: exiting", "reason", n.GetReason(), "deadline", n.GetDeadline().AsTime())
			return 0
		case <-sigterm:
			if cfg.ignoreSigterm {
				log.Warn("SIGTERM ignored, as asked")
				continue
			}
			log.Info("SIGTERM: exiting")
			return 0
		case <-exitTimer:
			log.Info("exiting on my own, as asked", "code", cfg.exitCode)
			return cfg.exitCode
		case <-hangTimer:
			log.Warn("no more heartbeats, as asked")
			client.PauseHeartbeat()
		case <-reconnect:
			if err := client.Reconnect(); err != nil {
				log.Error("reconnect", "err", err)
			}
		}
	}
}

func echoUDP(c net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, addr, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = c.WriteTo(buf[:n], addr) // best effort, like any UDP game server
	}
}

func echoTCP(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			s := bufio.NewScanner(conn)
			for s.Scan() {
				if _, err := fmt.Fprintln(conn, s.Text()); err != nil {
					return
				}
			}
			if err := s.Err(); err != nil && !errors.Is(err, net.ErrClosed) {
				return
			}
		}()
	}
}
