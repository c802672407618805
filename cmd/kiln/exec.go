package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/spf13/cobra"
)

func newExec() *cobra.Command {
	var asJSON, stream bool
	var timeout time.Duration
	var flags dataFlags
	cmd := &cobra.Command{
		Annotations: oneThread,
		Use:         "exec [--json] [--timeout D] [CODE...]",
		Short:       "Run Python cells, in order, in one fresh workbench",
		Long: `Run each CODE argument as one cell, in order, in one fresh workbench: the cells
share one namespace, so a later cell sees what an earlier one defined, and the value of
a cell's final expression is shown (and kept in _). With no CODE, standard input is read
as one cell.

A line on stderr names the session the cells ran in; with --json each record names it
(session), with the cell's id, generation, status, started_at (RFC 3339, UTC) and
duration_ms, as kiln log --json records it.

Every cell runs, even after one fails. SIGTERM or SIGHUP interrupts the running cell,
records it so, and ends exec: no later cell runs. A cell that runs past --timeout is interrupted
exactly as Ctrl-C interrupts it: KeyboardInterrupt, or cancellation at an await; if it
does not stop within 2s the worker is hard-stopped and the next cell starts in a new
generation.

Output of a cell is bounded: at most 65536 bytes of text across 256 records; the excess
is counted and discarded.

Everything is recorded in the durable record of --data: a new session, or with
--session NAME that session continued in a new generation (kiln log shows it). A cell
that ends its turn with await runtime.wait(...) is shown as yielded.

While a daemon (kiln serve) serves the data directory, --session NAME runs the cells in
the daemon's session NAME, opened if need be: its namespace lives on between calls.
--sandbox, --network, --memory, --cpu-seconds and --max-processes then open it so; a
session already open with others is refused (kiln sessions stop NAME first).

Exit status: 0 when every cell ended ok or yielded, 1 otherwise, 2 for usage errors.`,
		Example: `  kiln exec 'x = 20' 'x + 1' '_ * 2'
  echo 'print("hello")' | kiln exec
  kiln exec --json --timeout 5s 'import time; time.sleep(60)'`,
		Args: usageArgs(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageError{fmt.Errorf("--timeout must not be negative, got %s", timeout)}
			}
			cells := args
			if len(cells) == 0 {
				data, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("reading cell from stdin: %w", err)
				}
				cells = []string{string(data)}
			}
			opts, err := flags.workbenchOptions()
			if err != nil {
				return err
			}
			if stream && !asJSON {
				return usageError{fmt.Errorf("--stream is for --json: in human mode output is shown as it comes")}
			}
			if flags.session != "" {
				if d, err := flags.daemon(cmd.Context()); err != nil {
					return err
				} else if d != nil {
					defer d.Close()
					if flags.workspace != "" || len(flags.instructions) > 0 || flags.python != "" {
						return usageError{fmt.Errorf("a daemon serves %s: its sessions take the daemon's workspace, instructions and interpreter, not --workspace, --instructions or --python", opts.DataDir)}
					}
					if _, err := d.OpenSessionWith(cmd.Context(), opts.SessionID, client.SessionOptions{MCP: daemonMCP(opts.MCP),
						ToolTimeout: opts.ToolTimeout, Sandbox: opts.Sandbox, Network: opts.Network,
						Limits: client.SessionLimits{MemoryBytes: opts.MemoryBytes, CPUSeconds: int64(opts.CPUSeconds),
							MaxProcesses: int64(opts.MaxProcesses)}}); err != nil {
						return err
					}
					images := imageDir(opts.DataDir)
					execute := func(ctx context.Context, code string, onOutput func(string, kiln.Output)) (kiln.Record, error) {
						return d.Execute(ctx, opts.SessionID, code, onOutput)
					}
					return reportCells(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts.SessionID, execute, cells, asJSON, stream, timeout, images)
				}
			}
			return execCells(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts, cells, asJSON, stream, timeout)
		},
	}
	flags.addRun(cmd)
	addJSON(cmd, &asJSON, "print one JSON object per cell: session, id, generation, status, started_at, duration_ms, output, truncated_bytes, error, exception, namespace_lost")
	cmd.Flags().BoolVar(&stream, "stream", false, `with --json, print each piece of output as it comes, {"event":"output","id":…,"stream":…,"text":…}, before its cell's record`)
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "interrupt a cell that runs longer than this (e.g. 30s); 0 means no limit")
	return cmd
}

