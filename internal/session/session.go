// Package session builds and runs one kiln session: a workbench worker and its
// generations, the hooks worker behind the policy, the host services cells call, the
// transcript's instruction header, the tool registry, and the durable record they all
// write. One constructor, Open, serves both the embedding API (package kiln) and the
// daemon (internal/serve). The host request methods a session serves are one table,
// Methods, in methods.go.
package session

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
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/instructions"
	"github.com/kilnrt/kiln/internal/interp"
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
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
	"github.com/kilnrt/kiln/internal/workspace"
	"github.com/kilnrt/kiln/internal/zygote"
	kilnpy "github.com/kilnrt/kiln/python"
)

// Errors a caller tells apart with errors.Is. Their text is the embedding API's, which
// names them too.
var (
	// ErrClosed is an operation on a closed session.
	ErrClosed = errors.New("kiln: workbench closed")
	// ErrBusy is a cell started while another runs: a session runs one at a time.
	ErrBusy = errors.New("kiln: a cell is running")
	// ErrInvalidInput is an input's text that is not 1..policy.MaxSendText characters of
	// UTF-8.
	ErrInvalidInput = errors.New("kiln: invalid input")
	// ErrLimitUnavailable is a limit the session cannot apply: a negative one, or one
	// its sandbox profile has no mechanism for. The error names it.
	ErrLimitUnavailable = errors.New("kiln: a limit that cannot be applied")
)

// DefaultID is the session a Config without an ID opens.
const DefaultID = "root"

// PythonEnv is the environment variable that names the default interpreter.
const PythonEnv = "KILN_PYTHON"

// DefaultPython is the interpreter used when none is given: $KILN_PYTHON, else
// "python3" from PATH, with getenv reading the environment.
func DefaultPython(getenv func(string) string) string {
	if p := getenv(PythonEnv); p != "" {
		return p
	}
	return "python3"
}

// Config configures a session. The zero value opens the ephemeral session "root".
type Config struct {
	// ID names the durable session, default DefaultID. A session that exists in the
	// record continues, in a new generation.
	ID string
	// DataDir is the directory of the durable record and of the managed skills root.
	// Empty, with no Store, means an ephemeral record in memory.
	DataDir string
	// Hide are more directories the session's children cannot reach, beside DataDir:
	// the sockets of a record kept on a database server, say.
	Hide []string
	// Store is a record the caller shares and closes (a daemon's); nil opens DataDir's.
	Store *store.Store
	// Workspace is the root of the workspace.* services; default Dir, else the host's
	// working directory.
	Workspace string
	// SkillsDir is the builtin skills root; default $KILN_SKILLS_DIR, else
	// <Workspace>/skills.
	SkillsDir string
	// Instructions are sources of the instruction text beyond kiln's contract and the
	// workspace's AGENTS.md, in order.
	Instructions []instructions.Named
	// OnSpeech is told each local.send once it is recorded, with its receipt.
	OnSpeech func(text string, r policy.Receipt)
	// OnInput answers a cell's input(); nil means no one answers (EOFError).
	OnInput func(ctx context.Context, cellID, prompt string) (string, error)
	// MemoryBytes and CPUSeconds, when positive, limit each generation's address space
	// and each cell's CPU time. Under a confining profile MemoryBytes is also the
	// memory of the cgroup each generation and each workspace command runs in; under
	// none, the address space of each workspace command.
	MemoryBytes int64
	CPUSeconds  int
	// MaxProcesses, when positive, is the number of tasks (processes and threads) each
	// generation and each workspace command may have at once: the pids limit of the
	// cgroup a confining profile makes. A profile that confines nothing cannot apply
	// it: Open refuses it with ErrLimitUnavailable.
	MaxProcesses int
	// CellTimeout, when positive, is each cell's wall clock: a cell that runs longer is
	// interrupted, and its record's limit is timeout, as when its ctx's deadline passes.
	CellTimeout time.Duration
	// Packages, when set, holds the workers' Python package compiled once per
	// interpreter for the sessions of one host; nil compiles it for this session.
	Packages *Packages
	// Zygotes, when set, forks the workbench's generations and its hooks workers from a
	// zygote of its interpreter shared by the sessions of one host; nil spawns each.
	Zygotes        *zygote.Pool
	Python         string        // interpreter, a path or a name in PATH; default DefaultPython
	Dir            string        // the worker's working directory; default Workspace
	Env            []string      // the worker's environment; nil means the host's
	StartTimeout   time.Duration // spawn to hello; default the worker's
	InterruptGrace time.Duration // interrupt to hard stop; default the worker's
	Logger         *slog.Logger  // nil discards
	// OnCellStart is told each cell's id and generation once its start is recorded,
	// before it runs; it must return at once.
	OnCellStart func(id, generation string)
	// Tools are Go functions, and MCP the MCP servers, whose tools cells call as
	// await tools.<namespace>.<name>(**kwargs).
	Tools []tools.Tool
	MCP   []tools.Server
	// ToolTimeout bounds one tool call; default tools.DefaultCallTimeout.
	ToolTimeout time.Duration
	// Sandbox confines the workers and workspace commands: a profile of internal/sandbox
	// (DefaultSandbox when empty), optionally with ":best-effort". Network is what
	// confined code may reach: "host" (the default), "none", or a comma-separated list
	// of TCP ports.
	Sandbox, Network string
	// SandboxHost is a daemon's probe of the kernel, shared by its sessions; nil probes.
	SandboxHost *sandbox.Host
	// Remotes are the targets remote.* reaches (a daemon's kiln.toml's); nil has none.
	Remotes map[string]remote.Target
	// RemoteTokens reads the remotes' tokens by their token_env: the values a daemon
	// read as it started, since no process it starts may have them; nil is os.Getenv.
	RemoteTokens func(string) string
	// Peers are a daemon's peers, whose methods the session serves; nil serves none.
	Peers *peer.Service
}

