// Package kiln is a runtime for AI agents that act by writing Python. A Workbench is an
// agent's persistent Python session: cells run in one namespace, in a CPython worker the
// host starts, bounds, interrupts and replaces, over kiln's runtime control protocol.
//
//	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{})
//	if err != nil { … }
//	defer wb.Close()
//	rec, err := wb.Execute(ctx, "x = 20\nx + 1") // rec.Output: [{result 21}]
package kiln

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kilnrt/kiln/internal/ask"
	"github.com/kilnrt/kiln/internal/instructions"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/worker"
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrClosed is an operation on a closed workbench.
	ErrClosed = session.ErrClosed
	// ErrBusy is a cell started while another runs: a workbench runs one at a time.
	ErrBusy = session.ErrBusy
	// ErrNotRunning is an interrupt for a cell that is not running.
	ErrNotRunning = worker.ErrNotRunning
	// ErrLimitUnavailable is a limit the workbench cannot apply: a negative one, or
	// MaxProcesses under a sandbox that makes no cgroup. The error names it.
	ErrLimitUnavailable = session.ErrLimitUnavailable
	// ErrSessionHeld is a session another living host serves: a session has one host at
	// a time. The error says which process holds it.
	ErrSessionHeld = store.ErrLeaseHeld
	// ErrInputInterrupted is an OnInput's answer when the one answering interrupted at
	// the prompt (Ctrl-C): the cell's input() raises KeyboardInterrupt.
	ErrInputInterrupted = ask.ErrInterrupted
)

// WorkbenchOptions configure a workbench. The zero value is ready to use.
type WorkbenchOptions struct {
	// SessionID names the durable session, default "root". A session that exists in the
	// data directory continues: its records go on, in a new generation.
	SessionID string
	// DataDir is the directory of the durable record (created if need be). Empty means an
	// ephemeral record in memory: every host service works alike, and nothing outlives
	// Close.
	DataDir string
	// Workspace is the root of the workspace.* services; default Dir, else the host's
	// working directory.
	Workspace string
	// SkillsDir is the builtin skills root; default $KILN_SKILLS_DIR, else
	// <Workspace>/skills. It may be absent. The managed root is <DataDir>/skills, made
	// on first use; an ephemeral record has none.
	SkillsDir string
	// Instructions are sources of the instruction text beyond kiln's contract and the
	// workspace's AGENTS.md, in order.
	Instructions []InstructionSource
	// OnSpeech is told each local.send of the workbench's cells once it is recorded:
	// confirmed (said to the operator) or held, and why.
	OnSpeech func(Speech)
	// OnInput answers a cell's input() (and sys.stdin.readline()) with the line typed,
	// without its newline, io.EOF at the end of the input, or ErrInputInterrupted
	// (KeyboardInterrupt in the cell); ctx ends with the cell.
	// Nil means no one answers: input() raises EOFError("no one to answer input()
	// here"). The prompt and the answer are recorded as a host request and its reply.
	OnInput func(ctx context.Context, cellID, prompt string) (string, error)
	// MemoryBytes, when positive, limits each generation's address space: a cell that
	// needs more gets MemoryError, and its record's Limit is LimitMemory, as it is when
	// a confining profile's cgroup runs out of memory and the kernel kills the worker or
	// a process the cell started. CPUSeconds,
	// when positive, is the CPU time each cell may use: past it the cell gets
	// CPULimitExceeded, and its record's Limit is LimitCPU; one inside a call that never
	// returns to Python code is hard-stopped 2 s of CPU time later (status failed,
	// namespace lost, Limit LimitCPU). A cell whose ctx deadline interrupts it has Limit
	// LimitTimeout.
	MemoryBytes int64
	CPUSeconds  int
	// MaxProcesses, when positive, is the number of processes and threads each
	// generation, and each workspace command, may have at once: the pids limit of its
	// sandbox's cgroup. A cell refused a fork or a thread past it has Limit
	// LimitProcesses. It needs a confining Sandbox: under SandboxNone OpenWorkbench
	// refuses it.
	MaxProcesses int
	// CellTimeout, when positive, is each cell's wall clock, as a deadline on its ctx
	// is: a cell that runs longer is interrupted, and its record's Limit is
	// LimitTimeout.
	CellTimeout    time.Duration
	Python         string        // interpreter, a path or a name in PATH; default DefaultPython
	Dir            string        // the worker's working directory; default Workspace
	Env            []string      // the worker's environment; nil means the host's
	StartTimeout   time.Duration // spawn to hello; default 10s
	InterruptGrace time.Duration // interrupt to hard stop; default 2s
	Logger         *slog.Logger  // nil discards
	// OnCellStart is told each cell's id and generation once its start is recorded,
	// before it runs; it must return at once.
	OnCellStart func(id, generation string)
	// Tools are Go functions cells call as await tools.<namespace>.<name>(**kwargs).
	Tools []Tool
	// MCP are MCP servers whose tools cells call as await tools.<name>.<tool>(**kwargs).
	MCP []MCPServer
	// ToolTimeout bounds one tool call; default DefaultToolTimeout.
	ToolTimeout time.Duration
	// Sandbox confines the workers and workspace commands: SandboxWorkspace,
	// SandboxStrict or SandboxNone (DefaultSandbox when empty), the first two optionally with
	// ":best-effort". Network is what confined code may reach: "host" (the default),
	// "none", or a comma-separated list of TCP ports.
	Sandbox, Network string
}

// PythonEnv is the environment variable that names the default interpreter.
const PythonEnv = session.PythonEnv

