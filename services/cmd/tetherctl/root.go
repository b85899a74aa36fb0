package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// Defaults of the global flags.
const (
	defaultAddr    = "127.0.0.1:7070"
	defaultTimeout = 10 * time.Second
	// addrEnv names the environment variable that overrides defaultAddr.
	addrEnv = "TETHER_ADDR"
	// tokenEnv holds the API key when --token is not given.
	tokenEnv = "TETHER_TOKEN"
	// caEnv names the CA file when --ca is not given.
	caEnv = "TETHER_CA"
)

// Output formats of -o/--output.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// app holds the global flags and where results go. Commands are methods on
// it; each dials its own client and closes it when done.
type app struct {
	out     io.Writer
	addr    string
	key     string
	tls     bool
	ca      string
	output  string
	timeout time.Duration
	now     func() time.Time
}

// newRoot builds the tetherctl command tree, printing results to out
// (diagnostics go to the command's error writer).
func newRoot(out io.Writer) *cobra.Command {
	a := &app{out: out, now: time.Now}
	root := &cobra.Command{
		Use:   "tetherctl",
		Short: "Operate Tether: fleets, game servers, hosts, allocations and sessions",
		Long: `tetherctl talks gRPC to a Tether API server.

Names may be given short or in full: "arena" or "fleets/arena",
"arena/gs-7f3k2" or "fleets/arena/gameServers/gs-7f3k2", "h1" or "hosts/h1",
"gsess-1" or "gameSessions/gsess-1", "gsess-1/ps-1" or
"gameSessions/gsess-1/playerSessions/ps-1".`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch a.output {
			case formatTable, formatJSON, formatYAML:
			default:
				return fmt.Errorf("--output must be table, json or yaml, not %q", a.output)
			}
			if a.timeout <= 0 {
				return fmt.Errorf("--timeout must be positive, not %s", a.timeout)
			}
			if a.key == "" { // read here, not as the flag's default: --help would print it
				a.key = os.Getenv(tokenEnv)
			}
			if a.key == "" {
				a.key = devAdminKey(a.addr)
			}
			return nil
		},
	}
	root.SetOut(out)
	addr := os.Getenv(addrEnv)
	if addr == "" {
		addr = defaultAddr
	}
	f := root.PersistentFlags()
	f.StringVar(&a.addr, "addr", addr, "API server gRPC address, or several replicas' comma-separated (calls are spread over them and retried on another when one is down) (default from $"+addrEnv+")")
	f.StringVar(&a.key, "token", "", "API key, for an API that authenticates callers (tether keys add) (default from $"+tokenEnv+")")
	f.BoolVar(&a.tls, "tls", false, "connect over TLS, trusting the system's certificate authorities")
	f.StringVar(&a.ca, "ca", os.Getenv(caEnv), "connect over TLS, trusting the certificate authorities of this PEM file (default from $"+caEnv+")")
	f.StringVarP(&a.output, "output", "o", formatTable, "output format: table, json or yaml")
	f.DurationVar(&a.timeout, "timeout", defaultTimeout, "time limit of each API request")
	root.AddCommand(a.projectionsCommand(), a.statusCommand())
	root.AddCommand(a.fleetsCommand(), a.gameServersCommand(), a.hostsCommand(),
		a.allocateCommand(), a.sessionsCommand(), a.playersCommand(), a.auditCommand())
	return root
}

// execute runs root with args and returns the process exit status: 0 on
// success, 130 when interrupted, 1 on any other error, which it prints to
// stderr as "error: ...".
func execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "interrupted")
		return 130
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	return 1
}

// group returns a command that only holds subcommands: alone it prints its
// help, with an unknown subcommand it fails.
func group(use, short string, aliases ...string) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Aliases: aliases,
		Short:   short,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
}

// addMinSequence declares --min-sequence on a read command.
func addMinSequence(cmd *cobra.Command, seq *int64) {
	cmd.Flags().Int64Var(seq, "min-sequence", 0,
		"read views that have applied at least this event sequence (the \"sequence\" a write printed), waiting briefly if needed")
}

// withClient dials the API, runs f and closes the connection.
func (a *app) withClient(f func(c *client) error) error {
	c, err := dial(a.addr, a.key, a.tls, a.ca, a.timeout)
	if err != nil {
		return err
	}
	err = f(c)
	if cerr := c.Close(); err == nil && cerr != nil {
		return fmt.Errorf("close connection to %s: %w", a.addr, cerr)
	}
	return err
}
