// Command allocload is a matchmaker's load on a running Tether (`tether
// dev`, or a cluster): concurrent callers allocate game servers over gRPC
// for a while and it prints the allocations per second, the latency
// quantiles and the errors by gRPC code (package allocload).
//
//	go run ./services/tools/allocload/cmd/allocload --fleet arena \
//	    [--grpc 127.0.0.1:7070[,ADDR…]] [--key-file ~/.cache/tether/dev/keys/matchmaker.key] \
//	    [--callers 32] [--duration 10s] [--max N] [--return game]
//
// With --return PORT (the default "game"), every allocated example game
// server is told "READY" on that port once it shows its allocation, so it
// calls the SDK's Ready and goes back to the pool; --return "" keeps them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/tetherhq/tether/services/tools/allocload"
)

func main() {
	grpcAddrs := flag.String("grpc", "127.0.0.1:7070", "comma-separated gRPC addresses of the API replicas")
	keyFile := flag.String("key-file", "", "file holding the API key (e.g. ~/.cache/tether/dev/keys/matchmaker.key)")
	fleet := flag.String("fleet", "", "fleet to allocate from (required; - for any)")
	callers := flag.Int("callers", allocload.DefaultCallers, "concurrent callers")
	duration := flag.Duration("duration", allocload.DefaultDuration, "how long to call")
	maxAllocs := flag.Int("max", 0, "stop after this many calls (0: --duration only)")
	players := flag.Int("players", 2, "players per allocation")
	ret := flag.String("return", "game", `hand each allocated example game server back through this port ("": keep them)`)
	flag.Parse()
	if *fleet == "" {
		fmt.Fprintln(os.Stderr, "allocload: --fleet is required")
		os.Exit(2)
	}
	opts := allocload.Options{
		Targets: strings.Split(*grpcAddrs, ","), Parent: "fleets/" + *fleet, Callers: *callers,
		Duration: *duration, Max: *maxAllocs, Players: *players,
	}
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "allocload:", err)
			os.Exit(1)
		}
		opts.Key = strings.TrimSpace(string(b))
	}
	if *ret != "" {
		opts.Return = allocload.ReturnByReady(*ret, 100*time.Millisecond)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := allocload.Run(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := res.Table(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, e := range res.ReturnErrors {
		fmt.Fprintln(os.Stderr, "return failed:", e)
	}
}
