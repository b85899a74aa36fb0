package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts the environment variable of every flag: --port-min is
// also TETHER_PORT_MIN.
const envPrefix = "TETHER_"

// envAliases are the variables read for a flag besides its own, after it:
// the names every NATS and PostgreSQL tool already knows.
var envAliases = map[string]string{
	"nats-url":     "NATS_URL",
	"database-url": "DATABASE_URL",
}

// envName is the environment variable of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// documentEnv adds its environment variable to the usage of every flag of
// cmd and its subcommands, once.
func documentEnv(cmd *cobra.Command) {
	seen := map[*pflag.Flag]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if seen[f] || f.Name == "help" {
					return
				}
				seen[f] = true
				env := envName(f.Name)
				if alias, ok := envAliases[f.Name]; ok {
					env += " or " + alias
				}
				f.Usage += " (env " + env + ")"
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd)
}

// applyEnv sets each flag of fs not given on the command line from its
// environment variable (or alias), if set: the command line wins, then the
// environment, then the flag's default. A value the flag refuses is an
// error naming the variable.
func applyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		for _, name := range []string{envName(f.Name), envAliases[f.Name]} {
			v, ok := lookup(name)
			if name == "" || !ok || v == "" {
				continue
			}
			if serr := fs.Set(f.Name, v); serr != nil { // Set marks it given, for required flags
				err = fmt.Errorf("%s=%q (for --%s): %w", name, v, f.Name, serr)
			}
			return
		}
	})
	return err
}

// applyEnvironment is applyEnv over the process's environment.
func applyEnvironment(cmd *cobra.Command) error { return applyEnv(cmd.Flags(), os.LookupEnv) }