// workerModules are the Python modules a session's workers import, compiled once per
// session: the workbench worker and the hooks worker (with kiln_hooks, the SDK its
// policies import), the cells' limits, which a worker imports only when it has one, and
// the zygote that forks workbench workers (with its confinement).
func workerModules() []string {
	return []string{"kiln.worker", "kiln.hooks", "kiln.limits", "kiln.zygote"}
}

// Session is a persistent Python session. Its worker is replaced by a new generation
// when one dies or is hard-stopped; the record of the cell that ended it says so. Every
// generation, cell, host request and reply is recorded in the session's durable record.
type Session struct {
	cfg     Config
	confine Confinement
	python  interp.Interpreter
	pkg     *kilnpy.Installer // the worker's Python package, compiled once
	store   *store.Store
	session store.Session
	lease   *store.Lease // the session's, held until Close
	router  *host.Router
	skills  *skills.Service
	instr   instructions.Reader // reads the instruction sources for header
	policy  *policy.Manager
	header  *transcript.Observer // keeps the transcript's instruction header
	adopted *orientation.Reader  // reads the orientation texts adopted for the session
	tools   *Toolbox
	inputs  signal      // tells a waiting agent of each Input
	routed  atomic.Bool // an agent with a model route runs: frontier.select schedules its fold
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

// Open opens (or creates) the session's durable record, builds its host services from
// the Methods table, and starts its first generation.
func Open(ctx context.Context, cfg Config) (_ *Session, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kiln: open workbench: %w", err)
	}
	if cfg.ID == "" {
		cfg.ID = DefaultID
	}
	if !wire.ValidIdentifier(cfg.ID) {
		return nil, fmt.Errorf("kiln: session id %q is not 1..128 of [A-Za-z0-9_.-]", cfg.ID)
	}
	if cfg.Python == "" {
		cfg.Python = DefaultPython(os.Getenv)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Workspace == "" {
		cfg.Workspace = cfg.Dir
	}
	if cfg.Workspace == "" {
		if cfg.Workspace, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("kiln: workspace: %w", err)
		}
	}
	if cfg.Workspace, err = filepath.Abs(cfg.Workspace); err != nil {
		return nil, fmt.Errorf("kiln: workspace: %w", err)
	}
	if cfg.Dir == "" {
		cfg.Dir = cfg.Workspace
	}
	if err := isDir("workspace", cfg.Workspace); err != nil {
		return nil, err
	}
	if err := isDir("working directory", cfg.Dir); err != nil {
		return nil, err
	}
	if cfg.SkillsDir == "" {
		cfg.SkillsDir = skills.BuiltinRoot(os.Getenv, cfg.Workspace)
	}
	roots := skills.Roots{Builtin: cfg.SkillsDir}
	if cfg.DataDir != "" {
		roots.Managed = skills.ManagedRoot(cfg.DataDir)
		if err := os.MkdirAll(roots.Managed, 0o700); err != nil {
			return nil, fmt.Errorf("kiln: managed skills root: %w", err)
		}
	}
	if cfg.Packages != nil {
		cfg.Packages.swept.Do(func() { scratch.SweepStale(cfg.Logger) })
	} else {
		scratch.SweepStale(cfg.Logger)
	}
	python, err := interp.Find(ctx, cfg.Python)
	if err != nil {
		return nil, err
	}
	var pkg *kilnpy.Installer
	if cfg.Packages != nil {
		pkg, err = cfg.Packages.installer(ctx, python.Path)
	} else {
		pkg, err = kilnpy.Precompiled(ctx, python.Path, workerModules()...)
	}
	if err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg, python: python, pkg: pkg, skills: &skills.Service{Roots: roots}}
	switch {
	case cfg.Store != nil:
		s.store = cfg.Store
	case cfg.DataDir == "":
		s.store, err = store.Open(ctx, "", store.Options{Logger: cfg.Logger})
	default:
		s.store, err = store.OpenDir(ctx, cfg.DataDir, store.Options{Logger: cfg.Logger})
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.closeStore()
		}
	}()
	held, err := s.store.HoldSession(ctx, cfg.ID)
	if errors.Is(err, store.ErrLeaseHeld) {
		return nil, fmt.Errorf("kiln: session %s is served by another host: %w", cfg.ID, err)
	} else if err != nil {
		return nil, err
	}
	s.session, s.lease = held.Session, held.Lease
	defer func() {
		if err != nil {
			s.lease.Release(context.WithoutCancel(ctx))
		}
	}()
	if h := s.lease.TookOver; h != nil {
		cfg.Logger.Info("the session's earlier host is dead; its lease is taken over", "holder", h.String())
	}
	if len(held.Abandoned) > 0 {
		cfg.Logger.Warn("executions whose host ended before they did are recorded failed", "executions", held.Abandoned)
	}
	if s.confine, err = NewConfinement(ctx, cfg.Sandbox, cfg.Network, cfg.DataDir, cfg.SandboxHost, false, cfg.Logger); err != nil {
		return nil, err
	}
	s.confine.Policy.Hide = append(s.confine.Policy.Hide, cfg.Hide...)
	if err = s.confine.limit(cfg.MemoryBytes, cfg.CPUSeconds, cfg.MaxProcesses); err != nil {
		return nil, err
	}
	if s.tools, err = OpenToolbox(ctx, cfg.Tools, cfg.MCP, cfg.ToolTimeout, cfg.Logger); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.tools.Close()
		}
	}()
	pcfg := policy.Config{Python: python.Path, Package: pkg, SessionID: cfg.ID, Logger: cfg.Logger}
	if cfg.Zygotes != nil {
		pcfg.Forker = cfg.Zygotes
	}
	if s.policy, err = policy.NewManager(ctx, s.store, cfg.DataDir, pcfg); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.policy.Close()
		}
	}()
	s.adopted = orientation.NewReader(s.store, s.session.ID)
	if s.header, err = transcript.NewObserver(ctx, transcript.ObserverConfig{Store: s.store, Session: s.session.ID,
		Read: s.InstructionSources, Paths: instructions.Paths(cfg.Workspace, cfg.Instructions), Explain: s.explainSource,
		Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	s.router = host.New(host.Config{Store: s.store, Session: s.session, Logger: cfg.Logger})
	hostName, _ := os.Hostname()
	tokens := cfg.RemoteTokens
	if tokens == nil {
		tokens = os.Getenv
	}
	s.remote = &remote.Service{Targets: cfg.Remotes, Getenv: tokens, Host: hostName, Logger: cfg.Logger}
	svc := &Services{Remotes: s.remote, Store: s.store, Session: s.session, Workspace: &workspace.Service{Root: cfg.Workspace, Env: cfg.Env,
		Sandbox: s.confine.Policy, SandboxHost: s.confine.Host},
		Skills: s.skills, Policy: s.policy, Tools: s.tools.Registry(), Header: s.header, OnInput: cfg.OnInput,
		OnSpeech: s.speech, IsRouted: s.routed.Load, PeerService: cfg.Peers}
	svc.Workspace.Sandbox.Python = python.Path // commands reach the session's interpreter, as its cells do
	s.router.Register(Methods(svc)...)
	if err = s.policy.PlanUndecided(ctx, s.session.ID); err != nil {
		return nil, err
	}
	if err := s.header.Observe(ctx, transcript.Actor{Origin: transcript.OriginHost,
		Reason: "noticed as the session opened"}); err != nil {
		return nil, err
	}
	if _, _, err := s.live(ctx); err != nil {
		return nil, err
	}
	return s, nil
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
// the one Execute under way (or by OpenWorkbench), without s.mu: a start does not hold
// up Interrupt, Generation or Close, and Close waits for it.
func (s *Session) live(ctx context.Context) (*worker.Worker, *ended, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if s.current != nil && s.current.State() != worker.Dead {
		w := s.current
		s.mu.Unlock()
		return w, nil, nil
	}
	var previous *ended
	if s.current != nil && !s.told {
		previous = &ended{Generation: s.current.Generation(), Cause: s.current.Err().Error()}
	}
	starting := make(chan struct{})
	s.starting = starting
	recorded := s.recorded
	s.mu.Unlock()
	if recorded != nil {
		<-recorded // the end of one generation is recorded before the next starts
	}
	w, err := s.start(ctx, previous)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starting = nil
	close(starting)
	if err != nil {
		return nil, nil, err
	}
	s.current, s.told = w, false
	s.recorded = make(chan struct{})
	s.watching.Add(1)
	go s.recordEnd(w, s.recorded)
	if s.closed { // Close waited for this start, and shuts w down
		return nil, nil, ErrClosed
	}
	return w, previous, nil
}

// recordEnd records w's end in the durable record as soon as the host sees it, with
// its cause (the exit status or signal and stderr tail, or the shutdown), whether or
// not a cell was running; then it closes recorded.
func (s *Session) recordEnd(w *worker.Worker, recorded chan struct{}) {
	defer s.watching.Done()
	defer close(recorded)
	<-w.Done()
	if err := s.store.EndGeneration(context.Background(), s.session.ID, w.Generation(), w.Err().Error()); err != nil {
		s.cfg.Logger.Warn("recording the end of a generation", "generation", w.Generation(), "err", err)
	}
}

// start starts and records a new generation, replacing previous.
func (s *Session) start(ctx context.Context, previous *ended) (*worker.Worker, error) {
	generation, err := s.store.NextGeneration(ctx, s.session.ID)
	if err != nil {
		return nil, err
	}
	s.router.SetGeneration(generation)
	set, err := s.skills.Scan()
	if err != nil {
		return nil, err
	}
	payload, err := set.Payload()
	if err != nil {
		return nil, err
	}
	wcfg := worker.Config{
		Python:         s.python.Path,
		Package:        s.pkg,
		SessionID:      s.cfg.ID,
		Generation:     generation,
		Dir:            s.cfg.Dir,
		Env:            s.cfg.Env,
		StartTimeout:   s.cfg.StartTimeout,
		InterruptGrace: s.cfg.InterruptGrace,
		Handler:        s.router,
		Logger:         s.cfg.Logger,
		Skills:         payload,
		SkillsRevision: set.Revision,
		Tools:          s.tools.payload,
		MemoryBytes:    s.cfg.MemoryBytes,
		CPUSeconds:     s.cfg.CPUSeconds,
		Sandbox:        s.confine.With(s.cfg.Workspace),
		SandboxHost:    s.confine.Host,
	}
	if s.cfg.Zygotes != nil {
		wcfg.Forker = s.cfg.Zygotes
	}
	w, err := worker.Start(ctx, wcfg)
	what := loaded{Python: s.python.Path, PythonVersion: s.python.Version, Workspace: s.cfg.Workspace,
		Dir: s.cfg.Dir, Previous: previous, Tools: s.tools.names()}
	if err == nil {
		what.Sandbox = new(w.Sandbox())
		s.router.SetSandbox(what.Sandbox)
		what.Pid = w.Pid()
		what.Revision = w.Revision()
	}
	if _, recErr := s.store.RecordKernelReset(context.WithoutCancel(ctx), s.session.ID, generation, what, err); recErr != nil {
		if err == nil {
			w.Shutdown(worker.DefaultShutdownGrace)
		}
		return nil, errors.Join(err, recErr)
	}
	if err != nil {
		return nil, err
	}
	s.skills.Offer(set) // what the generation loaded is what is offered
	return w, nil
}

// InstructionSources reads the instruction text's sources as they are now.
func (s *Session) InstructionSources() ([]transcript.Source, error) {
	set, err := s.skills.Offered()
	if err != nil {
		return nil, err
	}
	adopted, err := s.adopted.Sources(context.Background())
	if err != nil {
		return nil, err
	}
	return s.instr.Sources(instructions.Config{Workspace: s.cfg.Workspace,
		Methods: s.router.Methods(), Skills: set, Extra: s.cfg.Instructions, Adopted: adopted})
}

// explainSource says what is known of the current text of source, a source no file
// holds.
func (s *Session) explainSource(ctx context.Context, source string) string {
	return orientation.Explain(ctx, s.store, s.session.ID, source)
}

// SetRouted says an agent with a model route now runs the session: frontier.select
// schedules its fold from then on.
func (s *Session) SetRouted() { s.routed.Store(true) }

// Watch is what one Execute tells its caller as the cell runs; each func may be nil.
type Watch struct {
	// Started is told this call's cell's id and generation once its start is recorded
	// (after Config.OnCellStart), before the cell runs.
	Started func(cellID, generation string)
	// Output is handed each piece of stdout and stderr as the cell writes it (a line at
	// once, else within 50 ms or 8 KiB), and each display as it is shown, on the
	// caller's goroutine. Every piece is handed over before Execute returns, and the
	// record's output is exactly the pieces, in their order (text merged by stream
	// between displays), with the result records.
	Output func(cellID string, out wire.Output)
	// OutputDone is told once every piece of output is handed over, before the cell's
	// end is recorded.
	OutputDone func()
	// Ended is told, once the cell's end is recorded, its execution as the record now
	// reads (store.Execution.Ended), and the generation of the cell before it when this
	// session started that one too ("" when it did not).
	Ended func(ended store.Execution, previousGeneration string)
	// Gate, when set, is asked after Started whether the cell may run, and may wait for
	// a decision: an error ends the cell failed, not run, its text the cell's error.
	Gate func(ctx context.Context, cellID string) error
}

// Execute runs code as the next cell and returns its record. Cancelling ctx interrupts
// the cell. An error means the cell did not run: the session is closed (ErrClosed) or
// busy (ErrBusy), or a new generation could not start.
//
// The record is the host's: a cell whose wait the host accepted is yielded whatever the
// worker reported, and a worker's claim of a yield the host did not accept is an error.
func (s *Session) Execute(ctx context.Context, code string, watch Watch) (worker.Record, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return worker.Record{}, ErrClosed
	case s.busy:
		s.mu.Unlock()
		return worker.Record{}, ErrBusy
	}
	s.busy = true
	s.running.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy = false
		s.mu.Unlock()
		s.running.Done()
	}()
	w, previous, err := s.live(ctx)
	if err != nil {
		return worker.Record{}, err
	}
	// A change found now is not the cell's: one found as it ends is.
	s.observeHeader(ctx, transcript.Actor{Origin: transcript.OriginHost, Reason: "noticed as a cell was about to start"})
	var exec store.Execution
	previousGeneration := s.last.Generation
	if s.last.CellID == "" {
		exec, err = s.store.StartExecution(ctx, s.session.ID, w.Generation(), code)
	} else { // as the session's one host, the workbench knows the cell's number
		exec, err = s.store.StartNextExecution(ctx, s.last, w.Generation(), code)
	}
	if err != nil {
		return worker.Record{}, err
	}
	s.last = exec
	s.mu.Lock()
	s.cell = exec.CellID
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cell = ""
		s.mu.Unlock()
	}()
	if s.cfg.OnCellStart != nil {
		s.cfg.OnCellStart(exec.CellID, exec.Generation)
	}
	if watch.Started != nil {
		watch.Started(exec.CellID, exec.Generation)
	}
	s.router.Begin(exec.CellID)
	s.policy.Follow(exec.Behavior) // an activation by another kiln
	s.policy.Pin(exec.CellID)

	if s.cfg.CellTimeout > 0 { // from the cell's start: its generation's start is not the cell's
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CellTimeout)
		defer cancel()
	}
	stop := context.AfterFunc(ctx, func() { s.router.Interrupting(exec.CellID) })
	var deliver func(wire.Output)
	if watch.Output != nil {
		deliver = func(o wire.Output) { watch.Output(exec.CellID, o) }
	}
	var rec worker.Record
	if watch.Gate != nil {
		err = watch.Gate(ctx, exec.CellID)
	}
	if err == nil {
		rec, err = w.ExecuteStream(ctx, exec.CellID, code, deliver)
	}
	if watch.OutputDone != nil {
		watch.OutputDone()
	}
	rec.Session = s.session.Name
	stop()
	if errors.Is(err, worker.ErrBusy) {
		err = fmt.Errorf("%w: %w", ErrBusy, err)
	}
	if rec.NamespaceLost { // this record says that w ended
		s.mu.Lock()
		s.told = s.current == w
		s.mu.Unlock()
	}
	if err == nil && previous != nil {
		rec.NamespaceLost = true
		rec.NamespaceLostReason = fmt.Sprintf("generation %s ended with no cell running (%s), "+
			"so this cell ran in a new namespace, in generation %s", previous.Generation, previous.Cause, w.Generation())
	}
	yielded := s.router.End(exec.CellID)
	s.policy.Unpin(exec.CellID)
	end := store.ExecutionEnd{EndedAt: s.store.Now()}
	rec.StartedAt = exec.StartedAt.UTC()
	rec.DurationMs = max(end.EndedAt.UnixMilli()-exec.StartedAt.UnixMilli(), 0)
	if err != nil { // the cell was never handed to the worker
		msg := err.Error()
		end.Status, end.Error, end.NotRun = string(worker.StatusFailed), &msg, true
	} else {
		rec = reconcile(rec, yielded, &end)
		if rec.Status == wire.StatusInterrupted && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			rec.Limit = worker.LimitTimeout
		}
		end.Status, end.TruncatedBytes, end.Error, end.NamespaceLost = string(rec.Status), rec.TruncatedBytes, rec.Error, rec.NamespaceLost
		end.NotRun, end.Limit = rec.NotRun, string(rec.Limit)
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
	if recErr := s.store.EndExecution(context.WithoutCancel(ctx), exec, end); recErr != nil {
		return rec, errors.Join(err, fmt.Errorf("kiln: recording the end of %s: %w", exec.CellID, recErr))
	}
	if watch.Ended != nil {
		watch.Ended(exec.Ended(end), previousGeneration)
	}
	s.observeHeader(context.WithoutCancel(ctx), transcript.Actor{Origin: transcript.OriginSession, ExecutionID: exec.CellID,
		Reason: "found when execution " + exec.CellID + " ended, unchanged as it started"})
	return rec, err
}

