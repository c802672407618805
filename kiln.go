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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/ask"
	"github.com/kilnrt/kiln/internal/evidence"
	"github.com/kilnrt/kiln/internal/frontier"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/instructions"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/maintenance"
	"github.com/kilnrt/kiln/internal/orientation"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/remote"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/scratch"
	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/tools"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/internal/wait"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
	"github.com/kilnrt/kiln/internal/workspace"
	kilnpy "github.com/kilnrt/kiln/python"
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrClosed is an operation on a closed workbench.
	ErrClosed = errors.New("kiln: workbench closed")
	// ErrBusy is a cell started while another runs: a workbench runs one at a time.
	ErrBusy = errors.New("kiln: a cell is running")
	// ErrNotRunning is an interrupt for a cell that is not running.
	ErrNotRunning = worker.ErrNotRunning
	// ErrSessionHeld is a session another living host serves: a session has one host at
	// a time. The error says which process holds it.
	ErrSessionHeld = store.ErrLeaseHeld
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
	// without its newline, or io.EOF at the end of the input; ctx ends with the cell.
	// Nil means no one answers: input() raises EOFError("no one to answer input()
	// here"). The prompt and the answer are recorded as a host request and its reply.
	OnInput func(ctx context.Context, cellID, prompt string) (string, error)
	// MemoryBytes, when positive, limits each generation's address space: a cell that
	// needs more gets MemoryError, and its record's Limit is LimitMemory. CPUSeconds,
	// when positive, is the CPU time each cell may use: past it the cell gets
	// CPULimitExceeded, and its record's Limit is LimitCPU; one inside a call that never
	// returns to Python code is hard-stopped 2 s of CPU time later (status failed,
	// namespace lost, Limit LimitCPU). A cell whose ctx deadline interrupts it has Limit
	// LimitTimeout.
	MemoryBytes    int64
	CPUSeconds     int
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

	store       *store.Store             // a record the caller shares and closes; nil opens one
	sandboxHost *sandbox.Host            // a daemon's probe of the kernel; nil probes
	remotes     map[string]remote.Target // the remote.* targets, a daemon's kiln.toml's
	peers       *peer.Service            // a daemon's peers, whose methods a daemon session serves
}

// PythonEnv is the environment variable that names the default interpreter.
const PythonEnv = "KILN_PYTHON"

// DefaultPython is the interpreter used when none is given: $KILN_PYTHON, else
// "python3" from PATH, with getenv reading the environment. A virtual environment's
// interpreter (venv/bin/python) sees the environment's site-packages.
func DefaultPython(getenv func(string) string) string {
	if p := getenv(PythonEnv); p != "" {
		return p
	}
	return "python3"
}

// Speech is a local.send as recorded: its text, and its receipt.
type Speech struct {
	Text     string
	EffectID int64
	Status   string // "confirmed" or "held"
	EventID  *int64 // the operator-lane event of a confirmed send
	Reason   string // why a send was held
}

// workerModules are the Python modules a workbench's workers import, compiled once per
// workbench: the workbench worker and the hooks worker (with kiln_hooks, the SDK its
// policies import), and the cells' limits, which a worker imports only when it has one.
func workerModules() []string { return []string{"kiln.worker", "kiln.hooks", "kiln.limits"} }

// InstructionSource is a named source of the instruction text, read from Path.
type InstructionSource struct {
	Name string
	Path string
}

// Workbench is a persistent Python session. Its worker is replaced by a new generation
// when one dies or is hard-stopped; the record of the cell that ended it says so. Every
// generation, cell, host request and reply is recorded in the session's durable record.
type Workbench struct {
	opts    WorkbenchOptions
	confine confinement
	python  interp.Interpreter
	pkg     *kilnpy.Installer // the worker's Python package, compiled once
	store   *store.Store
	session store.Session
	lease   *store.Lease // the session's, held until Close
	router  *host.Router
	skills  *skills.Service
	extra   []instructions.Named
	instr   instructions.Reader // reads the instruction sources for header
	policy  *policy.Manager
	header  *transcript.Observer // keeps the transcript's instruction header
	adopted *orientation.Reader  // reads the orientation texts adopted for the session
	tools   *toolbox
	inputs  commitSignal // tells a waiting agent of each Input
	routed  atomic.Bool  // an agent with a model route runs: frontier.select schedules its fold
	remote  *remote.Service

	mu       sync.Mutex
	current  *worker.Worker
	told     bool            // a cell's record has said that current has ended
	recorded chan struct{}   // closed once current's end is recorded
	watching sync.WaitGroup  // the goroutines recording generations' ends
	starting chan struct{}   // while a generation starts, closed when it has
	busy     bool            // a cell is running (or its generation starting, or a completion)
	cell     string          // the id of the cell running, once its start is recorded
	last     store.Execution // the last cell started, once one has; a running cell's (busy) to touch
	closed   bool
	// completions counts the completions asked, for their ids.
	completions int
	running     sync.WaitGroup // the Execute calls under way
}

