package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tetherhq/tether/services/nats/natsauth"
)

// natsAuthCommand manages a NATS credentials directory (natsauth).
func natsAuthCommand() *cobra.Command {
	var dir string
	root := &cobra.Command{
		Use:   "nats-auth",
		Short: "Manage NATS credentials: one user per component and per host, with only the subjects it uses",
		Long: `Makes and keeps a credentials directory: the NATS operator and Tether's account
(server.conf, for nats-server to include), one credentials file per component
and per host (creds/…, give each only to its own process: --nats-creds), and
the signers file every process verifies event writers with (--nats-signers).
docs/security.md has the whole procedure.`,
	}
	root.PersistentFlags().StringVar(&dir, "auth-dir", "", "the credentials directory (required)")
	needDir := func() error {
		if dir == "" {
			return errors.New("which credentials directory? give --auth-dir")
		}
		return nil
	}
	var hosts []string
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the directory, or complete it: keys, a user for every component and for each --hosts, server.conf, signers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needDir(); err != nil {
				return err
			}
			if err := natsauth.Init(dir, hosts); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "NATS credentials in %s: include %s from nats-server.conf; give each process its creds/… file (--nats-creds) and %s (--nats-signers)\n",
				dir, filepath.Join(dir, natsauth.ServerConf), filepath.Join(dir, natsauth.SignersFile))
			return nil
		},
	}
	initCmd.Flags().StringSliceVar(&hosts, "hosts", nil, "host ids to make credentials for, e.g. h1,h2")
	addHost := &cobra.Command{
		Use:   "add-host ID",
		Short: "Make the credentials of a new host (no nats-server reload needed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needDir(); err != nil {
				return err
			}
			if err := natsauth.AddHost(dir, args[0]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), natsauth.CredsPath(dir, natsauth.HostPrincipal(args[0])))
			return nil
		},
	}
	rotate := &cobra.Command{
		Use:   "rotate PRINCIPAL",
		Short: "Give a component or host (hosts/ID) a new key; its process moves to it within seconds, without a restart",
		Long: `Writes new credentials for PRINCIPAL (admin, apiserver, controller, projector
or hosts/ID) and adds the new key to the signers file. A process started with
--nats-creds on that file reconnects with the new key within seconds. The old
key keeps working until revoked: revoke it (tether nats-auth revoke) once the
process moved, then reload nats-server. It prints the old public key.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needDir(); err != nil {
				return err
			}
			old, err := natsauth.Rotate(dir, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), old)
			return nil
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke PUBLIC_KEY",
		Short: "Revoke a user key (rotated out, or of a lost host): rewrite server.conf, then reload nats-server",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needDir(); err != nil {
				return err
			}
			if err := natsauth.Revoke(dir, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s in %s: reload nats-server (nats-server --signal reload, or SIGHUP) to close its connections\n",
				args[0], filepath.Join(dir, natsauth.ServerConf))
			return nil
		},
	}
	root.AddCommand(initCmd, addHost, rotate, revoke)
	return root
}
