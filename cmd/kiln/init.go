package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/admin"
	"github.com/kilnrt/kiln/journal"
	"github.com/spf13/cobra"
)

// dataFlags are the flags that name the durable record: --data, and for the commands that
// run cells, --workspace and --session.
type dataFlags struct {
	data         string
	workspace    string
	session      string
	instructions []string
	python       string
	mcp          []string
	toolTimeout  time.Duration
	memory       string
	cpuSeconds   int
	maxProcesses int
	sandbox      string
	network      string
}

// addData adds --data to cmd.
func (f *dataFlags) addData(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.data, "data", "", "the data directory of the durable record (default $XDG_DATA_HOME/kiln, else ~/.local/share/kiln)")
}

// addRun adds --data, --workspace and --session to cmd.
func (f *dataFlags) addRun(cmd *cobra.Command) {
	f.addData(cmd)
	cmd.Flags().StringVar(&f.workspace, "workspace", "", "the workspace root that workspace commands run in (default the current directory)")
	cmd.Flags().StringVar(&f.session, "session", "", "continue the durable session NAME, or start it (default: a new session)")
	cmd.Flags().StringArrayVar(&f.instructions, "instructions", nil, "add the file PATH to the instruction text as source NAME (NAME=PATH; repeatable)")
	addPython(cmd, &f.python)
	addTools(cmd, &f.mcp, &f.toolTimeout)
	cmd.Flags().StringVar(&f.memory, "memory", "", "limit the worker's address space: bytes, or with a suffix K, M, G (KiB, MiB, GiB); a cell past it gets MemoryError")
	cmd.Flags().IntVar(&f.cpuSeconds, "cpu-seconds", 0, "the CPU time each cell may use, in seconds; past it the cell gets CPULimitExceeded (0: no limit)")
	cmd.Flags().IntVar(&f.maxProcesses, "max-processes", 0, "the processes and threads the worker may have at once, its cgroup's pids limit; needs --sandbox workspace or strict (0: the sandbox's default)")
	addSandbox(cmd, &f.sandbox, &f.network)
}

// addTools adds --mcp and --tool-timeout to cmd.
func addTools(cmd *cobra.Command, mcp *[]string, timeout *time.Duration) {
	cmd.Flags().StringArrayVar(mcp, "mcp", nil, "offer the tools of an MCP server as tools.NAME.<tool>: NAME=COMMAND (stdio, split at spaces) or NAME=URL (streamable HTTP); repeatable")
	cmd.Flags().DurationVar(timeout, "tool-timeout", kiln.DefaultToolTimeout, "fail a tool call that takes longer than this")
}

