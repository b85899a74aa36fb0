// Command tetherctl is the operators' command-line client of Tether's
// control-plane API (DESIGN.md §6): it creates, scales and deletes fleets,
// lists and watches game servers, lists hosts, allocates game servers and
// shows and manages game and player sessions, talking gRPC to an API server
// and printing tables, JSON or YAML.
//
// Usage:
//
//	tetherctl [--addr HOST:PORT] [-o table|json|yaml] [--timeout 10s] COMMAND
//
// The address defaults to $TETHER_ADDR, else 127.0.0.1:7070. API errors are
// printed as "error: MESSAGE (REASON)" and make tetherctl exit with status 1.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, newRoot(os.Stdout), os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
