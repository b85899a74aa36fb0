// Command tetherctl is the operators' command-line client of Tether's
// control-plane API (docs/architecture.md, "The REST contract"): it creates, scales and deletes fleets,
// lists and watches game servers, lists hosts, allocates game servers and
// shows and manages game and player sessions, talking gRPC to an API server
// and printing tables, JSON or YAML.
//
// Usage:
//
//	tetherctl [--server HOST:PORT[,HOST:PORT…]] [--ca FILE | --tls] [--token KEY]
//	          [--context NAME] [--config FILE] [-o table|json|yaml] [--timeout 10s] COMMAND
//
// Each connection setting comes from its flag, else its environment
// variable ($TETHER_SERVER, $TETHER_CA, $TETHER_TOKEN), else the context
// --context names or the config file's current context (tetherctl config;
// the file is $TETHER_CONFIG, else ~/.config/tether/config.yaml), else,
// for the key and an API on loopback, `tether dev`'s admin key; the
// server is then the `tether dev` running on this machine (the addresses
// it writes to its data dir), else 127.0.0.1:7070. --addr and $TETHER_ADDR are older
// names of --server and $TETHER_SERVER. API errors are printed as
// "error: MESSAGE (REASON)" and make tetherctl exit with status 1.
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
