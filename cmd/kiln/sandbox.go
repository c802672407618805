package main

import "github.com/spf13/cobra"

// addSandbox adds --sandbox and --network to cmd.
func addSandbox(cmd *cobra.Command, profile, network *string) {
	cmd.Flags().StringVar(profile, "sandbox", "", `confine the Python code: workspace, strict or none (the default), the first two optionally with ":best-effort" to accept less than the kernel can give (docs/sandbox.md)`)
	cmd.Flags().StringVar(network, "network", "", `what confined code may reach: host (the default), none, or TCP ports "80,443"`)
}
