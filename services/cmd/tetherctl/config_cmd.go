package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// configCommand is `tetherctl config`: the contexts of the config file.
func (a *app) configCommand() *cobra.Command {
	cmd := group("config", "Show and change the contexts of the config file (APIs and how to call them)")
	cmd.Long = `A context names an API and how to call it: its server (several replicas
comma-separated), the CA file to trust (or tls for the system's), and the API
key, preferably as a tokenFile. The config file is --config, else $` + configEnv + `,
else $` + xdgConfigEnv + `/tether/config.yaml (~/.config/tether/config.yaml).

  tetherctl config set-context prod --server api.example:7070 --ca ca.pem --token-file ~/.config/tether/prod.token
  tetherctl config use-context prod
  tetherctl --context dev fleets list

Flags and variables (--server, --ca, --tls, --token, $` + serverEnv + `, $` + caEnv + `,
$` + tokenEnv + `) win over the context, one setting at a time: --server with a
context still sends that context's key. The file is written whole (temp file
and rename), mode 0600 in a directory made 0700; comments are not kept. A
file that holds an inline token is refused unless only its owner may read it.`
	cmd.AddCommand(a.getContextsCommand(), a.useContextCommand(), a.setContextCommand(),
		a.deleteContextCommand(), a.currentContextCommand())
	return cmd
}

// contextView is a context as get-contexts shows it: the token never
// appears, only how it is given.
type contextView struct {
	Current bool   `json:"current"`
	Name    string `json:"name"`
	Server  string `json:"server,omitempty"`
	CA      string `json:"ca,omitempty"`
	TLS     bool   `json:"tls"`
	Auth    string `json:"auth"`
}

// view describes ctx without its token.
func (ctx *namedContext) view(current string) contextView {
	v := contextView{Current: ctx.Name == current, Name: ctx.Name, Server: ctx.Server, CA: ctx.CA, TLS: ctx.TLS || ctx.CA != "" || ctx.Cert != ""}
	switch {
	case ctx.TokenFile != "":
		v.Auth = "token-file " + ctx.TokenFile
	case ctx.Token != "":
		v.Auth = "token (inline)"
	case ctx.Cert != "":
		v.Auth = "client-cert " + ctx.Cert
	default:
		v.Auth = "none"
	}
	return v
}

// getContextsCommand is `config get-contexts`: the contexts as a table
// (or JSON, YAML), with how each authenticates but never its key.
func (a *app) getContextsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts (CURRENT marks the one in use); tokens are never shown",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cf, err := a.readConfig()
			if err != nil {
				return err
			}
			views := make([]contextView, len(cf.Contexts))
			for i := range cf.Contexts {
				views[i] = cf.Contexts[i].view(cf.CurrentContext)
			}
			if a.output != formatTable {
				raw, err := marshalJSON(map[string][]contextView{"contexts": views})
				if err != nil {
					return fmt.Errorf("encode contexts: %w", err)
				}
				return a.printJSON(raw)
			}
			return a.printTable(func(w io.Writer) {
				row(w, "CURRENT", "NAME", "SERVER", "CA", "AUTH")
				for _, v := range views {
					current, ca := "", v.CA
					if v.Current {
						current = "*"
					}
					if ca == "" && v.TLS {
						ca = "(system)"
					}
					row(w, current, v.Name, orDash(v.Server), orDash(ca), v.Auth)
				}
			})
		},
	}
}

// useContextCommand is `config use-context NAME`: it sets current-context.
func (a *app) useContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make a context the current one: the one used without --context",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cf, err := a.readConfig()
			if err != nil {
				return err
			}
			if _, err := cf.find(args[0]); err != nil {
				return err
			}
			cf.CurrentContext = args[0]
			if err := cf.write(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "Switched to context %q.\n", args[0])
			return err
		},
	}
}