// observeHeader observes the instruction text by actor; a failure is logged, and the
// cell goes on.
func (s *Session) observeHeader(ctx context.Context, actor transcript.Actor) {
	if err := s.header.Observe(ctx, actor); err != nil {
		s.cfg.Logger.Warn("observing the instruction text", "actor", actor.Reason, "err", err)
	}
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
		end.ReportedStatus = string(rec.Status)
		rec.Status = wire.StatusYielded
	case !yielded && rec.Status == wire.StatusYielded:
		end.ReportedStatus = string(rec.Status)
		msg := "the worker reported a yield the host did not accept: no wait of this cell was accepted"
		rec.Status, rec.Error = wire.StatusError, &msg
	}
	return rec
}

// Complete returns the names that complete text in the namespace, as Python's own REPL
// completes them: names, keywords and builtins, or an object's attributes after a dot.
// It asks the current generation while no cell runs (ErrBusy otherwise), and is not
// recorded: it changes nothing.
func (s *Session) Complete(ctx context.Context, text string) ([]string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.busy || s.current == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: a cell is running", ErrBusy)
	}
	w := s.current
	s.completions++
	id := fmt.Sprintf("k-%d", s.completions)
	s.busy = true // no cell starts meanwhile
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy = false
		s.mu.Unlock()
	}()
	return w.Complete(ctx, id, text)
}

