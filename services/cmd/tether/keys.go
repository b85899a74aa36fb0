package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherhq/tether/services/platform/apikeys"
)

// keysCommand manages the API keys file that `tether apiserver --api-keys`
// reads.
func keysCommand() *cobra.Command {
	keys := &cobra.Command{
		Use:   "keys",
		Short: "Manage the API keys file (tether apiserver --api-keys)",
	}
	var file, role string
	var expires time.Duration
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Make an API key, add it to the keys file and print it (once: the file keeps only its hash)",
		Long: "Make an API key for NAME (the principal that events and logs show) with a role: " +
			"admin, operator, matchmaker, viewer or auditor. The API replicas reading the file pick it up within seconds.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return fmt.Errorf("which keys file? give --api-keys (the file tether apiserver --api-keys reads)")
			}
			r, err := apikeys.ParseRole(role)
			if err != nil {
				return err
			}
			var until time.Time
			if expires > 0 {
				until = time.Now().Add(expires).Truncate(time.Second)
			}
			secret, err := apikeys.Add(file, args[0], r, until)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "added %s (%s) to %s; the key above is shown once\n", args[0], r, file)
			return nil
		},
	}
	f := add.Flags()
	f.StringVar(&file, "api-keys", "", "the keys file; created if missing")
	f.StringVar(&role, "role", "", "admin, operator, matchmaker, viewer or auditor")
	f.DurationVar(&expires, "expires", 0, "how long the key is valid, e.g. 2160h; 0: until it is removed")
	_ = add.MarkFlagRequired("role") // the flag exists
	keys.AddCommand(add)
	return keys
}
