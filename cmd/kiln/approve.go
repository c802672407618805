package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kilnrt/kiln/client"
	"github.com/spf13/cobra"
)

func newApprove() *cobra.Command {
	var flags dataFlags
	var asJSON, reject bool
	var reason string
	cmd := &cobra.Command{
		Use:   "approve EXECUTION [--reject] [--reason TEXT] [--data DIR]",
		Short: "Approve or reject an agent's cell held for a decision (execution.review)",
		Long: `With kiln.toml's [agent] review = "hold", each cell of a session's agent is held once its
start is recorded, until the operator decides. kiln approve EXECUTION (<session>:c-N, as
kiln chat shows it) lets the held cell run; --reject ends it without running, and the
model reads the rejection, with --reason, as the cell's result. A hold that sees no
decision within review_timeout_s is rejected. Every hold and decision is recorded.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error {
			dec, err := d.Decide(ctx, args[0], !reject, reason)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, dec)
			}
			fmt.Fprintf(out, "%s %s\n", dec.Cell, dec.Decision)
			return nil
		}),
	}
	flags.addData(cmd)
	cmd.Flags().BoolVar(&reject, "reject", false, "reject the cell: it never runs")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded and, for a rejection, read by the model")
	addJSON(cmd, &asJSON, `print the decision as recorded: {"turn","cell","decision","reason","decided_at"}`)
	return cmd
}