// OpenWorkbench opens (or creates) the session's durable record and starts the
// workbench's first generation.
func OpenWorkbench(ctx context.Context, opts WorkbenchOptions) (_ *Workbench, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kiln: open workbench: %w", err)
	}
	if opts.SessionID == "" {
		opts.SessionID = "root"
	}
	if !wire.ValidIdentifier(opts.SessionID) {
		return nil, fmt.Errorf("kiln: session id %q is not 1..128 of [A-Za-z0-9_.-]", opts.SessionID)
	}
	if opts.Python == "" {
		opts.Python = DefaultPython(os.Getenv)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Workspace == "" {
		opts.Workspace = opts.Dir
	}
	if opts.Workspace == "" {
		if opts.Workspace, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("kiln: workspace: %w", err)
		}
	}
	if opts.Workspace, err = filepath.Abs(opts.Workspace); err != nil {
		return nil, fmt.Errorf("kiln: workspace: %w", err)
	}
	if opts.Dir == "" {
		opts.Dir = opts.Workspace
	}
	if err := isDir("workspace", opts.Workspace); err != nil {
		return nil, err
	}
	if err := isDir("working directory", opts.Dir); err != nil {
		return nil, err
	}
	if opts.SkillsDir == "" {
		opts.SkillsDir = skills.BuiltinRoot(os.Getenv, opts.Workspace)
	}
	roots := skills.Roots{Builtin: opts.SkillsDir}
	if opts.DataDir != "" {
		roots.Managed = skills.ManagedRoot(opts.DataDir)
		if err := os.MkdirAll(roots.Managed, 0o700); err != nil {
			return nil, fmt.Errorf("kiln: managed skills root: %w", err)
		}
	}
	scratch.SweepStale(opts.Logger)
	python, err := interp.Find(ctx, opts.Python)
	if err != nil {
		return nil, err
	}
	pkg, err := kilnpy.Precompiled(ctx, python.Path, workerModules()...)
	if err != nil {
		return nil, err
	}
	wb := &Workbench{opts: opts, python: python, pkg: pkg, skills: &skills.Service{Roots: roots}}
	switch {
	case opts.store != nil:
		wb.store = opts.store
	case opts.DataDir == "":
		wb.store, err = store.Open(ctx, "", store.Options{Logger: opts.Logger})
	default:
		wb.store, err = store.OpenDir(ctx, opts.DataDir, store.Options{Logger: opts.Logger})
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			wb.closeStore()
		}
	}()
	if wb.session, _, err = wb.store.EnsureSession(ctx, opts.SessionID); err != nil {
		return nil, err
	}
	if wb.lease, err = wb.store.AcquireLease(ctx, store.SessionLeaseKey(opts.SessionID)); errors.Is(err, store.ErrLeaseHeld) {
		return nil, fmt.Errorf("kiln: session %s is served by another host: %w", opts.SessionID, err)
	} else if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			wb.lease.Release(context.WithoutCancel(ctx))
		}
	}()
	if h := wb.lease.TookOver; h != nil {
		opts.Logger.Info("the session's earlier host is dead; its lease is taken over", "holder", h.String())
	}
	if abandoned, err := wb.store.EndAbandoned(ctx, wb.session.ID); err != nil {
		return nil, err
	} else if len(abandoned) > 0 {
		opts.Logger.Warn("executions whose host ended before they did are recorded failed", "executions", abandoned)
	}
	if wb.confine, err = newConfinement(ctx, opts.Sandbox, opts.Network, opts.DataDir, opts.sandboxHost, opts.Logger); err != nil {
		return nil, err
	}
	wb.router = host.New(host.Config{Store: wb.store, Session: wb.session, Logger: opts.Logger})
	wb.adopted = orientation.NewReader(wb.store, wb.session.ID)
	wb.router.Handle(wait.Method, wait.Service{})
	wb.router.HandleImmediate(evidence.Method, evidence.Service{})
	ws := &workspace.Service{Root: opts.Workspace, Env: opts.Env, Sandbox: wb.confine.policy, SandboxHost: wb.confine.host}
	wb.router.HandleImmediate(workspace.InfoMethod, ws.Info())
	wb.router.HandleImmediate(skills.IndexMethod, wb.skills.Index())
	wb.router.HandleImmediate(skills.LoadMethod, wb.skills.Load())
	wb.router.Handle(transcript.InstructionsMethod, host.ServiceFunc(transcript.Instructions))
	wb.router.Handle(ask.Method, ask.Service{Answer: opts.OnInput})
	if wb.tools, err = openTools(ctx, opts.Tools, opts.MCP, opts.ToolTimeout, opts.Logger); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			wb.tools.Close()
		}
	}()
	if wb.tools.registry.Len() > 0 {
		wb.router.Handle(tools.Method, tools.Service{Registry: wb.tools.registry})
	}
	if wb.policy, err = policy.NewManager(ctx, wb.store, opts.DataDir, policy.Config{Python: python.Path,
		Package: pkg, SessionID: opts.SessionID, Logger: opts.Logger}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			wb.policy.Close()
		}
	}()
	wb.router.Handle(policy.SendMethod, wb.policy.Send(wb.speech))
	wb.router.Handle(policy.ListMethod, wb.policy.List())
	wb.router.Handle(policy.DescribeMethod, wb.policy.Describe())
	wb.router.Handle(policy.ActivateMethod, wb.policy.ActivateService())
	upkeep := maintenance.Service{Skills: wb.skills.Digests}
	wb.router.Handle(maintenance.OriginateMethod, upkeep.Originate())
	wb.router.Handle(maintenance.AssessMethod, upkeep.Assess())
	wb.router.Handle(orientation.StageMethod, host.ServiceFunc(orientation.Stage))
	wb.router.HandleImmediate(orientation.CurrentMethod, host.ServiceFunc(orientation.Current))
	wb.router.Handle(frontier.Method, frontier.Service{Routed: wb.routed.Load})
	hostName, _ := os.Hostname()
	wb.remote = &remote.Service{Targets: opts.remotes, Getenv: os.Getenv, Host: hostName, Logger: opts.Logger}
	wb.remote.Register(wb.router)
	if opts.peers != nil {
		opts.peers.Register(wb.router)
	}
	wb.policy.Warm()
	if err = wb.policy.PlanUndecided(ctx, wb.session.ID); err != nil {
		return nil, err
	}
	for _, src := range opts.Instructions {
		named, err := instructions.ParseNamed(src.Name + "=" + src.Path)
		if err != nil {
			return nil, fmt.Errorf("kiln: %w", err)
		}
		wb.extra = append(wb.extra, named)
	}
	if wb.header, err = transcript.NewObserver(ctx, transcript.ObserverConfig{Store: wb.store, Session: wb.session.ID,
		Read: wb.instructionSources, Paths: instructions.Paths(opts.Workspace, wb.extra), Explain: wb.explainSource,
		Logger: opts.Logger}); err != nil {
		return nil, err
	}
	wb.router.Handle(workspace.RunMethod, wb.header.Around(ws.Run()))
	wb.router.Handle(orientation.AdoptMethod, wb.header.Around(host.ServiceFunc(orientation.Adopt)))
	if err := wb.header.Observe(ctx, transcript.Actor{Origin: transcript.OriginHost,
		Reason: "noticed as the session opened"}); err != nil {
		return nil, err
	}
	if _, _, err := wb.live(ctx); err != nil {
		return nil, err
	}
	return wb, nil
}