// DefaultPython is the interpreter used when none is given: $KILN_PYTHON, else
// "python3" from PATH, with getenv reading the environment. A virtual environment's
// interpreter (venv/bin/python) sees the environment's site-packages.
func DefaultPython(getenv func(string) string) string { return session.DefaultPython(getenv) }

// Speech is a local.send as recorded: its text, and its receipt.
type Speech struct {
	Text     string
	EffectID int64
	Status   string // "confirmed" or "held"
	EventID  *int64 // the operator-lane event of a confirmed send
	Reason   string // why a send was held
}

// InstructionSource is a named source of the instruction text, read from Path.
type InstructionSource struct {
	Name string
	Path string
}

// Workbench is a persistent Python session. Its worker is replaced by a new generation
// when one dies or is hard-stopped; the record of the cell that ended it says so. Every
// generation, cell, host request and reply is recorded in the session's durable record.
type Workbench struct {
	s *session.Session
}

// OpenWorkbench opens (or creates) the session's durable record and starts the
// workbench's first generation.
func OpenWorkbench(ctx context.Context, opts WorkbenchOptions) (*Workbench, error) {
	cfg := session.Config{ID: opts.SessionID, DataDir: opts.DataDir, Workspace: opts.Workspace,
		SkillsDir: opts.SkillsDir, OnInput: opts.OnInput, MemoryBytes: opts.MemoryBytes,
		CPUSeconds: opts.CPUSeconds, MaxProcesses: opts.MaxProcesses, CellTimeout: opts.CellTimeout, Python: opts.Python, Dir: opts.Dir, Env: opts.Env,
		StartTimeout: opts.StartTimeout, InterruptGrace: opts.InterruptGrace, Logger: opts.Logger,
		OnCellStart: opts.OnCellStart, ToolTimeout: opts.ToolTimeout, MCP: serversTo(opts.MCP),
		Sandbox: opts.Sandbox, Network: opts.Network}
	for _, src := range opts.Instructions {
		named, err := instructions.ParseNamed(src.Name + "=" + src.Path)
		if err != nil {
			return nil, fmt.Errorf("kiln: %w", err)
		}
		cfg.Instructions = append(cfg.Instructions, named)
	}
	cfg.Tools = toolsTo(opts.Tools)
	if opts.OnSpeech != nil {
		cfg.OnSpeech = func(text string, r policy.Receipt) {
			sp := Speech{Text: text, EffectID: r.EffectID, Status: r.Status, EventID: r.EventID}
			if r.Reason != nil {
				sp.Reason = *r.Reason
			}
			opts.OnSpeech(sp)
		}
	}
	s, err := session.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Workbench{s: s}, nil
}

// Execute runs code as the next cell and returns its record. Cancelling ctx interrupts
// the cell. An error means the cell did not run: the workbench is closed or busy, or a
// new generation could not start.
//
// The record is the host's: a cell whose wait the host accepted is yielded whatever the
// worker reported, and a worker's claim of a yield the host did not accept is an error.
func (wb *Workbench) Execute(ctx context.Context, code string) (Record, error) {
	return wb.ExecuteStream(ctx, code, nil)
}

// ExecuteStream is Execute, handing onOutput, when not nil, each piece of stdout and
// stderr as the cell writes it (a line at once, else within 50 ms or 8 KiB), and each
// display as it is shown, with the cell's id, on the caller's goroutine. Every piece is
// handed over before it returns, and the record's output is exactly the pieces, in
// their order (text merged by stream between displays), with the result records.
func (wb *Workbench) ExecuteStream(ctx context.Context, code string, onOutput func(cellID string, out Output)) (Record, error) {
	var watch session.Watch
	if onOutput != nil {
		watch.Output = onOutput
	}
	rec, err := wb.s.Execute(ctx, code, watch)
	if rec.Output == nil {
		rec.Output = []Output{} // shown as [], not null
	}
	return rec, err
}

// Complete returns the names that complete text in the namespace, as Python's own REPL
// completes them: names, keywords and builtins, or an object's attributes after a dot.
// It asks the current generation while no cell runs (ErrBusy otherwise), and is not
// recorded: it changes nothing.
func (wb *Workbench) Complete(ctx context.Context, text string) ([]string, error) {
	return wb.s.Complete(ctx, text)
}

// Interrupt stops the running cell id (as Record.ID names it).
func (wb *Workbench) Interrupt(id string) error { return wb.s.Interrupt(id) }

// InterruptRunning stops whichever cell is running, and returns its id; with none
// running it returns ErrNotRunning. It serves a caller that has no id yet: Execute
// returns the id only once the cell has ended.
func (wb *Workbench) InterruptRunning() (string, error) { return wb.s.InterruptRunning() }

// Input records text as an input on the session's operator lane — what a waiting agent
// wakes on — and returns its event id (event:<id> as evidence). Text ValidSendText
// refuses is ErrInvalidInput, and not recorded. Once recorded, the input's attention is
// decided by the policy the behavior epoch names then, and recorded with it, even if ctx
// ends meanwhile.
func (wb *Workbench) Input(ctx context.Context, text string) (int64, error) {
	return wb.s.Input(ctx, text)
}

// Session is the name of the workbench's durable session.
func (wb *Workbench) Session() string { return wb.s.Name() }

// DataPath is the durable record's database file, or "" for an ephemeral record.
func (wb *Workbench) DataPath() string { return wb.s.DataPath() }

// Generation is the identifier of the current generation, "g-1" for the first.
func (wb *Workbench) Generation() string { return wb.s.Generation() }

// Close shuts the worker down, killing its process group if it has not exited within
// the grace. It returns once the worker's process is reaped, its directory removed, and
// the cell that was running recorded.
func (wb *Workbench) Close() error { return wb.s.Close() }
