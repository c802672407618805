package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/daemon"
	"github.com/spf13/cobra"
)

func newServe() *cobra.Command {
	var flags dataFlags
	var listen string
	var printToken, verbose, asJSON, stdio, selfSigned, insecure bool
	var tlsCert, tlsKey string
	var allowHosts []string
	var idle, heartbeat, leaseTTL time.Duration
	var configPath, storeURL, workspaceRoot string
	cmd := &cobra.Command{
		Use:   "serve [--data DIR] [--listen ADDR [--tls-cert F --tls-key F | --tls-self-signed]] [--print-token] [--stdio]",
		Short: "Run the daemon: sessions that outlive their clients, over HTTP and MCP",
		Long: `Run kiln's daemon on the data directory. It holds sessions (each a workbench with its
namespace, hooks worker and record) until they are stopped, idle past --idle-timeout, or
the daemon stops, and serves the HTTP API on the Unix socket <data>/kiln.sock (0600).
--listen 127.0.0.1:PORT serves TCP as well; every TCP request must carry the bearer
token of <data>/serve.token, made on first use (--print-token prints it and exits).
--tls-cert and --tls-key serve TCP over TLS; --tls-self-signed generates a pair into the
data directory (tls-cert.pem, a client's ca_file) and prints its SHA-256 fingerprint.
A --listen address that is not loopback is refused without TLS, unless --insecure.

--stdio carries one client connection between standard input and output and the
socket of the daemon already serving the data directory, then exits: the command of an
exec remote target (ssh host kiln serve --stdio), which needs no open port.

--store postgres://USER@HOST/DB keeps the record in a PostgreSQL database instead of
<data>/kiln.db (so does store = "postgres://…" in kiln.toml); the password comes from
PGPASSWORD or ~/.pgpass, and a URL carrying one is refused. See docs/postgres.md.

One daemon holds a data directory, or a database: a second fails, naming the first. SIGTERM or SIGINT
stops accepting, interrupts the running cells, records them, and exits. After a crash
the next start closes the cells that were running with records of its own, and lists
the sessions again: their namespaces are gone, and their next cell says so.

While a daemon runs, kiln exec --session, send, log and transcript show go through it.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := flags.dataDir()
			if err != nil {
				return err
			}
			if stdio {
				for _, f := range []string{"listen", "tls-cert", "tls-key", "tls-self-signed", "insecure", "print-token", "allow-host",
					"workspace", "workspace-root", "store", "lease-ttl", "idle-timeout", "heartbeat", "config", "json", "sandbox", "network"} {
					if cmd.Flags().Changed(f) {
						return usageError{fmt.Errorf("--stdio carries a connection to the daemon serving the data directory: --%s is that daemon's to take", f)}
					}
				}
				return daemon.ServeStdio(cmd.Context(), dir, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			if printToken {
				tok, err := daemon.Token(dir)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), map[string]string{"token": tok})
				}
				fmt.Fprintln(cmd.OutOrStdout(), tok)
				return nil
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			var handler slog.Handler = slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})
			if asJSON {
				handler = slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})
			}
			logger := slog.New(handler)
			if idle == 0 {
				idle = -1 // held until stopped
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stderr := cmd.ErrOrStderr()
			return daemon.Serve(ctx, daemon.Options{DataDir: dir, Store: storeURL, LeaseTTL: leaseTTL, Listen: listen, Workspace: flags.workspace, WorkspaceRoot: workspaceRoot,
				IdleTimeout: idle, Heartbeat: heartbeat, Logger: logger, Config: configPath,
				Sandbox: flags.sandbox, Network: flags.network, AllowHosts: allowHosts,
				TLSCert: tlsCert, TLSKey: tlsKey, TLSSelfSigned: selfSigned, Insecure: insecure,
				Ready: func(info daemon.Info) {
					if asJSON {
						out := map[string]string{"socket": info.Socket, "listen": info.Listen}
						if info.TLSCert != "" {
							out["tls_cert"], out["tls_fingerprint"] = info.TLSCert, info.TLSFingerprint
						}
						printJSON(cmd.OutOrStdout(), out)
						return
					}
					fmt.Fprintf(stderr, "kiln: serving on %s\n", info.Socket)
					switch {
					case info.Listen != "" && info.TLSCert != "":
						fmt.Fprintf(stderr, "kiln: serving on https://%s (bearer token: kiln serve --print-token)\n", info.Listen)
						fmt.Fprintf(stderr, "kiln: TLS certificate %s, SHA-256 fingerprint %s\n", info.TLSCert, info.TLSFingerprint)
					case info.Listen != "":
						fmt.Fprintf(stderr, "kiln: serving on http://%s (bearer token: kiln serve --print-token)\n", info.Listen)
					}
				}})
		},
	}
	flags.addData(cmd)
	cmd.Flags().StringVar(&flags.workspace, "workspace", "", "the daemon's workspace: programs run through the daemon run there, and its skills/ are the sessions' (default the current directory)")
	cmd.Flags().StringVar(&workspaceRoot, "workspace-root", "", "let clients name a session's cwd inside DIR; without it each session runs in <data>/sessions/<id>/work and a client's cwd is refused")
	cmd.Flags().StringVar(&listen, "listen", "", "serve TCP on ADDR as well, e.g. 127.0.0.1:8765 (bearer token required)")
	cmd.Flags().BoolVar(&printToken, "print-token", false, "print the bearer token for TCP clients and exit")
	addJSON(cmd, &asJSON, `once serving, print one JSON object, {"socket","listen"} (listen "" without --listen; with TLS "tls_cert" and "tls_fingerprint" too); log JSON lines on stderr`)
	cmd.Flags().DurationVar(&idle, "idle-timeout", time.Hour, "stop a session that has run nothing for this long; 0 never")
	cmd.Flags().DurationVar(&heartbeat, "heartbeat", 15*time.Second, "between heartbeats of an idle event stream")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log what the daemon does")
	cmd.Flags().StringVar(&storeURL, "store", "", "keep the record in this PostgreSQL database, postgres://USER@HOST/DB (password in PGPASSWORD); default kiln.toml's store, else <data>/kiln.db")
	cmd.Flags().DurationVar(&leaseTTL, "lease-ttl", 0, "on a --store other daemons share: the term of this daemon's leases, 1s..10m; a daemon that dies leaves its sessions to the others once it ends (default kiln.toml's lease_ttl, else 15s)")
	cmd.Flags().StringVar(&configPath, "config", "", "the agent's configuration file (default <data>/kiln.toml, if it exists)")
	addSandbox(cmd, &flags.sandbox, &flags.network)
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "serve --listen over TLS with this PEM certificate (with --tls-key)")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	cmd.Flags().BoolVar(&selfSigned, "tls-self-signed", false, "serve --listen over TLS with a self-signed pair generated into the data directory")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow a --listen address that is not loopback without TLS")
	cmd.Flags().BoolVar(&stdio, "stdio", false, "carry one client connection over standard input and output to the data directory's daemon")
	cmd.Flags().StringArrayVar(&allowHosts, "allow-host", nil, "accept this name as a TCP request's Host, beside loopback names (repeatable)")
	return cmd
}