// loaded is what a kernel reset records a generation loaded.
type loaded struct {
	Python        string  `json:"python"`
	PythonVersion string  `json:"python_version"`
	Pid           int     `json:"pid,omitempty"`
	Revision      *string `json:"revision"` // the skills revision the hello echoed
	Workspace     string  `json:"workspace"`
	Dir           string  `json:"dir"`
	// Previous is the generation this one replaces, when it ended with no cell running:
	// no cell's record says why it ended, so this one does.
	Previous *ended `json:"previous,omitempty"`
	// Tools are the tools the generation was offered, as namespace.name.
	Tools []string `json:"tools,omitempty"`
	// Sandbox is what confined the generation's process.
	Sandbox *sandbox.Applied `json:"sandbox,omitempty"`
}

// ended is a generation that ended, and why.
type ended struct {
	Generation string `json:"generation"`
	Cause      string `json:"cause"`
}

// live returns the current generation, starting a new one if there is none, and, when
// the one before it ended with no cell's record saying so, why it ended. It is called by
// the one Execute under way (or by OpenWorkbench), without wb.mu: a start does not hold
// up Interrupt, Generation or Close, and Close waits for it.
func (wb *Workbench) live(ctx context.Context) (*worker.Worker, *ended, error) {
	wb.mu.Lock()
	if wb.closed {
		wb.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if wb.current != nil && wb.current.State() != worker.Dead {
		w := wb.current
		wb.mu.Unlock()
		return w, nil, nil
	}
	var previous *ended
	if wb.current != nil && !wb.told {
		previous = &ended{Generation: wb.current.Generation(), Cause: wb.current.Err().Error()}
	}
	starting := make(chan struct{})
	wb.starting = starting
	recorded := wb.recorded
	wb.mu.Unlock()
	if recorded != nil {
		<-recorded // the end of one generation is recorded before the next starts
	}
	w, err := wb.start(ctx, previous)
	wb.mu.Lock()
	defer wb.mu.Unlock()
	wb.starting = nil
	close(starting)
	if err != nil {
		return nil, nil, err
	}
	wb.current, wb.told = w, false
	wb.recorded = make(chan struct{})
	wb.watching.Add(1)
	go wb.recordEnd(w, wb.recorded)
	if wb.closed { // Close waited for this start, and shuts w down
		return nil, nil, ErrClosed
	}
	return w, previous, nil
}

// recordEnd records w's end in the durable record as soon as the host sees it, with
// its cause (the exit status or signal and stderr tail, or the shutdown), whether or
// not a cell was running; then it closes recorded.
func (wb *Workbench) recordEnd(w *worker.Worker, recorded chan struct{}) {
	defer wb.watching.Done()
	defer close(recorded)
	<-w.Done()
	if err := wb.store.EndGeneration(context.Background(), wb.session.ID, w.Generation(), w.Err().Error()); err != nil {
		wb.opts.Logger.Warn("recording the end of a generation", "generation", w.Generation(), "err", err)
	}
}

// start starts and records a new generation, replacing previous.
func (wb *Workbench) start(ctx context.Context, previous *ended) (*worker.Worker, error) {
	generation, err := wb.store.NextGeneration(ctx, wb.session.ID)
	if err != nil {
		return nil, err
	}
	wb.router.SetGeneration(generation)
	set, err := wb.skills.Scan()
	if err != nil {
		return nil, err
	}
	payload, err := set.Payload()
	if err != nil {
		return nil, err
	}
	w, err := worker.Start(ctx, worker.Config{
		Python:         wb.python.Path,
		Package:        wb.pkg,
		SessionID:      wb.opts.SessionID,
		Generation:     generation,
		Dir:            wb.opts.Dir,
		Env:            wb.opts.Env,
		StartTimeout:   wb.opts.StartTimeout,
		InterruptGrace: wb.opts.InterruptGrace,
		Handler:        wb.router,
		Logger:         wb.opts.Logger,
		Skills:         payload,
		SkillsRevision: set.Revision,
		Tools:          wb.tools.payload,
		MemoryBytes:    wb.opts.MemoryBytes,
		CPUSeconds:     wb.opts.CPUSeconds,
		Sandbox:        wb.confine.with(wb.opts.Workspace),
		SandboxHost:    wb.confine.host,
	})
	what := loaded{Python: wb.python.Path, PythonVersion: wb.python.Version, Workspace: wb.opts.Workspace,
		Dir: wb.opts.Dir, Previous: previous, Tools: wb.tools.names()}
	if err == nil {
		what.Sandbox = new(w.Sandbox())
		wb.router.SetSandbox(what.Sandbox)
		what.Pid = w.Pid()
		what.Revision = w.Revision()
	}
	if _, recErr := wb.store.RecordKernelReset(context.WithoutCancel(ctx), wb.session.ID, generation, what, err); recErr != nil {
		if err == nil {
			w.Shutdown(worker.DefaultShutdownGrace)
		}
		return nil, errors.Join(err, recErr)
	}
	if err != nil {
		return nil, err
	}
	wb.skills.Offer(set) // what the generation loaded is what is offered
	return w, nil
}

// instructionSources reads the instruction text's sources as they are now.
func (wb *Workbench) instructionSources() ([]transcript.Source, error) {
	set, err := wb.skills.Offered()
	if err != nil {
		return nil, err
	}
	adopted, err := wb.adopted.Sources(context.Background())
	if err != nil {
		return nil, err
	}
	return wb.instr.Sources(instructions.Config{Workspace: wb.opts.Workspace,
		Methods: wb.router.Methods(), Skills: set, Extra: wb.extra, Adopted: adopted})
}

// explainSource says what is known of the current text of source, a source no file
// holds.
func (wb *Workbench) explainSource(ctx context.Context, source string) string {
	return orientation.Explain(ctx, wb.store, wb.session.ID, source)
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
	return wb.execute(ctx, code, nil, onOutput, nil)
}

// execute is ExecuteStream, telling started, when not nil, of this call's cell once its
// start is recorded (as OnCellStart is told), and outputDone, when not nil, once every
// piece of output is handed over, before the cell's end is recorded.
func (wb *Workbench) execute(ctx context.Context, code string, started func(cellID, generation string),
	onOutput func(cellID string, out Output), outputDone func()) (Record, error) {
	wb.mu.Lock()
	switch {
	case wb.closed:
		wb.mu.Unlock()
		return Record{}, ErrClosed
	case wb.busy:
		wb.mu.Unlock()
		return Record{}, ErrBusy
	}
	wb.busy = true
	wb.running.Add(1)
	wb.mu.Unlock()
	defer func() {
		wb.mu.Lock()
		wb.busy = false
		wb.mu.Unlock()
		wb.running.Done()
	}()
	w, previous, err := wb.live(ctx)
	if err != nil {
		return Record{}, err
	}
	var exec store.Execution
	if wb.last.CellID == "" {
		exec, err = wb.store.StartExecution(ctx, wb.session.ID, w.Generation(), code)
	} else { // as the session's one host, the workbench knows the cell's number
		exec, err = wb.store.StartNextExecution(ctx, wb.last, w.Generation(), code)
	}
	if err != nil {
		return Record{}, err
	}
	wb.last = exec
	wb.mu.Lock()
	wb.cell = exec.CellID
	wb.mu.Unlock()
	defer func() {
		wb.mu.Lock()
		wb.cell = ""
		wb.mu.Unlock()
	}()
	if wb.opts.OnCellStart != nil {
		wb.opts.OnCellStart(exec.CellID, exec.Generation)
	}
	if started != nil {
		started(exec.CellID, exec.Generation)
	}
	wb.router.Begin(exec.CellID)
	wb.policy.Follow(exec.Behavior) // an activation by another kiln
	wb.policy.Pin(exec.CellID)

	stop := context.AfterFunc(ctx, func() { wb.router.Interrupting(exec.CellID) })
	var deliver func(wire.Output)
	if onOutput != nil {
		deliver = func(o wire.Output) { onOutput(exec.CellID, outputFrom(o)) }
	}
	rec, err := w.ExecuteStream(ctx, exec.CellID, code, deliver)
	if outputDone != nil {
		outputDone()
	}
	rec.Session = wb.session.Name
	stop()
	if errors.Is(err, worker.ErrBusy) {
		err = fmt.Errorf("%w: %w", ErrBusy, err)
	}
	if rec.NamespaceLost { // this record says that w ended
		wb.mu.Lock()
		wb.told = wb.current == w
		wb.mu.Unlock()
	}
	if err == nil && previous != nil {
		rec.NamespaceLost = true
		rec.NamespaceLostReason = fmt.Sprintf("generation %s ended with no cell running (%s), "+
			"so this cell ran in a new namespace, in generation %s", previous.Generation, previous.Cause, w.Generation())
	}
	yielded := wb.router.End(exec.CellID)
	wb.policy.Unpin(exec.CellID)
	end := store.ExecutionEnd{EndedAt: wb.store.Now()}
	rec.StartedAt = exec.StartedAt.UTC()
	rec.DurationMs = max(end.EndedAt.UnixMilli()-exec.StartedAt.UnixMilli(), 0)
	if err != nil { // the cell was never handed to the worker
		msg := err.Error()
		end.Status, end.Error, end.NotRun = worker.StatusFailed, &msg, true
	} else {
		rec = reconcile(rec, yielded, &end)
		if rec.Status == wire.StatusInterrupted && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			rec.Limit = worker.LimitTimeout
		}
		end.Status, end.TruncatedBytes, end.Error, end.NamespaceLost = rec.Status, rec.TruncatedBytes, rec.Error, rec.NamespaceLost
		end.NotRun, end.Limit = rec.NotRun, rec.Limit
		if rec.Exception != nil {
			end.Exception, _ = json.Marshal(rec.Exception, json.Deterministic(true))
		}
		if rec.RawStdout != nil || rec.RawStderr != nil {
			end.Raw, _ = json.Marshal(rawTails{rec.RawStdout, rec.RawStderr}, json.Deterministic(true))
		}
		output := rec.Output
		if output == nil {
			output = []wire.Output{}
		}
		end.Output, _ = json.Marshal(output, json.Deterministic(true))
	}
	if recErr := wb.store.EndExecution(context.WithoutCancel(ctx), exec, end); recErr != nil {
		return recordFrom(rec), errors.Join(err, fmt.Errorf("kiln: recording the end of %s: %w", exec.CellID, recErr))
	}
	actor := transcript.Actor{Origin: transcript.OriginHost, Reason: "noticed when execution " + exec.CellID + " ended"}
	if obsErr := wb.header.Observe(context.WithoutCancel(ctx), actor); obsErr != nil {
		wb.opts.Logger.Warn("observing the instruction text", "execution", exec.CellID, "err", obsErr)
	}
	return recordFrom(rec), err
}