// mcpServers parses --mcp's values, and checks --tool-timeout.
func mcpServers(args []string, timeout time.Duration) ([]kiln.MCPServer, error) {
	if timeout <= 0 {
		return nil, usageError{fmt.Errorf("--tool-timeout must be positive, got %s", timeout)}
	}
	var servers []kiln.MCPServer
	for _, arg := range args {
		s, err := kiln.ParseMCPServer(arg)
		if err != nil {
			return nil, usageError{fmt.Errorf("--mcp: %w", err)}
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// addPython adds --python to cmd.
func addPython(cmd *cobra.Command, python *string) {
	cmd.Flags().StringVar(python, "python", "", "the interpreter, a path or a name in PATH; a virtualenv's sees its site-packages (default $KILN_PYTHON, else python3)")
}

// dataDir is the data directory: --data, else the default.
func (f *dataFlags) dataDir() (string, error) {
	if f.data != "" {
		return f.data, nil
	}
	return admin.DefaultDataDir(os.Getenv)
}

// sessionName is --session, checked, or a fresh name for a new session.
func (f *dataFlags) sessionName() (string, error) {
	if f.session == "" {
		var b [3]byte
		rand.Read(b[:])
		return "s-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:]), nil
	}
	if !admin.ValidIdentifier(f.session) {
		return "", usageError{fmt.Errorf("--session %q is not 1..128 of [A-Za-z0-9_.-]", f.session)}
	}
	return f.session, nil
}

// openJournal opens the durable record for reading only, for a command that needs one
// already made: it never makes one, and needs no write access.
func (f *dataFlags) openJournal(ctx context.Context) (*journal.Journal, error) {
	dir, err := f.dataDir()
	if err != nil {
		return nil, err
	}
	return journal.Open(ctx, dir)
}

func newInit() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "init [--data DIR]",
		Short: "Create the data directory and its durable record",
		Long: `Create the data directory (default $XDG_DATA_HOME/kiln, else ~/.local/share/kiln)
and the SQLite database that records sessions, generations, cells, host requests and
their replies, effects, waits and inputs, and the managed skills root, <data>/skills. kiln exec and kiln repl create it on first use
too; init is safe to run again.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := flags.dataDir()
			if err != nil {
				return err
			}
			info, err := admin.InitDataDir(cmd.Context(), dir)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"record": info.Record, "schema_version": info.SchemaVersion, "skills": info.Skills})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kiln: durable record %s (schema version %d)\nkiln: managed skills %s\n", info.Record, info.SchemaVersion, info.Skills)
			return nil
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"record","schema_version","skills"}`)
	return cmd
}

// workbenchOptions are the options of a workbench for exec and repl.
func (f *dataFlags) workbenchOptions() (kiln.WorkbenchOptions, error) {
	dir, err := f.dataDir()
	if err != nil {
		return kiln.WorkbenchOptions{}, err
	}
	name, err := f.sessionName()
	if err != nil {
		return kiln.WorkbenchOptions{}, err
	}
	opts := kiln.WorkbenchOptions{DataDir: dir, SessionID: name, Workspace: f.workspace, Python: f.python,
		ToolTimeout: f.toolTimeout, CPUSeconds: f.cpuSeconds, MaxProcesses: f.maxProcesses, Sandbox: f.sandbox, Network: f.network}
	if opts.MCP, err = mcpServers(f.mcp, f.toolTimeout); err != nil {
		return kiln.WorkbenchOptions{}, err
	}
	if f.cpuSeconds < 0 {
		return kiln.WorkbenchOptions{}, usageError{fmt.Errorf("--cpu-seconds must not be negative, got %d", f.cpuSeconds)}
	}
	if f.maxProcesses < 0 {
		return kiln.WorkbenchOptions{}, usageError{fmt.Errorf("--max-processes must not be negative, got %d", f.maxProcesses)}
	}
	if f.memory != "" {
		if opts.MemoryBytes, err = parseBytes(f.memory); err != nil {
			return kiln.WorkbenchOptions{}, usageError{fmt.Errorf("--memory: %w", err)}
		}
	}
	for _, arg := range f.instructions {
		named, err := kiln.ParseInstructionSource(arg)
		if err != nil {
			return kiln.WorkbenchOptions{}, usageError{err}
		}
		if _, err := os.Stat(named.Path); err != nil {
			return kiln.WorkbenchOptions{}, usageError{fmt.Errorf("--instructions %s: %w", arg, err)}
		}
		opts.Instructions = append(opts.Instructions, named)
	}
	return opts, nil
}

// spareWrapper resolves python ("" for the default) as a workbench or a run would. When
// it is a wrapper, such as a version manager's shim, that runs another interpreter, it
// says so on stderr, unless asJSON, and returns that interpreter, so that the run does
// not start the wrapper again; otherwise it returns python as it is.
func spareWrapper(ctx context.Context, stderr io.Writer, python string, asJSON bool) string {
	p, err := kiln.FindPython(ctx, python)
	if err != nil || p.Wrapper == "" {
		return python
	}
	if !asJSON {
		fmt.Fprintf(stderr, "[kiln] python %s is a wrapper, run at every start to learn that it runs %s: name that with --python or %s to spare it\n",
			p.Wrapper, p.Path, kiln.PythonEnv)
	}
	return p.Path
}
