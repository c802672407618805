package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/internal/mcpserver"
	"github.com/kilnrt/kiln/internal/serve"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeMCP serves kiln's MCP server on in and out (newline-delimited JSON-RPC, as an
// MCP client speaks to a command over stdio) until in ends or ctx does. When a daemon
// serves opts.DataDir, the calls go to its sessions, through its /mcp endpoint, and
// opts.Ready is told its socket; else ServeMCP serves sessions of its own on the data
// directory's record, beside any other such process, and opts.Ready is told no socket.
func ServeMCP(ctx context.Context, opts Options, in io.ReadCloser, out io.WriteCloser) (err error) {
	if opts.DataDir == "" {
		if opts.DataDir, err = store.DefaultDir(os.Getenv); err != nil {
			return err
		}
	}
	if opts.DataDir, err = filepath.Abs(opts.DataDir); err != nil {
		return fmt.Errorf("kiln: data directory: %w", err)
	}
	stdio := &mcp.IOTransport{Reader: in, Writer: out}
	if d, err := client.DialDaemon(ctx, opts.DataDir); err == nil {
		d.Close()
		sock := client.SocketPath(opts.DataDir)
		if opts.Sandbox != "" || opts.Network != "" {
			return fmt.Errorf("kiln: a daemon serves %s: its sessions are confined as the daemon's --sandbox and --network, "+
				"or session_open's sandbox and network, say; not as this process's", opts.DataDir)
		}
		if opts.Ready != nil {
			opts.Ready(Info{Socket: sock})
		}
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}
		hc := &http.Client{Transport: &http.Transport{DialContext: dial}}
		defer hc.CloseIdleConnections()
		return bridge(ctx, stdio, &mcp.StreamableClientTransport{Endpoint: "http://kiln/mcp", HTTPClient: hc, MaxRetries: -1})
	} else if !errors.Is(err, client.ErrNoDaemon) {
		return err
	}
	if opts.Workspace == "" {
		if opts.Workspace, err = os.Getwd(); err != nil {
			return fmt.Errorf("kiln: workspace: %w", err)
		}
	}
	// The configuration's [sandbox] and [limits] apply here as in a daemon, and so do
	// the sandbox, network and limits of its [sessions.NAME]; its agent, and the routes
	// and instructions of [sessions.NAME], are a daemon's alone.
	cfg, err := serveAgentConfig(opts)
	if err != nil {
		return err
	}
	limits := sessionConfinement(&opts, cfg)
	confine, err := session.NewConfinement(ctx, opts.Sandbox, opts.Network, opts.DataDir, nil, true, opts.Logger)
	if err != nil {
		return err
	}
	d, err := serve.Start(ctx, serve.Options{Dir: opts.DataDir, Workspace: opts.Workspace, Python: opts.Python, Limits: limits,
		Config: cfg, Sandbox: opts.Sandbox, Network: opts.Network, SandboxHost: confine.Host,
		IdleTimeout: opts.IdleTimeout, Logger: opts.Logger, Guest: true})
	if err != nil {
		return err
	}
	defer d.Close()
	runner, err := kiln.NewRunner(ctx, kiln.RunnerOptions{Python: opts.Python, Dir: opts.Workspace, Logger: opts.Logger,
		Sandbox: opts.Sandbox, Network: opts.Network, DataDir: opts.DataDir, SandboxHost: confine.Host})
	if err != nil {
		return err
	}
	defer runner.Close()
	srv := mcpserver.New(d, mcpserver.Options{RunProgram: programRunner(runner), Logger: opts.Logger})
	if opts.Ready != nil {
		opts.Ready(Info{})
	}
	if err := srv.Run(ctx, stdio); !connectionEnded(err) {
		return err
	}
	return nil
}

// bridge carries messages between the stdio client and the daemon's endpoint, each way,
// until either side ends.
func bridge(ctx context.Context, client, daemon mcp.Transport) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	local, err := client.Connect(ctx)
	if err != nil {
		return fmt.Errorf("kiln: mcp: %w", err)
	}
	remote, err := daemon.Connect(ctx)
	if err != nil {
		local.Close()
		return fmt.Errorf("kiln: mcp: the daemon: %w", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	carry := func(i int, from, to mcp.Connection) {
		defer wg.Done()
		defer cancel()
		for {
			msg, err := from.Read(ctx)
			if err == nil {
				err = to.Write(ctx, msg)
			}
			if err != nil {
				errs[i] = err
				return
			}
		}
	}
	wg.Add(2)
	go carry(0, local, remote)
	go carry(1, remote, local)
	wg.Wait()
	local.Close()
	remote.Close()
	for _, err := range errs {
		if !connectionEnded(err) {
			return fmt.Errorf("kiln: mcp: %w", err)
		}
	}
	return nil
}

// connectionEnded says err is how a connection ends, not a failure: its input ran out or it was
// closed.
func connectionEnded(err error) bool {
	return err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed)
}