// rawTails is how the durable record keeps a cell's raw output tails.
type rawTails struct {
	Stdout *worker.RawTail `json:"stdout,omitempty"`
	Stderr *worker.RawTail `json:"stderr,omitempty"`
}

// reconcile makes the worker's record the host's: yielded exactly when the host accepted
// a wait of the cell.
func reconcile(rec worker.Record, yielded bool, end *store.ExecutionEnd) worker.Record {
	switch {
	case yielded && rec.Status != wire.StatusYielded:
		end.ReportedStatus = rec.Status
		rec.Status = wire.StatusYielded
	case !yielded && rec.Status == wire.StatusYielded:
		end.ReportedStatus = rec.Status
		msg := "the worker reported a yield the host did not accept: no wait of this cell was accepted"
		rec.Status, rec.Error = wire.StatusError, &msg
	}
	return rec
}

// Complete returns the names that complete text in the namespace, as Python's own REPL
// completes them: names, keywords and builtins, or an object's attributes after a dot.
// It asks the current generation while no cell runs (ErrBusy otherwise), and is not
// recorded: it changes nothing.
func (wb *Workbench) Complete(ctx context.Context, text string) ([]string, error) {
	wb.mu.Lock()
	if wb.closed {
		wb.mu.Unlock()
		return nil, ErrClosed
	}
	if wb.busy || wb.current == nil {
		wb.mu.Unlock()
		return nil, fmt.Errorf("%w: a cell is running", ErrBusy)
	}
	w := wb.current
	wb.completions++
	id := fmt.Sprintf("k-%d", wb.completions)
	wb.busy = true // no cell starts meanwhile
	wb.mu.Unlock()
	defer func() {
		wb.mu.Lock()
		wb.busy = false
		wb.mu.Unlock()
	}()
	return w.Complete(ctx, id, text)
}