// Interrupt stops the running cell id (as Record.ID names it).
func (s *Session) Interrupt(id string) error {
	s.mu.Lock()
	w := s.current
	s.mu.Unlock()
	if w == nil {
		return fmt.Errorf("%w: %q", worker.ErrNotRunning, id)
	}
	s.router.Interrupting(id)
	return w.Interrupt(id)
}

// InterruptRunning stops whichever cell is running, and returns its id; with none
// running it returns ErrNotRunning. It serves a caller that has no id yet: Execute
// returns the id only once the cell has ended.
func (s *Session) InterruptRunning() (string, error) {
	s.mu.Lock()
	id := s.cell
	s.mu.Unlock()
	if id == "" {
		return "", fmt.Errorf("%w: no cell is running", worker.ErrNotRunning)
	}
	return id, s.Interrupt(id)
}

// Input records text as an input on the session's operator lane — what a waiting agent
// wakes on — and returns its event id (event:<id> as evidence). Text ValidSendText
// refuses is ErrInvalidInput, and not recorded. Once recorded, the input's attention is
// decided by the policy the behavior epoch names then, and recorded with it, even if ctx
// ends meanwhile.
func (s *Session) Input(ctx context.Context, text string) (int64, error) {
	if err := ValidSendText(text); err != nil {
		return 0, err
	}
	ev, err := s.store.AppendEvent(ctx, s.session.ID, store.SourceOperator, map[string]string{"text": text})
	if err != nil {
		return 0, err
	}
	_, err = s.policy.PlanEvent(context.WithoutCancel(ctx), ev)
	s.inputs.notify()
	return ev.ID, err
}

