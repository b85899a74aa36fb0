package main

import "github.com/spf13/cobra"

// auditCommand is `tetherctl audit`: commands that read the event history,
// for auditors and operators. Each file contributing subcommands has one
// method returning them, listed below on its own line, so files add
// commands without editing each other's lines.
func (a *app) auditCommand() *cobra.Command {
	cmd := group("audit", "Read the event history: a resource's events, state and explanation; follow it live, export it")
	for _, commands := range []func() []*cobra.Command{
		a.auditReadCommands,   // audit.go: history, explain, state
		a.auditStreamCommands, // audit_tail.go, audit_export.go: tail, export
	} {
		cmd.AddCommand(commands()...)
	}
	return cmd
}