// Interrupt stops the running cell id (as Record.ID names it).
func (wb *Workbench) Interrupt(id string) error {
	wb.mu.Lock()
	w := wb.current
	wb.mu.Unlock()
	if w == nil {
		return fmt.Errorf("%w: %q", ErrNotRunning, id)
	}
	wb.router.Interrupting(id)
	return w.Interrupt(id)
}

// InterruptRunning stops whichever cell is running, and returns its id; with none
// running it returns ErrNotRunning. It serves a caller that has no id yet: Execute
// returns the id only once the cell has ended.
func (wb *Workbench) InterruptRunning() (string, error) {
	wb.mu.Lock()
	id := wb.cell
	wb.mu.Unlock()
	if id == "" {
		return "", fmt.Errorf("%w: no cell is running", ErrNotRunning)
	}
	return id, wb.Interrupt(id)
}

// Input records text as an input on the session's operator lane — what a waiting agent
// wakes on — and returns its event id (event:<id> as evidence). Text ValidSendText
// refuses is ErrInvalidInput, and not recorded. Once recorded, the input's attention is
// decided by the policy the behavior epoch names then, and recorded with it, even if ctx
// ends meanwhile.
func (wb *Workbench) Input(ctx context.Context, text string) (int64, error) {
	if err := ValidSendText(text); err != nil {
		return 0, err
	}
	ev, err := wb.store.AppendEvent(ctx, wb.session.ID, store.SourceOperator, map[string]string{"text": text})
	if err != nil {
		return 0, err
	}
	_, err = wb.policy.PlanEvent(context.WithoutCancel(ctx), ev)
	wb.inputs.notify()
	return ev.ID, err
}