// Deliver decides the attention of ev, an input another session recorded for this one,
// and wakes the agent for it.
func (s *Session) Deliver(ctx context.Context, ev store.Event) error {
	_, err := s.policy.PlanEvent(ctx, ev)
	s.inputs.notify()
	return err
}

// speech hands a recorded local.send to OnSpeech.
func (s *Session) speech(text string, r policy.Receipt) {
	if s.cfg.OnSpeech != nil {
		s.cfg.OnSpeech(text, r)
	}
}

// ValidSendText checks text against the bound of an operator input and of the agent's
// own local.send: valid UTF-8, 1..policy.MaxSendText characters. An error is
// ErrInvalidInput, saying which part of the rule the text breaks.
func ValidSendText(text string) error {
	if err := policy.ValidSendText(text); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return nil
}

// Name is the name of the durable session.
func (s *Session) Name() string { return s.session.Name }

// Record is the session's row in the durable record.
func (s *Session) Record() store.Session { return s.session }

// Peers are the daemon's peers the session serves, nil when it serves none.
func (s *Session) Peers() *peer.Service { return s.cfg.Peers }

// Store is the session's durable record.
func (s *Session) Store() *store.Store { return s.store }

// ReviewExecution asks the execution.review entrypoint of the policy cell runs under
// whether it may run code, for turn of the session's agent; ok is false when that
// policy's release names no such entrypoint.
func (s *Session) ReviewExecution(ctx context.Context, turn int64, cell, code string) (r policy.Review, ok bool) {
	return s.policy.Pinned(cell).ReviewExecution(ctx, turn, cell, code)
}

