package main

import "github.com/spf13/cobra"

// addSandbox adds --sandbox and --network to cmd.
func addSandbox(cmd *cobra.Command, profile, network *string) {
	cmd.Flags().StringVar(profile, "sandbox", "", `confine the Python code: workspace (the default: its files are the working directory's, home and the data directory are out of reach), strict or none, the first two optionally with ":best-effort" to accept less than the kernel can give; by default, what the kernel lacks is left out and recorded (docs/sandbox.md)`)
	cmd.Flags().StringVar(network, "network", "", `what confined code may reach: host (the default), none, or TCP ports "80,443"`)
}
