package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Defaults of the global flags.
const (
	defaultServer  = "127.0.0.1:7070"
	defaultTimeout = 10 * time.Second
	// serverEnv names the API endpoints when --server is not given.
	serverEnv = "TETHER_SERVER"
	// addrEnv is the older name of serverEnv, read when it is unset.
	addrEnv = "TETHER_ADDR"
	// tokenEnv holds the API key when --token is not given.
	tokenEnv = "TETHER_TOKEN"
	// caEnv names the CA file when --ca is not given.
	caEnv = "TETHER_CA"
	// certEnv and keyEnv name a client certificate and its key (mutual
	// TLS) when --cert and --key are not given.
	certEnv = "TETHER_CERT"
	keyEnv  = "TETHER_KEY"
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
	out io.Writer
	// flags are the global flags, to tell a flag given from its default.
	flags *pflag.FlagSet
	// server and addr are --server and its older name --addr.
	server, addr  string
	key           string
	tls           bool
	ca            string
	cert, certKey string // --cert, --key
	// configPath is --config; contextName is --context.
	configPath  string
	contextName string
	output      string
	timeout     time.Duration
	now         func() time.Time
}

// newRoot builds the tetherctl command tree, printing results to out
// (diagnostics go to the command's error writer).
func newRoot(out io.Writer) *cobra.Command {
	return newApp(out).root()
}

// newApp returns an app printing to out, before its flags are parsed.
func newApp(out io.Writer) *app { return &app{out: out, now: time.Now} }

// root builds the command tree over a.
func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "tetherctl",
		Short: "Operate Tether: fleets, game servers, hosts, allocations and sessions",
		Long: `tetherctl talks gRPC to a Tether API server.

Where and how: --server, --ca, --tls and --token, else $` + serverEnv + `,
$` + caEnv + ` and $` + tokenEnv + `, else the context of the config file that
--context names or that is current (tetherctl config --help), else, for an
API on this machine, the admin key of "tether dev"; the server defaults to
` + defaultServer + `.

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
			return nil
		},
	}
	root.SetOut(a.out)
	// Values of the environment and of the config file are not the flags'
	// defaults: --help would print a token, and a flag given must be told
	// from one not given (a.connection).
	f := root.PersistentFlags()
	a.flags = f
	f.StringVar(&a.server, "server", "", "API server gRPC address, or several replicas' comma-separated (calls are spread over them and retried on another when one is down) (default from $"+serverEnv+", else the context's, else that of the tether dev running on this machine, else "+defaultServer+"; --addr and $"+addrEnv+" are older names)")
	f.StringVar(&a.addr, "addr", "", "older name of --server, kept for scripts")
	_ = f.MarkHidden("addr") // --server is the name to use; --help shows that one
	f.StringVar(&a.key, "token", "", "API key, for an API that authenticates callers (tether keys add) (default from $"+tokenEnv+", else the context's)")
	f.BoolVar(&a.tls, "tls", false, "connect over TLS, trusting the system's certificate authorities (default: the context's)")
	f.StringVar(&a.ca, "ca", "", "connect over TLS, trusting the certificate authorities of this PEM file (default from $"+caEnv+", else the context's)")
	f.StringVar(&a.cert, "cert", "", "show this client certificate (PEM; mutual TLS: an API whose keys file names it authenticates by it; with --key) (default from $"+certEnv+", else the context's)")
	f.StringVar(&a.certKey, "key", "", "the client certificate's private key (PEM) (default from $"+keyEnv+", else the context's)")
	f.StringVar(&a.configPath, "config", "", "config file of the contexts (default from $"+configEnv+", else $"+xdgConfigEnv+"/tether/config.yaml or ~/.config/tether/config.yaml)")
	f.StringVar(&a.contextName, "context", "", "context of the config file to use (default: its current-context)")
	f.StringVarP(&a.output, "output", "o", formatTable, "output format: table, json or yaml")
	f.DurationVar(&a.timeout, "timeout", defaultTimeout, "time limit of each API request")
	root.AddCommand(a.projectionsCommand(), a.statusCommand(), a.archiveCommand(), a.configCommand())
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

// withClient dials the API where a.connection says, runs f and closes
// the connection.
func (a *app) withClient(f func(c *client) error) error {
	cn, err := a.connection()
	if err != nil {
		return err
	}
	c, err := dial(cn, a.timeout)
	if err != nil {
		return err
	}
	err = cn.explain(f(c))
	if cerr := c.Close(); err == nil && cerr != nil {
		return fmt.Errorf("close connection to %s: %w", cn.server, cerr)
	}
	return err
}