// Dir is the directory the session's cells run in, absolute.
func (s *Session) Dir() string { return s.cfg.Dir }

// Logger is the session's logger.
func (s *Session) Logger() *slog.Logger { return s.cfg.Logger }

// Header keeps the transcript's instruction header: the agent observes it at a fold.
func (s *Session) Header() *transcript.Observer { return s.header }

// InputsChanged returns a channel closed at the session's next Input: how an agent
// with no daemon learns of inputs.
func (s *Session) InputsChanged() <-chan struct{} { return s.inputs.changed() }

// DataPath is the durable record's database file, or "" for an ephemeral record.
func (s *Session) DataPath() string { return s.store.Path() }

// Generation is the identifier of the current generation, "g-1" for the first.
func (s *Session) Generation() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		return ""
	}
	return s.current.Generation()
}

// Sandbox is what confines the current generation; nil when none is live.
func (s *Session) Sandbox() *sandbox.Applied {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		return nil
	}
	return new(s.current.Sandbox())
}

// Close shuts the worker down, killing its process group if it has not exited within
// the grace. It returns once the worker's process is reaped, its directory removed, and
// the cell that was running recorded.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	starting := s.starting
	s.mu.Unlock()
	if starting != nil {
		<-starting
	}
	s.mu.Lock()
	w := s.current
	s.mu.Unlock()
	var err error
	if w != nil {
		err = w.Shutdown(worker.DefaultShutdownGrace)
	}
	s.running.Wait()
	s.watching.Wait()
	s.policy.Close()
	s.tools.Close()
	s.remote.Close()
	return errors.Join(err, s.lease.Release(context.Background()), s.closeStore())
}

// closeStore closes the record unless the caller shares it.
func (s *Session) closeStore() error {
	if s.cfg.Store != nil {
		return nil
	}
	return s.store.Close()
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

// signal tells waiters of a session's own inputs.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// changed returns a channel closed at the next notify.
func (c *signal) changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// notify closes the channel changed returned, if any.
func (c *signal) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}