// setContextCommand is `config set-context NAME`: it creates a context or
// changes the settings given of one.
func (a *app) setContextCommand() *cobra.Command {
	var (
		fields    namedContext
		tokenFile string
	)
	cmd := &cobra.Command{
		Use:   "set-context NAME --server HOST:PORT [--ca FILE] [--tls] [--token-file FILE] [--cert FILE --key FILE]",
		Short: "Create a context, or change the settings given of one",
		Long: `set-context creates the context NAME (--server is needed then) or changes
the settings given of an existing one: --ca "" removes its CA, --tls=false its
TLS, --token-file "" its key. Paths are stored absolute. The API key is only
ever taken from a file, so that it stays out of the shell's history and the
config file; a context with an inline token (written by hand) loses it to
--token-file.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.given("token") {
				return fmt.Errorf("set-context does not store --token: write the key to a file (readable by you only) and give --token-file")
			}
			cf, err := a.readConfig()
			if err != nil {
				return err
			}
			name, set := args[0], cmd.Flags().Changed
			ctx := cf.context(name)
			verb := "modified"
			if ctx == nil {
				if !set("server") || fields.Server == "" {
					return fmt.Errorf("context %q is new: give its --server", name)
				}
				cf.Contexts = append(cf.Contexts, namedContext{Name: name})
				ctx, verb = &cf.Contexts[len(cf.Contexts)-1], "created"
			}
			if set("server") {
				ctx.Server = fields.Server
			}
			if set("ca") {
				if ctx.CA, err = absPath(fields.CA); err != nil {
					return err
				}
			}
			if set("tls") {
				ctx.TLS = fields.TLS
			}
			if set("cert") {
				if ctx.Cert, err = absPath(fields.Cert); err != nil {
					return err
				}
			}
			if set("key") {
				if ctx.Key, err = absPath(fields.Key); err != nil {
					return err
				}
			}
			if set("token-file") {
				if ctx.TokenFile, err = absPath(tokenFile); err != nil {
					return err
				}
				ctx.Token = ""
			}
			if err := cf.write(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "Context %q %s in %s.\n", name, verb, cf.path)
			return err
		},
	}
	// These shadow the global flags of the same names: here they are what
	// to store, not how to call.
	f := cmd.Flags()
	f.StringVar(&fields.Server, "server", "", "the API's gRPC address, or several replicas' comma-separated")
	f.StringVar(&fields.CA, "ca", "", "PEM file of the certificate authorities to trust (implies TLS)")
	f.BoolVar(&fields.TLS, "tls", false, "connect over TLS (with the system's authorities unless --ca)")
	f.StringVar(&tokenFile, "token-file", "", "file that holds the API key")
	f.StringVar(&fields.Cert, "cert", "", "client certificate (PEM) to show the API (mutual TLS; with --key)")
	f.StringVar(&fields.Key, "key", "", "the client certificate's private key (PEM)")
	return cmd
}

// absPath makes a path given on the command line absolute, so it means
// the same from any working directory; "" stays "", and so does a path
// from the home directory the shell did not expand (--token-file=~/t).
func absPath(p string) (string, error) {
	if p == "" || strings.HasPrefix(p, "~/") {
		return p, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("path %s: %w", p, err)
	}
	return abs, nil
}

// deleteContextCommand is `config delete-context NAME`; deleting the
// current context leaves none current.
func (a *app) deleteContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete-context NAME",
		Short: "Delete a context",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cf, err := a.readConfig()
			if err != nil {
				return err
			}
			name := args[0]
			if _, err := cf.find(name); err != nil {
				return err
			}
			cf.Contexts = slices.DeleteFunc(cf.Contexts, func(c namedContext) bool { return c.Name == name })
			if cf.CurrentContext == name {
				cf.CurrentContext = ""
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %q was the current context; there is none now (tetherctl config use-context NAME)\n", name)
			}
			if err := cf.write(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "Deleted context %q from %s.\n", name, cf.path)
			return err
		},
	}
}

// currentContextCommand is `config current-context`: it prints its name.
func (a *app) currentContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "current-context",
		Short: "Print the current context's name",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cf, err := a.readConfig()
			if err != nil {
				return err
			}
			if cf.CurrentContext == "" {
				return fmt.Errorf("no current context in %s (tetherctl config use-context NAME)", cf.path)
			}
			_, err = fmt.Fprintln(a.out, cf.CurrentContext)
			return err
		},
	}
}
