package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/kilnrt/kiln/daemon"
	"github.com/spf13/cobra"
)

func newMCP() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "mcp [--data DIR] [--workspace DIR]",
		Short: "Serve kiln's MCP server on stdio, for an MCP client to start",
		Long: `Serve kiln's MCP server over standard input and output, as MCP clients start tool
servers. When a daemon (kiln serve) serves the data directory, the calls go to its
sessions; else kiln mcp serves sessions of its own, in the data directory's record,
beside any other kiln mcp. It says on standard error which data directory and which
daemon it uses: MCP clients pass few environment variables, so name the directory
with --data in the client's configuration.

Tools: session_open, session_list, session_close, execute (answers within wait_ms, with
status running and an execution_id when the cell goes on), wait, interrupt, record,
run_program. Logs go to standard error.

--sandbox and --network confine the sessions this process serves, and its programs;
session_open's sandbox and network confine one session. Through a daemon the daemon's
confine them, and kiln mcp refuses its own.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := flags.dataDir()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			if dir, err = filepath.Abs(dir); err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			ready := func(info daemon.Info) {
				if info.Socket != "" {
					fmt.Fprintf(stderr, "kiln mcp: data directory %s; sessions of the daemon on %s\n", dir, info.Socket)
					return
				}
				fmt.Fprintf(stderr, "kiln mcp: data directory %s; no daemon serves it: sessions of this process (pid %d), "+
					"ended with it (kiln serve --data %s keeps them)\n", dir, os.Getpid(), dir)
			}
			return daemon.ServeMCP(ctx, daemon.Options{DataDir: dir, Workspace: flags.workspace, Logger: logger, Ready: ready,
				Sandbox: flags.sandbox, Network: flags.network}, os.Stdin, os.Stdout)
		},
	}
	flags.addData(cmd)
	addJSON(cmd, nil, "print an error that ends the server as JSON (stdout is the MCP stream until then)")
	cmd.Flags().StringVar(&flags.workspace, "workspace", "", "the sessions' workspace root (default the current directory)")
	addSandbox(cmd, &flags.sandbox, &flags.network)
	return cmd
}