// execCells runs cells in one workbench and reports each.
func execCells(ctx context.Context, stdout, stderr io.Writer, opts kiln.WorkbenchOptions, cells []string, asJSON, stream bool, timeout time.Duration) error {
	opts.OnSpeech = speechPrinter(stderr)
	opts.Python = spareWrapper(ctx, stderr, opts.Python, asJSON)
	prompts := stdout
	if asJSON {
		prompts = stderr // stdout carries JSON alone
	}
	opts.OnInput = terminalAnswerer(os.Stdin, prompts, stderr)
	wb, err := kiln.OpenWorkbench(ctx, opts)
	if err != nil {
		return err
	}
	defer wb.Close()
	return reportCells(ctx, stdout, stderr, opts.SessionID, wb.ExecuteStream, cells, asJSON, stream, timeout, workbenchImages(wb))
}

// executeFunc runs one cell, telling onOutput its output as it comes.
type executeFunc func(ctx context.Context, code string, onOutput func(string, kiln.Output)) (kiln.Record, error)

// reportCells runs cells through execute, in session, in order, and reports each; in
// human mode a line on stderr names the session first. images is the directory for the
// images cells display.
func reportCells(ctx context.Context, stdout, stderr io.Writer, session string, execute executeFunc, cells []string, asJSON, stream bool, timeout time.Duration, images string) error {
	if !asJSON {
		fmt.Fprintf(stderr, "[kiln] session %s\n", session)
	}
	interrupts := catchInterrupts()
	defer interrupts.stop()
	ctx, stop := terminable(ctx)
	defer stop()
	allOK := true
	for _, code := range cells {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var onOutput func(string, kiln.Output)
		shown := &humanOutput{stdout: stdout, stderr: stderr, images: images}
		switch {
		case !asJSON:
			onOutput = shown.show
		case stream:
			onOutput = outputEvents(stdout)
		}
		rec, err := runCell(ctx, interrupts, execute, code, timeout, onOutput)
		if err != nil {
			return err
		}
		if rec.Status != kiln.StatusOK && rec.Status != kiln.StatusYielded {
			allOK = false
		}
		if asJSON {
			if err := printJSON(stdout, rec); err != nil {
				return err
			}
		} else {
			renderRecord(stdout, stderr, rec, shown)
		}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if !allOK {
		return errNotOK
	}
	return nil
}

// errTerminated is a command that SIGTERM or SIGHUP ended: the cell running then was
// interrupted and recorded, and no later cell ran.
var errTerminated = errors.New("terminated")

// terminable returns ctx, ended by SIGTERM or SIGHUP with a cause that wraps
// errTerminated and context.Canceled and names the signal, and the function that gives
// the signals back their default action.
func terminable(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		select {
		case sig := <-signals:
			cancel(fmt.Errorf("%w by %v: the running cell was interrupted, no later one ran: %w", errTerminated, sig, context.Canceled))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		close(done)
		<-served
		cancel(nil)
	}
}

// runCell executes one cell; its --timeout, and a Ctrl-C, interrupt it.
func runCell(ctx context.Context, interrupts *cellInterrupts, execute executeFunc, code string, timeout time.Duration, onOutput func(string, kiln.Output)) (kiln.Record, error) {
	ctx, done := interrupts.cell(ctx)
	defer done()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return execute(ctx, code, onOutput)
}

// cellInterrupts turns a Ctrl-C into the interrupt of the cell running then. The signal
// is caught once for the whole run: a registration per cell would cost each cell two
// round trips to the runtime's signal thread. A Ctrl-C between cells, when none runs, is
// let go: cancelling the next cell before it starts would end the run instead.
type cellInterrupts struct {
	signals chan os.Signal
	done    chan struct{} // closed when the goroutine serving signals has returned

	mu     sync.Mutex
	cancel context.CancelFunc // the running cell's; nil between cells
}

// catchInterrupts catches Ctrl-C until stop.
func catchInterrupts() *cellInterrupts {
	c := &cellInterrupts{signals: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(c.signals, os.Interrupt)
	go func() {
		defer close(c.done)
		for range c.signals {
			c.mu.Lock()
			if c.cancel != nil {
				c.cancel()
			}
			c.mu.Unlock()
		}
	}()
	return c
}

// stop gives Ctrl-C back its default action.
func (c *cellInterrupts) stop() {
	signal.Stop(c.signals)
	close(c.signals)
	<-c.done
}

// cell returns the context of one cell, which a Ctrl-C cancels, and the function that
// ends the cell.
func (c *cellInterrupts) cell(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		c.cancel = nil
		c.mu.Unlock()
		cancel()
	}
}

// daemonMCP is servers as a daemon runs them: a command named by a relative path is
// made absolute, since the daemon runs it from its own directory.
func daemonMCP(servers []kiln.MCPServer) []kiln.MCPServer {
	for i, s := range servers {
		if len(s.Command) > 0 && strings.ContainsRune(s.Command[0], '/') && !filepath.IsAbs(s.Command[0]) {
			if abs, err := filepath.Abs(s.Command[0]); err == nil {
				servers[i].Command = append([]string{abs}, s.Command[1:]...)
			}
		}
	}
	return servers
}