// deliver decides the attention of ev, an input another session recorded for this one,
// and wakes the agent for it.
func (wb *Workbench) deliver(ctx context.Context, ev store.Event) error {
	_, err := wb.policy.PlanEvent(ctx, ev)
	wb.inputs.notify()
	return err
}

// speech hands a recorded local.send to OnSpeech.
func (wb *Workbench) speech(text string, r policy.Receipt) {
	if wb.opts.OnSpeech == nil {
		return
	}
	sp := Speech{Text: text, EffectID: r.EffectID, Status: r.Status, EventID: r.EventID}
	if r.Reason != nil {
		sp.Reason = *r.Reason
	}
	wb.opts.OnSpeech(sp)
}

// Session is the name of the workbench's durable session.
func (wb *Workbench) Session() string { return wb.session.Name }

// DataPath is the durable record's database file, or "" for an ephemeral record.
func (wb *Workbench) DataPath() string { return wb.store.Path() }

// Generation is the identifier of the current generation, "g-1" for the first.
func (wb *Workbench) Generation() string {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if wb.current == nil {
		return ""
	}
	return wb.current.Generation()
}

// Close shuts the worker down, killing its process group if it has not exited within
// the grace. It returns once the worker's process is reaped, its directory removed, and
// the cell that was running recorded.
func (wb *Workbench) Close() error {
	wb.mu.Lock()
	if wb.closed {
		wb.mu.Unlock()
		return nil
	}
	wb.closed = true
	starting := wb.starting
	wb.mu.Unlock()
	if starting != nil {
		<-starting
	}
	wb.mu.Lock()
	w := wb.current
	wb.mu.Unlock()
	var err error
	if w != nil {
		err = w.Shutdown(worker.DefaultShutdownGrace)
	}
	wb.running.Wait()
	wb.watching.Wait()
	wb.policy.Close()
	wb.tools.Close()
	wb.remote.Close()
	return errors.Join(err, wb.lease.Release(context.Background()), wb.closeStore())
}

// closeStore closes the record unless the caller shares it.
func (wb *Workbench) closeStore() error {
	if wb.opts.store != nil {
		return nil
	}
	return wb.store.Close()
}

// isDir checks that path, the folder named what, is a directory that exists.
func isDir(what, path string) error {
	info, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("kiln: %s: %w", what, err)
	case !info.IsDir():
		return fmt.Errorf("kiln: %s %s is not a directory", what, path)
	}
	return nil
}
